"""Rows of INSERT INTO ... VALUES and /inserts-stream (oncestream.sql.engine.insert_values), from
statements parsed by the real parser."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

import pytest

from oncestream.sql.engine.insert_values import insert_target, json_row, values_row
from oncestream.sql.errors import StatementError
from oncestream.sql.language import sql_ast
from oncestream.sql.language.catalog import Column, Format, Namespace, SourceInfo
from oncestream.sql.language.parser import parse
from oncestream.sql.language.types import BIGINT, DOUBLE, INTEGER, STRING, array_of, decimal

STREAM = SourceInfo(
    name="S", kind=sql_ast.SourceKind.STREAM, topic="s", key_format=Format.KAFKA, value_format=Format.JSON,
    columns=(Column("ID", INTEGER, Namespace.KEY), Column("NAME", STRING), Column("AMOUNT", DOUBLE),
             Column("PRICE", decimal(6, 2)), Column("TAGS", array_of(STRING)), Column("N", BIGINT)),
    statement="CREATE STREAM S ...;")
TABLE = SourceInfo(name="T", kind=sql_ast.SourceKind.TABLE, topic="t", key_format=Format.KAFKA, value_format=Format.JSON,
                   columns=(Column("ID", INTEGER, Namespace.KEY), Column("V", STRING)), statement="CREATE TABLE T ...;")


def _insert(text: str) -> sql_ast.InsertValues:
    (statement,) = parse(text)
    assert isinstance(statement, sql_ast.InsertValues)
    return statement


def test_values_for_every_column_in_order() -> None:
    row = values_row(_insert("INSERT INTO S VALUES (1, 'a', 2.5, 10.1, ARRAY['x', 'y'], -3);"), STREAM)
    assert row == {"ID": 1, "NAME": "a", "AMOUNT": 2.5, "PRICE": Decimal("10.10"), "TAGS": ["x", "y"], "N": -3}


def test_named_columns_rowtime_and_nulls() -> None:
    row = values_row(_insert("INSERT INTO S (ROWTIME, ID, NAME) VALUES (1000, 7, NULL);"), STREAM)
    assert row == {"ROWTIME": 1000, "ID": 7, "NAME": None}


def test_errors_say_what_is_wrong() -> None:
    with pytest.raises(StatementError, match="Expected a value for each column"):
        values_row(_insert("INSERT INTO S (ID, NAME) VALUES (1);"), STREAM)
    with pytest.raises(StatementError, match="Column name NOPE does not exist"):
        values_row(_insert("INSERT INTO S (ID, NOPE) VALUES (1, 2);"), STREAM)
    with pytest.raises(StatementError, match="Could not coerce"):
        values_row(_insert("INSERT INTO S (ID) VALUES ('not a number');"), STREAM)
    with pytest.raises(StatementError, match="primary key"):
        values_row(_insert("INSERT INTO T (V) VALUES ('x');"), TABLE)


def test_json_rows_match_columns_case_insensitively() -> None:
    assert json_row(STREAM, {"id": 1, "Name": "a", "rowtime": 5}) == {"ID": 1, "NAME": "a", "ROWTIME": 5}
    with pytest.raises(StatementError, match="does not exist"):
        json_row(STREAM, {"ID": 1, "OTHER": 2})


def _target(text: str, sources: list[SourceInfo]) -> str:
    statement = _insert(text)
    named = next((s for s in sources if s.name == statement.target), None)
    with pytest.raises(StatementError) as caught:
        insert_target(statement, named, sources)
    return caught.value.message


def test_an_unknown_target_names_the_sources_differing_only_in_case() -> None:
    lower = dataclasses.replace(STREAM, name="input")
    upper = dataclasses.replace(TABLE, name="INPUT")
    assert _target("INSERT INTO input VALUES (1);", [lower]) == (
        'Cannot insert values into an unknown stream/table: `INPUT`\nDid you mean "input"? Hint: wrap the source name '
        "in double quotes to make it case-sensitive.")
    assert _target('INSERT INTO "input" VALUES (1);', [upper]) == (
        "Cannot insert values into an unknown stream/table: `input`\nDid you mean INPUT? Hint: try removing double "
        "quotes from the source name.")
    assert _target('INSERT INTO "Input" VALUES (1);', [upper, lower]) == (
        'Cannot insert values into an unknown stream/table: `Input`\nDid you mean "INPUT" (TABLE) or "input" (STREAM)? '
        "Hint: wrap the source name in double quotes to make it case-sensitive.")
    assert _target("INSERT INTO other VALUES (1);", [lower]) == "Cannot insert values into an unknown stream/table: `OTHER`"


def test_a_source_stream_or_table_is_read_only() -> None:
    assert _target("INSERT INTO S VALUES (1);", [dataclasses.replace(STREAM, read_only=True)]) == \
        "Cannot insert values into read-only stream: S"
    assert _target("INSERT INTO T VALUES (1);", [dataclasses.replace(TABLE, read_only=True)]) == \
        "Cannot insert values into read-only table: T"
    assert insert_target(_insert("INSERT INTO S VALUES (1);"), STREAM, [STREAM]) is STREAM
