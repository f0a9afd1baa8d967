"""compile/null_values.py: which PARTITION BY key expressions ksqlDB computes for a stream record
whose value is null (from the record's key alone) and which give null."""

from __future__ import annotations

import pytest
from sqlglot import exp

from oncestream.sql.engine.compile.expressions import Scope
from oncestream.sql.engine.compile.null_values import key_only
from oncestream.sql.language.analyzer import analyze_query
from oncestream.sql.language.catalog import Column, Format, Namespace, SourceInfo
from oncestream.sql.language.parser import parse
from oncestream.sql.language.sql_ast import CreateAsSelect, SourceKind
from oncestream.sql.language.types import INTEGER, STRING, array_of

SOURCE = SourceInfo(name="S", kind=SourceKind.STREAM, topic="s", key_format=Format.KAFKA, value_format=Format.JSON,
                    columns=(Column("K", INTEGER, Namespace.KEY),
                             Column("NAME", STRING, Namespace.VALUE),
                             Column("A", array_of(INTEGER), Namespace.VALUE)),
                    statement="")


def _partition_by(expression: str) -> exp.Expr:
    (statement,) = parse(f"CREATE STREAM OUT AS SELECT * FROM S PARTITION BY {expression};")
    assert isinstance(statement, CreateAsSelect)
    analyzed = analyze_query(statement.query, {"S": SOURCE}, sink="OUT")
    (key,) = analyzed.partition_by
    return key


@pytest.mark.parametrize(("expression", "from_key"), [
    ("K", True),                 # "only key column - with null value": the key
    ("K + 2", True),             # "key expression - with null value": 2 for key 0
    ("ABS(K)", True),            # "udf key expression - with null value"
    ("1", True),                 # a literal reads nothing: 1 ("multiple columns with expressions")
    ("NAME", False),             # "partition by with null value": a null key
    ("(NAME IS NULL)", False),   # "stream PARTITION BY IS NULL with null value": null, not true
    ("K + ARRAY_LENGTH(A)", False),
    ("ROWTIME", False),          # "multiple columns including ROWTIME": ksqlDB carries it in the value
])
def test_a_key_expression_is_computed_for_a_null_value_only_from_key_columns(expression, from_key):
    scope = Scope({"S": SOURCE})
    assert key_only(_partition_by(expression), scope, {"K"}) is from_key
