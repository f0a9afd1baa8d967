"""ksqlDB's text of a rewritten CREATE ... AS SELECT (SqlFormatter), which its engine's errors
carry after ``Statement:`` (group-by.json's KAFKA key format refusals), and the conformance
runner's comparison of an expected message with that text."""

from __future__ import annotations

import pytest

from oncestream.sql.conformance.case_runner import _injected_topic, _refused, in_script, renamed
from oncestream.sql.errors import StatementError
from oncestream.sql.language import sql_ast
from oncestream.sql.language.analyzer import analyze_query
from oncestream.sql.language.parser import parse
from oncestream.sql.language.statement_text import create_as_text
from oncestream.sql.server.metastore import Metastore
from tests.support.narrow import of_type

BASE = ("CREATE STREAM TEST (f1 INT KEY, f2 INT, f3 DECIMAL(2, 1)) WITH (kafka_topic='test_topic', "
        "value_format='JSON');")
TOPICS = {"test_topic": 1}


def _metastore() -> Metastore:
    ms = Metastore()
    (s,) = parse(BASE)
    ms.apply(ms.validate(s, {}, TOPICS), 0)
    return ms


def _text(sql: str) -> str | None:
    ms = _metastore()
    stmt = of_type(parse(sql)[0], sql_ast.CreateAsSelect, sql)
    source = ms.source("TEST")
    assert source is not None
    sources = {"TEST": source}
    return create_as_text(stmt, analyze_query(stmt.query, sources, sink=stmt.name))


def test_select_items_in_written_order_with_generated_names_and_qualified_columns():
    assert _text("CREATE TABLE OUTPUT AS SELECT f2, f1, f2+f1, COUNT(*) FROM TEST GROUP BY f1, f2;") == (
        "CREATE TABLE OUTPUT AS SELECT\n  TEST.F2 F2,\n  TEST.F1 F1,\n  (TEST.F2 + TEST.F1) KSQL_COL_0,\n"
        "  COUNT(*) KSQL_COL_1\nFROM TEST TEST\nGROUP BY TEST.F1, TEST.F2\nEMIT CHANGES")


def test_with_clause_where_and_having():
    assert _text("CREATE TABLE OUTPUT WITH (KEY_FORMAT='KAFKA') AS SELECT f1 AS k1, COUNT(*) AS total FROM TEST "
                 "WHERE f2 > 1 GROUP BY f1 HAVING COUNT(*) > 2;") == (
        "CREATE TABLE OUTPUT WITH (KEY_FORMAT='KAFKA') AS SELECT\n  TEST.F1 K1,\n  COUNT(*) TOTAL\nFROM TEST TEST\n"
        "WHERE (TEST.F2 > 1)\nGROUP BY TEST.F1\nHAVING (COUNT(*) > 2)\nEMIT CHANGES")


def test_shapes_it_does_not_print():
    assert _text("CREATE STREAM OUT2 AS SELECT * FROM TEST;") is None
    assert _text("CREATE TABLE OUT3 AS SELECT f1, COUNT(*) AS c FROM TEST WINDOW TUMBLING (SIZE 1 SECOND) "
                 "GROUP BY f1;") is None


def test_a_sink_key_format_refusal_carries_the_rewritten_statement():
    """group-by.json "multiple expressions - KAFKA to non-supported decimal key format"."""
    ms = _metastore()
    (s,) = parse("CREATE TABLE OUTPUT AS SELECT f3 AS key, COUNT(*) AS total FROM TEST GROUP BY f3;")
    with pytest.raises(StatementError, match="Key format does not support schema") as info:
        ms.validate(s, {}, TOPICS)
    assert info.value.statement_text == ("CREATE TABLE OUTPUT AS SELECT\n  TEST.F3 KEY,\n  COUNT(*) TOTAL\n"
                                         "FROM TEST TEST\nGROUP BY TEST.F3\nEMIT CHANGES")


def test_the_runner_compares_with_the_statement_text_without_its_injected_topic():
    (parsed,) = parse("CREATE TABLE OUTPUT AS SELECT f1, COUNT(*) AS c FROM TEST GROUP BY f1;")
    statement = renamed(parsed, "qtt7_")
    injected = _injected_topic(parsed, statement)
    assert injected == "KAFKA_TOPIC='qtt7_OUTPUT'"
    error = StatementError("refused", statement_text="CREATE TABLE OUTPUT WITH (KAFKA_TOPIC='qtt7_OUTPUT') AS SELECT x")
    assert _refused(error, injected).details == "refused\nStatement: CREATE TABLE OUTPUT AS SELECT x"
    (named,) = parse("CREATE TABLE OUTPUT WITH (KAFKA_TOPIC='out') AS SELECT f1, COUNT(*) AS c FROM TEST GROUP BY f1;")
    assert _injected_topic(named, renamed(named, "qtt7_")) is None
    assert _refused(StatementError("no text")).details is None


def test_a_syntax_error_line_counts_the_statements_before_it():
    """group-by.json "with groupings": ksqlDB's test parses the case's statements joined by
    newlines, so the second statement's error is on line 2."""
    assert in_script("line 1:74: Syntax Error\nmissing ')' at ','", 1) == "line 2:74: Syntax Error\nmissing ')' at ','"
    assert in_script("line 1:5: Syntax Error\nx line 1:3", 0) == "line 1:5: Syntax Error\nx line 1:3"
    # cast.json "to null": the NoViableAlt wording names the line in its text too
    assert in_script("line 1:47: Syntax Error\nSyntax error at or near 'NULL' at line 1:47", 1) == \
        "line 2:47: Syntax Error\nSyntax error at or near 'NULL' at line 2:47"
    assert in_script("Line: 1, Col: 3: refused", 2) == "Line: 1, Col: 3: refused"
