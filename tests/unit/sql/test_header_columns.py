"""ksqlDB's header columns (``HEADERS``, ``HEADER('k')``) from the parser to DESCRIBE: their type
checks and schema rules with ksqlDB's texts (AstBuilder, LogicalSchema.Builder), read-only (INSERT
refusals of AstSanitizer and InsertValuesExecutor), and a C*AS selecting one making it a value
column of its output."""

from __future__ import annotations

import dataclasses

import pytest

from oncestream.sql.engine.insert_values import insert_target
from oncestream.sql.engine.pull.execute import PullPlan, star_outputs, validate_plan
from oncestream.sql.errors import StatementError
from oncestream.sql.language import sql_ast
from oncestream.sql.language import types as t
from oncestream.sql.language.catalog import Namespace, SourceInfo
from oncestream.sql.language.parser import parse
from oncestream.sql.server import entities
from oncestream.sql.server.metastore import Metastore
from oncestream.sql.server.shell import render_entity
from tests.support.narrow import of_type, present

TOPICS = {"src": 1, "other": 1}
HEADERS_SOURCE = ("CREATE STREAM s1 (k STRING KEY, h ARRAY<STRUCT<key STRING, value BYTES>> HEADERS, v BIGINT, "
                  "h2 BYTES) WITH (kafka_topic='src', value_format='json');")
HEADER_SOURCE = ("CREATE STREAM s2 (k STRING KEY, v BIGINT, a BYTES HEADER('abc'), d BYTES HEADER('def')) "
                 "WITH (kafka_topic='src', value_format='json');")


def metastore(*sql: str) -> Metastore:
    ms = Metastore()
    for offset, s in enumerate(parse("\n".join(sql))):
        ms.apply(ms.validate(s, {}, TOPICS), offset)
    return ms


def refused(ms: Metastore, sql: str) -> str:
    (s,) = parse(sql)
    with pytest.raises(StatementError) as info:
        ms.validate(s, {}, TOPICS)
    return str(info.value)


def source(ms: Metastore, name: str) -> SourceInfo:
    return present(ms.source(name), name)


def test_parser_reads_headers_and_header_key_constraints() -> None:
    stmt = of_type(parse(HEADERS_SOURCE + HEADER_SOURCE)[1], sql_ast.CreateSource)
    assert stmt.columns == (sql_ast.ColumnDef("K", t.STRING, key=True), sql_ast.ColumnDef("V", t.BIGINT),
                            sql_ast.ColumnDef("A", t.BYTES, headers=True, header_key="abc"),
                            sql_ast.ColumnDef("D", t.BYTES, headers=True, header_key="def"))
    first = of_type(parse(HEADERS_SOURCE)[0], sql_ast.CreateSource)
    assert first.columns[1] == sql_ast.ColumnDef("H", t.HEADERS_TYPE, headers=True)


@pytest.mark.parametrize(("columns", "message"), [
    ("K STRING KEY, H1 BYTES HEADERS",
     "Invalid type for HEADERS column: expected ARRAY<STRUCT<`KEY` STRING, `VALUE` BYTES>>, got BYTES"),
    ("K STRING KEY, H1 ARRAY<STRUCT<`key` STRING, `value` BYTES>> HEADERS",   # quoted: lower-case field names
     "Invalid type for HEADERS column: expected ARRAY<STRUCT<`KEY` STRING, `VALUE` BYTES>>, got "
     "ARRAY<STRUCT<`key` STRING, `value` BYTES>>"),
    ("K STRING KEY, H1 INT HEADER('key')", "Invalid type for HEADER('key') column: expected BYTES, got INTEGER"),
    ("K STRING KEY, H1 BYTES HEADER('')", "Header column must have a non-empty header key name defined"),
])
def test_header_column_types_are_checked_as_ksqldb_astbuilder_does(columns: str, message: str) -> None:
    with pytest.raises(StatementError) as info:
        parse(f"CREATE STREAM s ({columns}) WITH (kafka_topic='src', value_format='json');")
    assert str(info.value) == f"Failed to prepare statement: {message}"


def test_key_and_header_constraints_do_not_combine() -> None:
    with pytest.raises(StatementError, match="mismatched input 'HEADERS' expecting"):
        parse("CREATE STREAM s (k BYTES KEY HEADERS) WITH (kafka_topic='src', value_format='json');")


@pytest.mark.parametrize(("columns", "message"), [
    ("H1 ARRAY<STRUCT<key STRING, value BYTES>> HEADERS, H2 ARRAY<STRUCT<key STRING, value BYTES>> HEADERS",
     "Schema already contains a HEADERS column."),
    ("H1 ARRAY<STRUCT<key STRING, value BYTES>> HEADERS, H2 BYTES HEADER('blah')",
     "Schema already contains a HEADERS column."),
    ("H1 BYTES HEADER('blah'), H2 BYTES HEADER('blah')", "Schema already contains a HEADER('blah') column."),
])
def test_one_headers_column_and_one_header_column_per_key(columns: str, message: str) -> None:
    assert message in refused(Metastore(), f"CREATE STREAM s (K STRING KEY, V BIGINT, {columns}) "
                                           "WITH (kafka_topic='src', value_format='json');")


def test_header_columns_are_neither_key_nor_value() -> None:
    ms = metastore(HEADERS_SOURCE, HEADER_SOURCE)
    s1 = source(ms, "S1")
    assert [(c.name, c.namespace, c.header_key) for c in s1.columns] == [
        ("K", Namespace.KEY, None), ("H", Namespace.HEADERS, None), ("V", Namespace.VALUE, None),
        ("H2", Namespace.VALUE, None)]
    assert [c.name for c in s1.value_columns] == ["V", "H2"]
    assert [c.name for c in s1.header_columns] == ["H"]
    s2 = source(ms, "S2")
    assert [(c.name, c.header_key) for c in s2.header_columns] == [("A", "abc"), ("D", "def")]
    assert [c.schema_text for c in s2.columns] == ["`K` STRING KEY", "`V` BIGINT", "`A` BYTES HEADER('abc')",
                                                   "`D` BYTES HEADER('def')"]


def test_a_single_value_column_beside_header_columns_is_the_kafka_formats_one_field() -> None:
    ms = metastore("CREATE STREAM s (k STRING KEY, v BIGINT, h BYTES HEADER('x')) "
                   "WITH (kafka_topic='src', value_format='kafka');")
    assert [c.name for c in source(ms, "S").value_columns] == ["V"]


def test_a_query_selecting_header_columns_writes_them_as_value_columns() -> None:
    ms = metastore(HEADERS_SOURCE, HEADER_SOURCE, "CREATE STREAM out1 AS SELECT * FROM s1;",
                   "CREATE STREAM out2 AS SELECT k, a, LEN(d) AS n FROM s2;")
    out1 = source(ms, "OUT1")
    # SELECT *: key, value columns, then header columns (ksqlDB's source schema order)
    assert [(c.name, c.namespace) for c in out1.columns] == [
        ("K", Namespace.KEY), ("V", Namespace.VALUE), ("H2", Namespace.VALUE), ("H", Namespace.VALUE)]
    assert out1.column("H") is not None
    assert present(out1.column("H"), "H").type == t.HEADERS_TYPE
    out2 = source(ms, "OUT2")
    assert [(c.name, c.namespace, c.type) for c in out2.columns] == [
        ("K", Namespace.KEY, t.STRING), ("A", Namespace.VALUE, t.BYTES), ("N", Namespace.VALUE, t.INTEGER)]
    assert not out2.header_columns


def test_insert_into_a_source_with_header_columns_is_refused() -> None:
    ms = metastore(HEADER_SOURCE, "CREATE STREAM s3 (k STRING KEY, v BIGINT, a BYTES, d BYTES) "
                                  "WITH (kafka_topic='other', value_format='json');")
    assert refused(ms, "INSERT INTO s2 SELECT * FROM s3;") == "Cannot insert into S2 because it has header columns"


@pytest.mark.parametrize(("sql", "message"), [
    ("INSERT INTO s2 VALUES ('k', 1, null, null);", "Cannot insert into HEADER columns: A, D"),
    ("INSERT INTO s2 (d) VALUES (null);", "Cannot insert into HEADER columns: D"),
])
def test_insert_values_into_header_columns_is_refused(sql: str, message: str) -> None:
    ms = metastore(HEADER_SOURCE)
    stmt = of_type(parse(sql)[0], sql_ast.InsertValues)
    with pytest.raises(StatementError) as info:
        insert_target(stmt, ms.source("S2"), ms.sources())
    assert str(info.value) == message


def test_insert_values_naming_only_value_columns_is_allowed() -> None:
    ms = metastore(HEADER_SOURCE)
    stmt = of_type(parse("INSERT INTO s2 (k, v) VALUES ('k', 1);")[0], sql_ast.InsertValues)
    assert insert_target(stmt, ms.source("S2"), ms.sources()).name == "S2"


def test_describe_marks_header_columns_as_ksqldb_fieldinfo_does() -> None:
    ms = metastore(HEADERS_SOURCE, HEADER_SOURCE)
    fields = {f["name"]: f for f in entities.source_description_entity(
        ms, source(ms, "S2"), "DESCRIBE s2;")["sourceDescription"]["fields"]}
    assert fields["A"] == {"name": "A", "schema": {"type": "BYTES", "fields": None, "memberSchema": None},
                           "type": "HEADER", "headerKey": "abc"}
    assert "type" not in fields["V"]
    entity = entities.source_description_entity(ms, source(ms, "S1"), "DESCRIBE s1;")
    h = next(f for f in entity["sourceDescription"]["fields"] if f["name"] == "H")
    assert h["type"] == "HEADER"
    assert "headerKey" not in h
    assert h["schema"]["memberSchema"]["fields"][0]["name"] == "KEY"
    shown = render_entity(entity)
    assert "(headers)" in shown
    assert "(header('abc'))" in render_entity(entities.source_description_entity(ms, source(ms, "S2"), "DESCRIBE s2;"))


def test_pull_queries_refuse_header_columns_the_store_does_not_keep() -> None:
    ms = metastore("CREATE TABLE tb (k STRING PRIMARY KEY, v BIGINT, a BYTES HEADER('abc')) "
                   "WITH (kafka_topic='src', value_format='json');")
    tb = source(ms, "TB")
    outputs = tuple(star_outputs(tb))
    assert [o.name for o in outputs] == ["K", "V", "A"]
    with pytest.raises(StatementError, match=r"don't support header columns \(A\)"):
        validate_plan(PullPlan(outputs), tb)
    validate_plan(PullPlan(outputs[:2]), tb)


def test_select_star_partition_by_keeps_header_columns_as_values() -> None:
    ms = metastore(HEADERS_SOURCE, "CREATE STREAM out AS SELECT * FROM s1 PARTITION BY v;")
    assert [(c.name, c.namespace) for c in source(ms, "OUT").columns] == [
        ("V", Namespace.KEY), ("H2", Namespace.VALUE), ("H", Namespace.VALUE), ("K", Namespace.VALUE)]


def test_the_metastore_dump_compared_across_nodes_names_the_header_key() -> None:
    columns = next(s for s in metastore(HEADER_SOURCE).describe_all()["sources"] if s["name"] == "S2")["columns"]
    assert columns[2] == ["A", "BYTES", "HEADERS", "abc"]
    assert columns[1] == ["V", "BIGINT", "VALUE"]


def test_header_columns_can_be_disabled_for_new_statements_only() -> None:
    """ksql.headers.columns.enabled=false (ksqlDB's FeatureFlagChecker) refuses a new CREATE with
    header columns; one already in the command topic is applied as it was."""
    ms = Metastore()
    (stmt,) = parse(HEADER_SOURCE)
    with pytest.raises(StatementError, match=r"^Cannot create Stream because schema with headers columns is disabled\.$"):
        ms.validate(stmt, {"ksql.headers.columns.enabled": "false"}, TOPICS)
    command = ms.validate(stmt, {}, TOPICS)
    ms.apply(dataclasses.replace(command, streams_properties={"ksql.headers.columns.enabled": "false"}), 0)
    assert source(ms, "S2").header_columns
