"""ksqlDB's variables: DEFINE / UNDEFINE / SHOW VARIABLES parsed, ``${name}`` substituted before a
statement is parsed (oncestream.sql.language.parser.variables), and a ``/ksql`` request's
statements run with them in order (oncestream.sql.server.statements)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from oncestream.sql.errors import KsqlError, ParseError, StatementError
from oncestream.sql.language import sql_ast
from oncestream.sql.language.parser import parse, parse_request
from oncestream.sql.language.parser.variables import SessionVariables
from oncestream.sql.server.metastore import Metastore
from oncestream.sql.server.statements import StatementExecutor


def resolve(text: str, variables: dict[str, str]) -> sql_ast.Statement:
    (pending,) = parse_request(text)
    return pending.resolve(SessionVariables(variables))


def test_define_and_undefine_parse() -> None:
    define, undefine, show = parse("DEFINE myVar = 'it''s';  UNDEFINE myVar; LIST VARIABLES;")
    assert define == sql_ast.DefineVariable(text="DEFINE myVar = 'it''s';", position=define.position,
                                            name="myVar", value="it's")
    assert isinstance(undefine, sql_ast.UndefineVariable)
    assert undefine.name == "myVar"
    assert isinstance(show, sql_ast.Show)
    assert show.what is sql_ast.ShowWhat.VARIABLES


@pytest.mark.parametrize("text", ["DEFINE 'x' = 'y';", "DEFINE x = 5;", "DEFINE `x` = 'y';", "UNDEFINE;"])
def test_define_takes_a_plain_name_and_a_string(text: str) -> None:
    with pytest.raises(ParseError):
        parse(text)


def test_references_are_substituted_as_names_literals_and_inside_strings() -> None:
    statement = resolve("SELECT ${Col}, '${greeting} world' FROM ${src} WHERE n > ${limit} EMIT CHANGES;",
                        {"col": "NAME", "GREETING": "it's", "src": "pageviews", "limit": "5"})
    assert statement.text == "SELECT NAME, 'it''s world' FROM pageviews WHERE n > 5 EMIT CHANGES;"
    assert isinstance(statement, sql_ast.QueryStatement)


def test_quoted_string_value_is_a_literal_and_an_unknown_name_in_a_string_stays() -> None:
    statement = resolve("INSERT INTO s (a, b) VALUES (${v}, '${unknown}');", {"v": "'x''y'"})
    assert statement.text == "INSERT INTO s (a, b) VALUES ('x''y', '${unknown}');"


def test_undefined_reference_is_ksqldbs_illegal_argument() -> None:
    with pytest.raises(StatementError) as name_error:
        resolve("SELECT * FROM ${nope} EMIT CHANGES;", {})
    assert name_error.value.message == ("Illegal argument at Line: 1, Col: 15. Identifier names cannot start with "
                                        "'@' and may only contain alphanumeric values and '_'.")
    with pytest.raises(StatementError) as literal_error:
        resolve("SELECT * FROM s WHERE a = ${nope} EMIT CHANGES;", {})
    assert literal_error.value.message == "Illegal argument at Line: 1, Col: 27."


def test_value_that_is_neither_name_nor_literal_is_refused() -> None:
    with pytest.raises(StatementError, match="Illegal argument at Line: 1, Col: 27"):
        resolve("SELECT * FROM s WHERE a = ${v};", {"v": "1; DROP STREAM s"})


def test_statements_without_references_still_fail_the_whole_request_first() -> None:
    with pytest.raises(ParseError):
        parse_request("DEFINE a = 'b'; SELECT FORM s;")
    pending = parse_request("DEFINE a = 'b'; SELECT * FROM ${a};")
    assert pending[0].parsed is not None
    assert pending[1].parsed is None


def test_session_variables_are_case_insensitive_and_keep_the_first_spelling() -> None:
    variables = SessionVariables({"Abc": 1})
    variables.define("ABC", "2")
    variables.define("b", "3")
    assert list(variables.items()) == [("Abc", "2"), ("b", "3")]
    assert variables.undefine("aBc")
    assert not variables.undefine("abc")


# --- the executor ------------------------------------------------------------------------------------

def executor(server_properties: dict[str, Any] | None = None) -> StatementExecutor:
    # Only what running variable statements and a refused SELECT reads of the node.
    context = SimpleNamespace(check_ready=lambda: None, runner=None, snapshot=Metastore,
                              settings=SimpleNamespace(properties=server_properties or {}))
    return StatementExecutor(context, None, None, None)  # type: ignore[arg-type]


def run(ex: StatementExecutor, ksql: str, properties: dict[str, Any] | None = None,
        session: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return asyncio.run(ex.execute(ksql, properties or {}, None, session))


def test_request_defines_lists_and_undefines() -> None:
    entities = run(executor(), "DEFINE a = 'x'; DEFINE B = '1'; SHOW VARIABLES; UNDEFINE a; UNDEFINE nope; "
                   "LIST VARIABLES;", session={"s": 7})
    assert entities == [
        {"@type": "variables", "statementText": "SHOW VARIABLES;", "warnings": [],
         "variables": [{"name": "a", "value": "x"}, {"name": "B", "value": "1"}, {"name": "s", "value": "7"}]},
        {"@type": "warning_entity", "statementText": "UNDEFINE nope;", "warnings": [],
         "message": "Cannot undefine variable 'nope' which was never defined"},
        {"@type": "variables", "statementText": "LIST VARIABLES;", "warnings": [],
         "variables": [{"name": "B", "value": "1"}, {"name": "s", "value": "7"}]},
    ]


def test_a_define_counts_for_the_later_statements_of_the_request() -> None:
    with pytest.raises(KsqlError) as raised:
        run(executor(), "DEFINE src = 'pageviews'; SELECT * FROM ${src} EMIT CHANGES;")
    # Refused as any SELECT on /ksql is, with the substituted text.
    assert raised.value.statement_text == "SELECT * FROM pageviews EMIT CHANGES;"
    with pytest.raises(StatementError, match="Illegal argument at Line: 1, Col: 29") as undefined:
        run(executor(), "UNDEFINE src; SELECT * FROM ${src} EMIT CHANGES;", session={"src": "p"})
    assert undefined.value.statement_text == "SELECT * FROM ${src} EMIT CHANGES;"


@pytest.mark.parametrize(("request_value", "server_value"), [(False, None), ("false", True), (None, "false")])
def test_substitution_can_be_disabled(request_value: Any, server_value: Any) -> None:
    properties = {} if request_value is None else {"ksql.variable.substitution.enable": request_value}
    server = {} if server_value is None else {"ksql.variable.substitution.enable": server_value}
    with pytest.raises(ParseError):   # ${src} is then parsed as written
        run(executor(server), "SELECT * FROM ${src} EMIT CHANGES;", properties, {"src": "p"})
