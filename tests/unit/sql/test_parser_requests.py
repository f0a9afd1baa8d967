"""A request's text as a whole: splitting on ``;`` (never inside literals, quoted names or
comments), each statement's own text and start position, and syntax errors placed on the
offending token of the whole request, worded as ksqlDB words them."""

from __future__ import annotations

from typing import Any

import pytest

from oncestream.sql.errors import BAD_STATEMENT, ParseError
from oncestream.sql.language import sql_ast
from oncestream.sql.language.parser import parse, parse_request


def error_of(text: str) -> ParseError:
    with pytest.raises(ParseError) as caught:
        parse(text)
    return caught.value


# -- splitting ---------------------------------------------------------------------------------------

def test_statements_split_with_text_and_positions() -> None:
    text = "SHOW STREAMS;\n  LIST TABLES ;DESCRIBE s;"
    a, b, c = parse(text)
    assert (a.text, a.position) == ("SHOW STREAMS;", sql_ast.Position(1, 1))
    assert (b.text, b.position) == ("LIST TABLES ;", sql_ast.Position(2, 3))
    assert (c.text, c.position) == ("DESCRIBE s;", sql_ast.Position(2, 16))


def test_semicolons_inside_string_literals_do_not_split() -> None:
    text = "INSERT INTO t (a) VALUES ('x;y'); INSERT INTO t (a) VALUES ('it''s; fine');"
    a, b = parse(text)
    assert isinstance(a, sql_ast.InsertValues)
    assert a.values[0].name == "x;y"
    assert isinstance(b, sql_ast.InsertValues)
    assert b.values[0].name == "it's; fine"
    assert b.text == "INSERT INTO t (a) VALUES ('it''s; fine');"


def test_semicolons_inside_quoted_names_and_comments_do_not_split() -> None:
    text = "SELECT `a;b` FROM s -- comment; still comment\nEMIT CHANGES; /* ; */ SHOW TOPICS;"
    a, b = parse(text)
    assert isinstance(a, sql_ast.QueryStatement)
    assert a.query.select.expressions[0].name == "a;b"
    assert a.text == "SELECT `a;b` FROM s -- comment; still comment\nEMIT CHANGES;"
    assert isinstance(b, sql_ast.Show)
    assert b.what is sql_ast.ShowWhat.TOPICS
    assert b.text == "SHOW TOPICS;"
    assert b.position == sql_ast.Position(2, 23)


def test_leading_comments_are_not_part_of_the_statement_text() -> None:
    (s,) = parse("-- the first line\n/* a block\n comment */ DROP STREAM s;")
    assert s.text == "DROP STREAM s;"
    assert s.position == sql_ast.Position(3, 13)


def test_original_spelling_is_kept_in_text() -> None:
    (s,) = parse("  select   `Col`,x\tfrom\n s emit changes ;  ")
    assert s.text == "select   `Col`,x\tfrom\n s emit changes ;"


def test_last_statement_without_semicolon_gets_one() -> None:
    _a, b = parse("SHOW STREAMS; SHOW TABLES")
    assert b.text == "SHOW TABLES;"
    assert isinstance(b, sql_ast.Show)
    assert b.what is sql_ast.ShowWhat.TABLES


@pytest.mark.parametrize("text", ["", "   \n ", ";", ";;  ;", "-- only a comment", "/* only */ ;"])
def test_empty_requests_have_no_statements(text: str) -> None:
    assert parse(text) == []


def test_empty_statements_between_semicolons_are_skipped() -> None:
    statements = parse("SHOW STREAMS;;; SHOW TABLES;")
    assert [s.text for s in statements] == ["SHOW STREAMS;", "SHOW TABLES;"]


def test_double_quoted_identifiers_keep_case_and_single_quotes_are_strings() -> None:
    (s,) = parse("""SELECT "MixedCase", 'literal' FROM s EMIT CHANGES;""")
    assert isinstance(s, sql_ast.QueryStatement)
    first, second = s.query.select.expressions
    assert first.name == "MixedCase"
    assert second.is_string
    assert second.name == "literal"


# -- errors ---------------------------------------------------------------------------------------

def test_error_is_a_bad_statement_with_position_and_statement_text() -> None:
    e = error_of("SELECT * FORM s;")
    assert (e.line, e.column) == (1, 10)
    assert e.message == "line 1:10: Syntax Error\nmismatched input 'FORM' expecting {',', 'FROM'}"
    assert e.statement_text == "SELECT * FORM s;"
    assert e.error_code == BAD_STATEMENT
    assert e.to_entity()["statementText"] == "SELECT * FORM s;"


def test_error_position_on_a_later_line_is_relative_to_the_whole_request() -> None:
    e = error_of("SHOW STREAMS;\nSHOW TABLES;\n  SELECT a,\n    FROM s;")
    assert (e.line, e.column) == (4, 5)
    assert e.statement_text == "SELECT a,\n    FROM s;"
    assert e.message.startswith("line 4:5: Syntax Error\n")


def test_error_in_a_later_statement_after_a_multi_line_literal() -> None:
    e = error_of("INSERT INTO t (a) VALUES ('one\ntwo;\nthree'); DROP STREM s;")
    assert (e.line, e.column) == (3, 15)
    assert "mismatched input 'STREM' expecting {'STREAM', 'TABLE'}" in e.message


def test_premature_end_points_at_the_semicolon() -> None:
    e = error_of("SHOW STREAMS;\nDROP TABLE ;")
    assert (e.line, e.column) == (2, 12)
    assert "mismatched input ';' expecting an identifier" in e.message


def test_premature_end_without_semicolon_points_past_the_text() -> None:
    e = error_of("INSERT INTO t VALUES (1")
    assert (e.line, e.column) == (1, 24)
    assert "'<EOF>'" in e.message


def test_unknown_statement_suggests_the_closest_keyword() -> None:
    e = error_of("SELEC * FROM s;")
    assert e.message == "line 1:1: Syntax Error\nUnknown statement 'SELEC'\nDid you mean 'SELECT'?"


@pytest.mark.parametrize(("text", "line", "column"), [
    ("SELECT 'abc FROM s;", 1, 8),
    ("SHOW TABLES;\nSELECT `abc FROM s;", 2, 8),
    ("SHOW TABLES; /* never closed", 1, 14),
])
def test_unterminated_literals_and_comments(text: str, line: int, column: int) -> None:
    e = error_of(text)
    assert (e.line, e.column) == (line, column)
    assert e.message.startswith(f"line {line}:{column}: Syntax Error\nunterminated ")


@pytest.mark.parametrize(("text", "column", "detail"), [
    ("SELECT * FROM s WHERE;", 22, "mismatched input ';' expecting an expression"),
    ("SELECT f(a FROM s;", 12, "mismatched input 'FROM' expecting ')'"),
    ("SELECT CAST(a AS INT FROM s;", 22, "mismatched input 'FROM' expecting ')'"),
    ("SELECT arr[1 FROM s;", 14, "mismatched input 'FROM' expecting ']'"),
    ("SELECT a FROM s EMIT;", 21, "mismatched input ';' expecting {'CHANGES', 'FINAL'}"),
    ("SELECT a FROM s WINDOW TUMBLING (SIZE 1 WEEK) GROUP BY a;", 41,
     "mismatched input 'WEEK' expecting {'MILLISECOND', 'SECOND', 'MINUTE', 'HOUR', 'DAY' (or plural)}"),
    ("SELECT a FROM s WINDOW HOPPING (SIZE 1 HOUR) GROUP BY a;", 44, "mismatched input ')' expecting ','"),
    ("SELECT a FROM s WINDOW SLIDING (SIZE 1 HOUR) GROUP BY a;", 24,
     "mismatched input 'SLIDING' expecting {'TUMBLING', 'HOPPING', 'SESSION'}"),
    ("SELECT * FROM a JOIN b WITHIN 1 HOUR;", 37, "mismatched input ';' expecting 'ON'"),
    ("SELECT * FROM s EMIT CHANGES LIMIT x;", 36, "mismatched input 'x' expecting an integer"),
    ("SELECT * FROM s ORDER BY a;", 17, "mismatched input 'ORDER BY' expecting ';'"),
    ("CREATE STREAM s (a FOO) WITH (kafka_topic='s');", 20, "Unknown type: FOO"),
    ("CREATE STREAM s (a INT, b) WITH (kafka_topic='s');", 26, "Syntax error at or near ')' at line 1:26"),
    ("SELECT CAST(a AS NULL) FROM s;", 18, "Syntax error at or near 'NULL' at line 1:18"),
    ("CREATE STREAM s (a INT) WITH (kafka_topic='s' value_format='json');", 47,
     "mismatched input 'value_format' expecting {',', ')'}"),
    ("CREATE STREAM s (a INT) WITH (kafka_topic='s', KAFKA_TOPIC='t');", 48, "Duplicate property: KAFKA_TOPIC"),
    ("CREATE STREAM s (m MAP<STRING INT>);", 31, "mismatched input 'INT' expecting ','"),
    ("CREATE VIEW v AS SELECT * FROM s;", 8, "mismatched input 'VIEW' expecting {'STREAM', 'TABLE'}"),
    ("CREATE STREAM s (a INT) AS SELECT * FROM t;", 25, "CREATE ... AS SELECT cannot declare columns"),
    ("INSERT INTO t (a, b) SELECT * FROM s;", 22, "mismatched input 'SELECT' expecting 'VALUES'"),
    ("SHOW STREAM;", 6, "mismatched input 'STREAM' expecting {'STREAMS', 'TABLES', 'QUERIES', 'TOPICS', "
                        "'PROPERTIES', 'FUNCTIONS', 'VARIABLES', 'TYPES'}"),
    ("SET 'a' 'b';", 9, "mismatched input 'b' expecting '='"),
    ("SET a = 'b';", 5, "mismatched input 'a' expecting a string"),
    ("TERMINATE;", 10, "mismatched input ';' expecting an identifier"),
    ("DESCRIBE s EXTENDED x;", 21, "mismatched input 'x' expecting ';'"),
])
def test_syntax_error_positions_and_messages(text: str, column: int, detail: str) -> None:
    e = error_of(text)
    assert e.column == column, e.message
    assert e.line == 1
    assert e.message == f"line 1:{column}: Syntax Error\n{detail}"


@pytest.mark.parametrize(("text", "what"), [
    ("SHOW CONNECTORS;", "SHOW CONNECTORS"),
    ("SHOW ALL TOPICS;", "SHOW ALL TOPICS"),
    ("ALTER SYSTEM 'a' = 'b';", "ALTER SYSTEM"),
    ("CREATE SOURCE CONNECTOR c WITH (a='b');", "CREATE CONNECTOR"),
    ("DROP CONNECTOR c;", "DROP CONNECTOR"),
    ("SELECT DISTINCT a FROM s;", "SELECT DISTINCT"),
    ("SELECT (SELECT 1) FROM s;", "A sub-query"),
    ("SELECT * FROM a, b;", "A comma-separated FROM list (use JOIN ... ON)"),
    ("SELECT * FROM a CROSS JOIN b;", "CROSS JOIN"),
    ("SELECT s->* FROM t;", "Selecting all fields of a struct (->*)"),
])
def test_unsupported_ksqldb_syntax_says_so(text: str, what: str) -> None:
    e = error_of(text)
    assert e.message.endswith(f": {what} is not supported")
    assert "Syntax Error" not in e.message


def test_too_deep_nesting_is_a_parse_error_not_a_crash() -> None:
    e = error_of("SELECT " + "(" * 500 + "1" + ")" * 500 + " FROM s;")
    assert "Statement is too large to parse" in e.message
    e = error_of("SELECT " + " + ".join(["a"] * 1000) + " FROM s;")
    assert "nested deeper than" in e.message


def _doc_examples() -> list[str]:
    """The ```sql blocks of docs/sql-reference.md."""
    from pathlib import Path
    doc = Path(__file__).resolve().parents[3] / "docs" / "sql-reference.md"
    blocks: list[str] = []
    current: list[str] | None = None
    for line in doc.read_text().splitlines():
        if current is None and line.strip() == "```sql":
            current = []
        elif current is not None and line.strip() == "```":
            blocks.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def test_every_example_of_the_sql_reference_parses() -> None:
    examples = _doc_examples()
    assert len(examples) >= 8
    for example in examples:
        # As the server reads a request: DEFINE and CREATE TYPE count for the later statements.
        variables: dict[str, str] = {}
        types: dict[str, Any] = {}
        for pending in parse_request(example):
            statement = pending.resolve(variables, types)
            if isinstance(statement, sql_ast.DefineVariable):
                variables[statement.name] = statement.value
            if isinstance(statement, sql_ast.CreateType):
                types[statement.name] = statement.type
