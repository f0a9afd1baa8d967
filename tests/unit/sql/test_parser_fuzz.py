"""Whatever text a client sends, the parser answers statements or ``errors.ParseError`` (which the
REST layer turns into a 400 statement_error), never another exception; and every statement it
returns has its own text and a position inside the request."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncestream.sql.errors import ParseError
from oncestream.sql.parser import parse, parse_expression

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

texts = st.one_of(
    st.lists(st.sampled_from(FRAGMENTS), max_size=30).map(" ".join),
    st.text(max_size=60),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts)
def test_random_requests_parse_or_raise_parse_error(text: str) -> None:
    try:
        statements = parse(text)
    except ParseError as e:
        assert e.line >= 1 and e.column >= 1
        assert e.line <= text.count("\n") + 1
        assert e.statement_text is not None
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
    try:
        parse_expression(text)
    except ParseError as e:
        assert e.line >= 1 and e.column >= 1
