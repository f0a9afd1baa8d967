"""The SQL shell (``oncestream sql``): statement splitting, ksqlDB-CLI tables, ``-e`` / ``-f``
against the real REST server (in-memory engine), and the interactive loop driven through
prompt-toolkit's pipe input."""

from __future__ import annotations

import argparse
import io
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prompt_toolkit import PromptSession
from prompt_toolkit.history import FileHistory
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from oncestream.cli import build_parser
from oncestream.sql.language.parser import parse
from oncestream.sql.language.parser import split_statement_texts as split_statements
from oncestream.sql.server import shell
from oncestream.sql.server.shell import render_entity, render_table
from tests.unit.sql.test_rest_support import RunningServer, running_server


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with running_server() as srv:
        srv.engine.publish("S", [1, "a"])
        srv.engine.publish("S", [2, None])
        yield srv


def run_shell(argv: list[str], server: RunningServer,
              session_factory: Callable[[Path], PromptSession[str]] | None = None) -> tuple[int, str, str]:
    args = build_parser().parse_args(["sql", "--server", server.url, *argv])
    out, err = io.StringIO(), io.StringIO()
    code = shell.run(args, out=out, err=err, session_factory=session_factory)
    return code, out.getvalue(), err.getvalue()


# --- splitting -----------------------------------------------------------------------------------------


def test_split_statements_respects_quotes_and_comments() -> None:
    text = ("CREATE STREAM S (A STRING) WITH (KAFKA_TOPIC='a;b', VALUE_FORMAT='JSON');\n"
            "-- a comment; with a semicolon\n"
            "SELECT `x;y`, 'it''s; fine' /* ; */ FROM S EMIT CHANGES;  SHOW")
    statements, rest = split_statements(text)
    assert statements == ["CREATE STREAM S (A STRING) WITH (KAFKA_TOPIC='a;b', VALUE_FORMAT='JSON');",
                          "-- a comment; with a semicolon\nSELECT `x;y`, 'it''s; fine' /* ; */ FROM S EMIT CHANGES;"]
    assert rest == "  SHOW"


def test_split_statements_skips_empty_ones_and_comment_only_rest() -> None:
    assert split_statements(";;  SHOW STREAMS ;\n-- done") == (["SHOW STREAMS ;"], "")
    assert split_statements("SELECT 'unterminated;") == ([], "SELECT 'unterminated;")


def test_split_statements_keeps_an_open_comment_or_quote_in_the_rest() -> None:
    assert split_statements("SHOW STREAMS; SELECT /* open ; ") == (["SHOW STREAMS;"], " SELECT /* open ; ")
    assert split_statements("SHOW TOPICS; SELECT `x; ") == (["SHOW TOPICS;"], " SELECT `x; ")


def test_every_split_statement_is_one_statement_for_the_server() -> None:
    # the shell cuts with the parser's tokenizer, so each piece parses as exactly one statement
    text = ("CREATE STREAM S (A STRING) WITH (KAFKA_TOPIC='a;b', VALUE_FORMAT='JSON'); -- x;y\n"
            "SELECT `x;y`, 'it''s; fine' /* ; */ FROM S EMIT CHANGES;\nSHOW STREAMS;")
    statements, rest = split_statements(text)
    assert rest == ""
    assert [len(parse(s)) for s in statements] == [1, 1, 1]
    assert [s.text for s in parse(text)] == [parse(s)[0].text for s in statements]


def test_first_word_skips_comments() -> None:
    assert shell.first_word("/* hi */ -- x\n select * from s;") == "SELECT"


# --- rendering -----------------------------------------------------------------------------------------


def test_tables_look_like_ksqldb_cli_tables() -> None:
    assert render_table(["Stream Name", "Windowed"], [["S", False], ["LONGER_NAME_X", None]]) == (
        " Stream Name   | Windowed\n"
        "--------------------------\n"
        " S             | false\n"
        " LONGER_NAME_X | null\n"
        "--------------------------")


def test_entities_render_by_type() -> None:
    status = {"@type": "currentStatus", "commandStatus": {"message": "Stream created"}, "warnings": [{"message": "w1"}]}
    assert render_entity(status) == " Message\n----------------\n Stream created\n----------------\nWARNING: w1"
    described = render_entity({"@type": "sourceDescription", "sourceDescription": {
        "name": "S", "type": "STREAM", "keyFormat": "KAFKA", "valueFormat": "JSON", "topic": "s", "partitions": 1,
        "replication": 1, "fields": [{"name": "ID", "schema": {"type": "INTEGER"}, "type": "KEY"},
                                     {"name": "NAME", "schema": {"type": "STRING"}}]}})
    assert " ID    | INTEGER (key)" in described
    assert "Kafka topic         : s (partitions: 1, replication: 1)" in described
    assert '"@type": "mystery"' in render_entity({"@type": "mystery"})
    both = render_entity({"@type": "source_descriptions", "sourceDescriptions": [{"name": "A"}, {"name": "B"}]})
    assert "Name                : A" in both
    assert "Name                : B" in both
    assert " SUBSTRING     | STRING" in render_entity({"@type": "function_names", "functions": [
        {"name": "SUBSTRING", "type": "SCALAR", "category": "STRING"}]})
    explained = render_entity({"@type": "queryDescription", "queryDescription": {
        "id": "CSAS_X_1", "queryType": "PERSISTENT", "statementText": "CREATE STREAM X AS SELECT * FROM S;",
        "state": "ERROR", "fields": [], "sources": ["S"], "sinks": ["X"],
        "queryErrors": [{"errorMessage": "boom", "type": "USER"}]}})
    assert "Status              : ERROR" in explained
    assert "  boom" in explained


# --- -e and -f -----------------------------------------------------------------------------------------


def test_execute_runs_statements_and_streams_queries_until_limit(server: RunningServer) -> None:
    code, out, err = run_shell(["-e", "SHOW STREAMS; SET 'auto.offset.reset'='earliest';\n"
                                      "SELECT * FROM S EMIT CHANGES LIMIT 2;"], server)
    assert (code, err) == (0, "")
    assert " Stream Name | Kafka Topic | Key Format | Value Format | Windowed" in out
    assert out.endswith("+------------+------------+\n"
                        "|ID          |NAME        |\n"
                        "+------------+------------+\n"
                        "|1           |a           |\n"
                        "|2           |null        |\n"
                        "Limit Reached\n"
                        "Query terminated\n")
    assert server.engine.query_properties[-1] == {"auto.offset.reset": "earliest"}
    assert server.engine.queries[list(server.engine.queries)[-1]].closed.is_set()


def test_execute_stops_at_the_first_error_with_exit_code_1(server: RunningServer) -> None:
    executed = len(server.engine.executed)
    code, out, err = run_shell(["-e", "CREATE STREAM A (X INT) A; FAIL here; CREATE STREAM B (X INT) B;"], server)
    assert code == 1
    assert err == "Cannot do here\n"
    assert "Executed CREATE" in out
    assert [e[0] for e in server.engine.executed[executed:]] == ["CREATE STREAM A (X INT) A;", "FAIL here;"]


def test_properties_are_sent_with_statements_and_unset_removes_them(server: RunningServer) -> None:
    code, _, _ = run_shell(["-p", "ksql.streams.auto.offset.reset=earliest", "-e",
                            "SHOW STREAMS; UNSET 'ksql.streams.auto.offset.reset'; SHOW STREAMS;"], server)
    assert code == 0
    assert [e[1] for e in server.engine.executed[-2:]] == [{"ksql.streams.auto.offset.reset": "earliest"}, {}]


def test_file_runs_its_statements(server: RunningServer, tmp_path: Path) -> None:
    script = tmp_path / "script.sql"
    script.write_text("-- setup\nCREATE STREAM F (X INT)\n  F;\nSHOW STREAMS;\n", encoding="utf-8")
    code, _out, err = run_shell(["-f", str(script)], server)
    assert (code, err) == (0, "")
    assert server.engine.executed[-2][0] == "-- setup\nCREATE STREAM F (X INT)\n  F;"


def test_unreachable_server_is_exit_code_1() -> None:
    args = argparse.Namespace(server="http://127.0.0.1:9", execute="SHOW STREAMS;", file=None, property=None,
                              history_file=None)
    err = io.StringIO()
    assert shell.run(args, out=io.StringIO(), err=err) == 1
    assert err.getvalue().startswith("Cannot reach the SQL server at http://127.0.0.1:9")


# --- interactive ---------------------------------------------------------------------------------------


def test_interactive_multi_line_statements_history_and_exit(server: RunningServer, tmp_path: Path) -> None:
    history = tmp_path / "history"
    executed = len(server.engine.executed)
    with create_pipe_input() as pipe:
        pipe.send_text("SHOW\r  STREAMS;\rCREATE STREAM I (X INT) I; FAIL x;\rhelp\rexit\r")

        def session(path: Path) -> PromptSession[str]:
            return PromptSession(input=pipe, output=DummyOutput(), history=FileHistory(str(path)))

        code, out, err = run_shell(["--history-file", str(history)], server, session_factory=session)
    assert code == 0
    assert [e[0] for e in server.engine.executed[executed:]] == ["SHOW\n  STREAMS;", "CREATE STREAM I (X INT) I;",
                                                                 "FAIL x;"]
    assert "Stream Name" in out
    assert "Executed CREATE" in out
    assert "Ctrl-D" in out
    assert err == "Cannot do x\n"
    assert "SHOW" in history.read_text()
    assert "exit" in history.read_text()


def test_interactive_ends_at_end_of_input(server: RunningServer, tmp_path: Path) -> None:
    with create_pipe_input() as pipe:
        pipe.send_text("SHOW STREAMS;\r")
        pipe.close()

        def session(path: Path) -> PromptSession[str]:
            return PromptSession(input=pipe, output=DummyOutput(), history=FileHistory(str(path)))

        code, out, _ = run_shell(["--history-file", str(tmp_path / "h")], server, session_factory=session)
    assert code == 0
    assert "Stream Name" in out


def test_missing_file_is_exit_code_1(server: RunningServer, tmp_path: Path) -> None:
    code, _, err = run_shell(["-f", str(tmp_path / "nope.sql")], server)
    assert code == 1
    assert err.startswith(f"Cannot read {tmp_path / 'nope.sql'}")


def test_query_header_schema_splits_into_columns_even_with_nested_types() -> None:
    """The shell names its columns from the /query-stream ``vnd.ksql.v1+json`` header's schema."""
    from oncestream.sql.server.rest.client import _split_column, _split_schema

    schema = "`ID` INTEGER, `S` STRUCT<`A` INTEGER, `B, C` MAP<STRING, DECIMAL(4, 2)>>, `N` STRING"
    assert [_split_column(c) for c in _split_schema(schema)] == [
        ("ID", "INTEGER"), ("S", "STRUCT<`A` INTEGER, `B, C` MAP<STRING, DECIMAL(4, 2)>>"), ("N", "STRING")]


def test_run_script_runs_a_files_statements(server: RunningServer, tmp_path: Path) -> None:
    script = tmp_path / "inner.sql"
    script.write_text("CREATE STREAM R (X INT) R;\n", encoding="utf-8")
    code, _out, err = run_shell(["-e", f"RUN SCRIPT '{script}'; run script 'missing.sql';"], server)
    assert code == 1
    assert server.engine.executed[-1][0] == "CREATE STREAM R (X INT) R;"
    assert err.startswith("Cannot read missing.sql")
    code, _, err = run_shell(["-e", "RUN 'x';"], server)
    assert (code, err) == (1, "Usage: RUN SCRIPT '<file>';\n")


def test_variables_are_the_shells_and_substituted_before_sending(server: RunningServer) -> None:
    code, out, err = run_shell(["-e", "DEFINE src = 'S'; DEFINE other = '${src}_2'; UNDEFINE nope; SHOW VARIABLES; "
                                      "DESCRIBE ${src}; UNDEFINE src; DESCRIBE ${src};"], server)
    assert code == 1
    assert "WARNING: Cannot undefine variable 'nope' which was never defined" in out
    assert " other         | S_2\n src           | S\n" in out
    # Sent as substituted (the server never sees ${src}); the undefined one is refused by the shell.
    assert [e[0] for e in server.engine.executed[-1:]] == ["DESCRIBE S;"]
    assert err.strip() == ("Illegal argument at Line: 1, Col: 10. Identifier names cannot start with '@' and may "
                           "only contain alphanumeric values and '_'.")


def test_variables_and_types_render_as_tables() -> None:
    assert render_entity({"@type": "variables", "variables": [{"name": "a", "value": "1"}]}).splitlines()[::2] == \
        [" Variable Name | Value", " a             | 1"]
    types = render_entity({"@type": "type_list", "types": {"ADDR": {"type": "STRUCT", "fields": [
        {"name": "N", "schema": {"type": "INTEGER"}}, {"name": "L", "schema": {"type": "ARRAY",
                                                                                 "memberSchema": {"type": "STRING"}}}]}}})
    assert types.splitlines()[2] == " ADDR      | STRUCT<`N` INTEGER, `L` ARRAY<STRING>>"
