"""Rows of INSERT INTO ... VALUES and /inserts-stream (oncestream.sql.engine.insert_values), from
statements parsed by the real parser."""

from __future__ import annotations

from decimal import Decimal

import pytest

from oncestream.sql.engine.insert_values import json_row, values_row
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
