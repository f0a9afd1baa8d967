"""Whatever text a client sends, the parser answers statements or ``errors.ParseError`` (which the
REST layer turns into a 400 statement_error), never another exception; and every statement it
returns has its own text and a position inside the request."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncestream.sql.errors import ParseError
from oncestream.sql.language.parser import parse, parse_expression

T = TypeVar("T")

# Fragments of ksqlDB (and of other SQL) so that random sequences get deep into the grammar.
FRAGMENTS = [
    "SELECT", "*", "FROM", "s", "a", "b", "->", "[", "]", "(", ")", ",", ";", "'x'", "'a;b'", "1", "-", "2.5",
    "WHERE", "=", "AND", "OR", "NOT", "GROUP BY", "PARTITION BY", "HAVING", "EMIT", "CHANGES", "FINAL", "LIMIT",
    "WINDOW", "TUMBLING", "HOPPING", "SESSION", "SIZE", "ADVANCE", "BY", "RETENTION", "GRACE", "PERIOD",
    "SECONDS", "HOUR", "JOIN", "LEFT", "ON", "WITHIN", "CREATE", "STREAM", "TABLE", "WITH", "AS", "KEY",
    "PRIMARY", "INT", "ARRAY", "<", ">", "MAP", "STRUCT", "DECIMAL", "INSERT", "INTO", "VALUES", "DROP",
    "TERMINATE", "ALL", "SHOW", "LIST", "DESCRIBE", "EXPLAIN", "SET", "UNSET", "CASE", "WHEN", "THEN", "ELSE",
    "END", "CAST", "=>", ":=", "`q`", '"d"', "--c\n", "/*c*/", "IS", "NULL", "IN", "BETWEEN", "LIKE", "||", "+",
    "x.y", ".", "::", "{", "}", "@", "?", "$", "#", "TRUE", "DATE", "INTERVAL", "DISTINCT", "OVER", "ORDER BY",
    "UNION", "1e5", "0x1F", "x'00'", "\\", "'", "`", '"', "/*", "\n",
]

# Valid statements, to be cut and spliced: most of the grammar's error paths are one token away.
VALID = [
    "CREATE STREAM s (id INT KEY, m MAP<STRING, ARRAY<STRUCT<a INT>>>) WITH (KAFKA_TOPIC='t', VALUE_FORMAT='JSON');",
    "CREATE TABLE t WITH (PARTITIONS=2) AS SELECT k, COUNT(*) AS n FROM s WINDOW HOPPING (SIZE 1 HOUR, "
    "ADVANCE BY 5 MINUTES, GRACE PERIOD 1 MINUTE) WHERE a->b > 1 GROUP BY k HAVING COUNT(*) > 2 EMIT CHANGES;",
    "SELECT a.x, b.y AS z, CAST(q AS DECIMAL(4, 2)), arr[1], m['k'], TRANSFORM(arr, v => v + 1) FROM a "
    "LEFT JOIN b WITHIN (1 SECOND, 2 SECONDS) GRACE PERIOD 3 SECONDS ON a.id = b.id PARTITION BY a.x EMIT CHANGES LIMIT 4;",
    "INSERT INTO t (a, b) VALUES (1, 'x;y'); INSERT INTO t WITH (QUERY_ID='q') SELECT * FROM s EMIT CHANGES;",
    "DROP TABLE IF EXISTS t DELETE TOPIC; TERMINATE ALL; SHOW QUERIES EXTENDED; DESCRIBE s EXTENDED; EXPLAIN q1;",
    "SET 'auto.offset.reset'='earliest'; UNSET 'x'; DESCRIBE FUNCTION f; LIST TOPICS;",
]


@st.composite
def spliced(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(VALID))
    for _ in range(draw(st.integers(1, 3))):
        start = draw(st.integers(0, len(text)))
        end = draw(st.integers(start, min(len(text), start + 12)))
        text = text[:start] + draw(st.sampled_from(["", " ", *FRAGMENTS])) + text[end:]
    return text


texts = st.one_of(
    st.lists(st.sampled_from(FRAGMENTS), max_size=30).map(" ".join),
    st.text(max_size=60),
    spliced(),
)


def test_the_splice_sources_are_valid() -> None:
    for text in VALID:
        assert parse(text)


def parsed_or_error(parse_fn: Callable[[str], T], text: str) -> T | ParseError:
    """What ``parse_fn`` makes of ``text``, or the ParseError it raised (either is a valid outcome)."""
    try:
        return parse_fn(text)
    except ParseError as e:
        return e


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts)
def test_random_requests_parse_or_raise_parse_error(text: str) -> None:
    statements = parsed_or_error(parse, text)
    if isinstance(statements, ParseError):
        assert statements.line >= 1
        assert statements.column >= 1
        assert statements.line <= text.count("\n") + 1
        assert statements.statement_text is not None
        return
    for statement in statements:
        assert statement.text.endswith(";")
        lines = text.split("\n")
        line = lines[statement.position.line - 1]
        # the statement's text starts where its position says (up to the end of that line)
        head = statement.text.split("\n")[0]
        assert line[statement.position.column - 1:].startswith(head.rstrip(";")) or head == ";"


@settings(max_examples=300, deadline=None)
@given(texts)
def test_random_expressions_parse_or_raise_parse_error(text: str) -> None:
    outcome = parsed_or_error(parse_expression, text)
    if isinstance(outcome, ParseError):
        assert outcome.line >= 1
        assert outcome.column >= 1
