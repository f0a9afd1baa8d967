"""Every statement shape the golden tests do not run compiles into a Spark plan that Spark's
analyzer accepts, with the connector's key/value columns (the plans are analyzed, not started:
nothing reads the topics)."""

from __future__ import annotations

import pytest

from oncestream.sql.engine.compile.plan import compile_query
from oncestream.sql.engine.compile.sources import ReadSettings
from oncestream.sql.engine.serde import layout_for
from oncestream.sql.errors import StatementError
from oncestream.sql.language.catalog import Format, SourceInfo
from oncestream.sql.language.sql_ast import SourceKind
from tests.spark.sql.golden import analyze, ddl

pytestmark = [pytest.mark.spark]

SOURCES = {
    "S": ddl("CREATE STREAM S (ID INT KEY, NAME STRING, X BIGINT, D DOUBLE, TS TIMESTAMP, A ARRAY<INT>, "
             "M MAP<STRING, INT>, ST STRUCT<F STRING, G INT>) WITH (KAFKA_TOPIC='s', VALUE_FORMAT='JSON');"),
    "S2": ddl("CREATE STREAM S2 (ID INT KEY, Y STRING) WITH (KAFKA_TOPIC='s2', VALUE_FORMAT='JSON');"),
    "T": ddl("CREATE TABLE T (TID INT PRIMARY KEY, TNAME STRING) WITH (KAFKA_TOPIC='t', VALUE_FORMAT='JSON');"),
    "T2": ddl("CREATE TABLE T2 (TID2 INT PRIMARY KEY, TVAL STRING) WITH (KAFKA_TOPIC='t2', VALUE_FORMAT='JSON');"),
    "S3": ddl("CREATE STREAM S3 (ID INT KEY, Z STRING) WITH (KAFKA_TOPIC='s3', VALUE_FORMAT='JSON');"),
    "T3": ddl("CREATE TABLE T3 (TID3 INT PRIMARY KEY, TZ STRING) WITH (KAFKA_TOPIC='t3', VALUE_FORMAT='JSON');"),
    "TS_S": ddl("CREATE STREAM TS_S (ID INT KEY, EVENT_TIME STRING) WITH (KAFKA_TOPIC='tss', VALUE_FORMAT='DELIMITED', "
                "TIMESTAMP='EVENT_TIME', TIMESTAMP_FORMAT='yyyy-MM-dd HH:mm:ss');"),
}

STATEMENTS = [
    "CREATE STREAM O AS SELECT ID, CONCAT(NAME, '!') AS C, SUBSTRING(NAME, 2) AS SUB, ABS(X) AS AX, ROUND(D) AS R, "
    "COALESCE(NAME, 'none') AS N, LEN(NAME) AS L, ARRAY_LENGTH(A) AS AL, M['k'] AS MK, ST->G AS G, A[-1] AS LAST, "
    "CAST(D AS DECIMAL(10, 2)) AS DEC, CAST(TS AS STRING) AS TSS, X / 0 AS DIV, "
    "CASE WHEN X IS NULL THEN 0 WHEN X > 10 THEN 1 ELSE 2 END AS K FROM S WHERE NAME LIKE 'a%' AND X BETWEEN 1 AND 9 "
    "EMIT CHANGES;",
    "CREATE STREAM O AS SELECT ID, ROWTIME AS RT, ROWPARTITION AS RP, ROWOFFSET AS RO FROM TS_S EMIT CHANGES;",
    "CREATE STREAM O AS SELECT ROWKEY, S.NAME, S2.Y FROM S FULL OUTER JOIN S2 WITHIN 5 SECONDS ON S.ID = S2.ID EMIT CHANGES;",
    "CREATE STREAM O AS SELECT S2.ID, S.NAME, S2.Y FROM S RIGHT JOIN S2 WITHIN (1 SECOND, 2 SECONDS) ON S.ID = S2.ID "
    "EMIT CHANGES;",
    "CREATE STREAM O AS SELECT S.ID, S.NAME, T.TNAME FROM S JOIN T ON S.ID = T.TID WHERE T.TNAME <> S.NAME EMIT CHANGES;",
    "SELECT S.ID, ST, M, TS FROM S EMIT CHANGES LIMIT 1;",
    "CREATE TABLE O AS SELECT NAME, MAX(X) AS MX, EARLIEST_BY_OFFSET(D) AS E, WINDOWSTART AS WS FROM S "
    "WINDOW HOPPING (SIZE 1 MINUTE, ADVANCE BY 10 SECONDS, GRACE PERIOD 5 SECONDS) GROUP BY NAME "
    "HAVING SUM(X) > 3 EMIT CHANGES;",
    "CREATE TABLE O AS SELECT ID, NAME, COUNT(*) AS C FROM S GROUP BY ID, NAME EMIT CHANGES;",
    "CREATE TABLE O AS SELECT TNAME, COUNT(*) AS C, SUM(TID) AS ST FROM T GROUP BY TNAME HAVING COUNT(*) > 1 EMIT CHANGES;",
    "CREATE TABLE O AS SELECT ROWKEY, T.TNAME, T2.TVAL FROM T FULL OUTER JOIN T2 ON T.TID = T2.TID2 EMIT CHANGES;",
    # n-way joins
    "CREATE STREAM O AS SELECT ROWKEY, S.NAME, S2.Y, S3.Z FROM S FULL OUTER JOIN S2 WITHIN 5 SECONDS ON S.ID = S2.ID "
    "FULL OUTER JOIN S3 WITHIN 10 SECONDS ON S.ID = S3.ID EMIT CHANGES;",
    "CREATE STREAM O AS SELECT S.ID, S.NAME, S2.Y, S3.Z FROM S LEFT JOIN S2 WITHIN 5 SECONDS ON S.ID = S2.ID "
    "LEFT JOIN S3 WITHIN 10 SECONDS ON S.ID = S3.ID EMIT CHANGES;",
    "CREATE STREAM O AS SELECT S.ID, S.NAME, S2.Y, T.TNAME FROM S FULL JOIN S2 WITHIN 5 SECONDS ON S.ID = S2.ID "
    "JOIN T ON S.ID = T.TID EMIT CHANGES;",
    "CREATE STREAM O AS SELECT S3.ID, S.NAME, T.TNAME, S3.Z FROM S LEFT JOIN T ON S.ID = T.TID "
    "JOIN S3 WITHIN 10 SECONDS ON S.ID = S3.ID EMIT CHANGES;",
    "CREATE STREAM O AS SELECT T2.TID2, S.NAME, T.TNAME, T2.TVAL FROM S JOIN T ON CAST(S.X AS INT) = T.TID "
    "LEFT JOIN T2 ON S.ID = T2.TID2 WHERE T2.TVAL IS NULL EMIT CHANGES;",
    "CREATE TABLE O AS SELECT T.TID, T.TNAME, T2.TVAL, T3.TZ FROM T JOIN T2 ON T.TID = T2.TID2 "
    "LEFT JOIN T3 ON T.TID = T3.TID3 WHERE T3.TZ IS NULL EMIT CHANGES;",
    # a foreign-key table-table join
    "CREATE TABLE O AS SELECT T.TID, T.TNAME, T2.TVAL FROM T LEFT JOIN T2 ON CAST(T.TNAME AS INT) = T2.TID2 "
    "EMIT CHANGES;",
    # grouping the result of stream-table joins
    "CREATE TABLE O AS SELECT T.TNAME, COUNT(*) AS C, SUM(S.X) AS SX FROM S JOIN T ON S.ID = T.TID "
    "LEFT JOIN T2 ON S.ID = T2.TID2 GROUP BY T.TNAME HAVING COUNT(*) > 1 EMIT CHANGES;",
    "CREATE TABLE O AS SELECT T.TNAME, COUNT(*) AS C FROM S LEFT JOIN T ON S.ID = T.TID "
    "WINDOW TUMBLING (SIZE 1 MINUTE) GROUP BY T.TNAME EMIT CHANGES;",
]


@pytest.mark.parametrize("sql", STATEMENTS)
def test_statement_compiles_to_an_analyzable_plan(sql_spark, sql):
    _statement, analyzed = analyze(sql, SOURCES)
    compiled = compile_query(sql_spark, analyzed.query, analyzed, ReadSettings("127.0.0.1:1"))
    key_format = Format.KAFKA if len(analyzed.key_columns) == 1 else Format.JSON
    sink = SourceInfo("O", SourceKind.TABLE, "o", key_format if analyzed.key_columns else Format.NONE, Format.JSON,
                      analyzed.columns, sql)
    layout = layout_for(analyzed.columns, sink, window=analyzed.window)
    records = compiled.records(layout)
    assert [(f.name, f.dataType.typeName()) for f in records.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("timestamp", "timestamp")]
    assert [f.name for f in compiled.rows().schema.fields] == [c.name for c in analyzed.columns]


def test_compiled_aggregations_leave_no_view_behind(sql_spark):
    """An aggregation compiles through a temporary view (its SQL text names it); the view is dropped
    once Spark has analyzed the query, so a long-lived SQL node keeps no plan per query it ever
    started. The compiled plan stands without the name (the golden tests run aggregations end to end)."""
    before = {t.name for t in sql_spark.catalog.listTables() if t.isTemporary}
    for sql in [s for s in STATEMENTS if "GROUP BY" in s] * 2:
        _statement, analyzed = analyze(sql, SOURCES)
        compile_query(sql_spark, analyzed.query, analyzed, ReadSettings("127.0.0.1:1"))
    assert {t.name for t in sql_spark.catalog.listTables() if t.isTemporary} == before
    _statement, analyzed = analyze("SELECT NAME, COUNT(*) AS C, SUM(X) AS SX FROM S GROUP BY NAME EMIT CHANGES;",
                                   SOURCES)
    compiled = compile_query(sql_spark, analyzed.query, analyzed, ReadSettings("127.0.0.1:1"))
    rows = compiled.rows()
    assert rows.isStreaming
    assert {f.name for f in rows.schema.fields} >= {"NAME", "C", "SX"}
    assert {t.name for t in sql_spark.catalog.listTables() if t.isTemporary} == before


def test_emit_final_windows_write_in_append_mode(sql_spark):
    """EMIT FINAL over TUMBLING/HOPPING windows runs in append mode (each window written once, when
    the watermark closes it); EMIT CHANGES in update mode."""
    modes = {}
    for emit in ("CHANGES", "FINAL"):
        for window in ("TUMBLING (SIZE 1 MINUTE)", "HOPPING (SIZE 1 MINUTE, ADVANCE BY 10 SECONDS)"):
            _statement, analyzed = analyze(f"CREATE TABLE O AS SELECT NAME, COUNT(*) AS C FROM S WINDOW {window} "
                                           f"GROUP BY NAME EMIT {emit};", SOURCES)
            compiled = compile_query(sql_spark, analyzed.query, analyzed, ReadSettings("127.0.0.1:1"))
            modes[(emit, window.split()[0])] = compiled.output_mode
    assert modes == {("CHANGES", "TUMBLING"): "update", ("CHANGES", "HOPPING"): "update",
                     ("FINAL", "TUMBLING"): "append", ("FINAL", "HOPPING"): "append"}


def test_unsupported_shapes_are_statement_errors(sql_spark):
    # grouping the result of table-table or stream-stream joins: valid ksqlDB, refused by the Spark runtime
    for sql in ("CREATE TABLE O AS SELECT S.NAME, COUNT(*) AS C FROM S JOIN S2 WITHIN 5 SECONDS ON S.ID = S2.ID "
                "GROUP BY S.NAME EMIT CHANGES;",
                "CREATE TABLE O AS SELECT T.TNAME, COUNT(*) AS C FROM T JOIN T2 ON T.TID = T2.TID2 "
                "JOIN T3 ON T.TID = T3.TID3 GROUP BY T.TNAME EMIT CHANGES;",):
        _statement, analyzed = analyze(sql, SOURCES)
        with pytest.raises(StatementError):
            compile_query(sql_spark, analyzed.query, analyzed, ReadSettings("127.0.0.1:1"))


def test_only_canonical_key_bytes_are_written_through(sql_spark):
    """select.json "multi-key columns reordered": ksqlDB reads a JSON key and writes it with its own
    serializer (`{"id": 1}` in, `{"ID":1}` out), so a JSON key is encoded again; a KAFKA key's bytes
    have one form and are passed through. Either keeps the source's key (a null key stays null:
    ``source_key``); a new key does not."""
    sources = {**SOURCES, "MK": ddl("CREATE STREAM MK (ID INT KEY, AGE INT KEY, NAME STRING) "
                                    "WITH (KAFKA_TOPIC='mk', FORMAT='JSON');")}
    passed = {}
    for name, sql in (("json", "CREATE STREAM O AS SELECT ID, AGE, NAME FROM MK EMIT CHANGES;"),
                      ("kafka", "CREATE STREAM O AS SELECT ID, NAME FROM S EMIT CHANGES;"),
                      ("moved", "CREATE STREAM O AS SELECT ID, AGE, NAME FROM MK PARTITION BY NAME EMIT CHANGES;")):
        _statement, analyzed = analyze(sql, sources)
        compiled = compile_query(sql_spark, analyzed.query, analyzed, ReadSettings("127.0.0.1:1"))
        passed[name] = (compiled.raw_key_layout is not None, compiled.source_key)
    assert passed == {"json": (False, True), "kafka": (True, True), "moved": (False, False)}
