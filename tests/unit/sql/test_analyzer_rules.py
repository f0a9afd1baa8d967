"""ksqlDB's analysis rules checked on parsed statements, each with ksqlDB's wording: reserved
names, aggregation rules, window bounds, join restrictions (windowed, co-partitioned, self joins,
KAFKA format), IN coercion, CAST, constructors, literals, WITH-clause properties."""

from __future__ import annotations

import pytest

from oncestream.sql.errors import StatementError
from oncestream.sql.language import sql_ast
from oncestream.sql.language import types as t
from oncestream.sql.language.analyzer import analyze_query
from oncestream.sql.language.parser import parse
from oncestream.sql.server.metastore import CommandResult, Metastore, StartQuery
from tests.support.metastores import metastore_with
from tests.support.narrow import of_type, present

DDL = """
CREATE STREAM s (k STRING KEY, id BIGINT, v INT, d DOUBLE, name STRING, arr ARRAY<BIGINT>, m MAP<STRING, BIGINT>,
                 st STRUCT<a BIGINT>, flag BOOLEAN) WITH (kafka_topic='s', value_format='json');
CREATE STREAM s2 (k STRING KEY, w INT) WITH (kafka_topic='s2', value_format='json');
CREATE STREAM s3 (k STRING KEY, w INT) WITH (kafka_topic='s3', value_format='json');
CREATE TABLE t (k STRING PRIMARY KEY, x INT) WITH (kafka_topic='t', value_format='json');
CREATE TABLE t2 (k STRING PRIMARY KEY, y INT) WITH (kafka_topic='t2', value_format='json');
CREATE TABLE t3 (k STRING PRIMARY KEY, z INT) WITH (kafka_topic='t3', value_format='json');
CREATE STREAM kv (k STRING KEY, v INT) WITH (kafka_topic='kv', value_format='kafka');
CREATE TABLE wt (k STRING PRIMARY KEY, c BIGINT) WITH (kafka_topic='wt', value_format='json', window_type='tumbling',
                                                       window_size='10 seconds');
CREATE STREAM ws (k STRING KEY, c BIGINT) WITH (kafka_topic='ws', value_format='json', window_type='session');
"""
TOPICS = {"s": 2, "s2": 2, "s3": 4, "t": 2, "t2": 2, "t3": 2, "kv": 2, "wt": 2, "ws": 2}


@pytest.fixture
def ms() -> Metastore:
    return metastore_with(DDL, TOPICS)


def refused(ms: Metastore, sql: str, pattern: str) -> None:
    (s,) = parse(sql)
    if isinstance(s, sql_ast.QueryStatement):   # push / pull queries are analyzed, not validated as commands
        with pytest.raises(StatementError, match=pattern):
            analyze_query(s.query, ms.source_map())
    else:
        with pytest.raises(StatementError, match=pattern):
            ms.validate(s, {}, TOPICS)


def accepted(ms: Metastore, sql: str, offset: int = 100) -> list:
    (s,) = parse(sql)
    effects = ms.apply(ms.validate(s, {}, TOPICS), offset)
    assert of_type(effects[-1], CommandResult, "last effect").status == "SUCCESS", effects[-1]
    return effects


@pytest.mark.parametrize(("sql", "pattern"), [
    # reserved names
    ("CREATE STREAM o AS SELECT k, ROWTIME FROM s;", r"Reserved column name in select: `ROWTIME`\. Please remove or alias"),
    ("CREATE STREAM o AS SELECT k, WINDOWSTART FROM s;", r"Reserved column name in select: `WINDOWSTART`"),
    ("CREATE STREAM o AS SELECT k, v AS rowtime FROM s;", "`ROWTIME` is a reserved column name. You cannot use it as an alias"),
    # aggregation
    ("CREATE TABLE o AS SELECT k, COUNT(*) AS c FROM s GROUP BY k, k;", r"Duplicate GROUP BY expression: S\.K"),
    ("CREATE TABLE o AS SELECT k, COUNT(*) AS c FROM s GROUP BY k, SUM(v);",
     "GROUP BY does not support aggregate functions: SUM is an aggregate function."),
    ("CREATE TABLE o AS SELECT k, v + 1 AS w, COUNT(*) AS c FROM s GROUP BY k;",
     r"Non-aggregate SELECT expression\(s\) not part of GROUP BY: \(V \+ 1\)\nEither add the column\(s\) to the GROUP BY"),
    ("CREATE TABLE o AS SELECT k, COUNT(*) AS c FROM s GROUP BY k HAVING v > 1;",
     "Non-aggregate HAVING expression not part of GROUP BY: V\nConsider switching the HAVING clause to a WHERE clause"),
    ("CREATE TABLE o AS SELECT k, v, COUNT(*) AS c FROM s;", r"Non-aggregate SELECT expression\(s\) not part of GROUP BY: K, V"),
    ("CREATE TABLE o AS SELECT COUNT(*) AS c FROM s;",
     r"does not support aggregate function \[COUNT\(ROWTIME\)\] without a GROUP BY"),
    ("CREATE TABLE o AS SELECT k, MAX(x) AS m FROM t GROUP BY k;",
     "The aggregation function MAX cannot be applied to a table source, only to a stream source."),
    ("CREATE TABLE o AS SELECT k, COUNT(*) AS c FROM t WINDOW TUMBLING (SIZE 1 SECOND) GROUP BY k;",
     "Windowing not supported for table aggregations."),
    ("CREATE TABLE o AS SELECT k, COUNT(*) AS c FROM kv GROUP BY k;",
     "Source\\(s\\) KV are using the 'KAFKA' value format. This format does not yet support GROUP BY."),
    ("CREATE TABLE o AS SELECT k, MIN(WINDOWSTART) AS m FROM s WINDOW TUMBLING (SIZE 1 SECOND) GROUP BY k;",
     "Window bounds column WINDOWSTART can only be used in the SELECT clause of windowed aggregations"),
    ("CREATE TABLE o AS SELECT k, COUNT(*) AS c FROM s WINDOW TUMBLING (SIZE 1 SECOND) GROUP BY k, WINDOWSTART;",
     "Window bounds column WINDOWSTART can only be used in the SELECT clause"),
    ("CREATE TABLE o AS SELECT k, LATEST_BY_OFFSET(v, v) AS l FROM s GROUP BY k;",
     "Parameter 2 passed to function LATEST_BY_OFFSET must be a literal constant, but was expression: 'V'"),
    ("CREATE TABLE o AS SELECT m, COUNT(*) AS c FROM s GROUP BY m;",
     "Map keys, including types that contain maps, are not supported"),
    ("SELECT * FROM s WHERE WINDOWSTART > 1 EMIT CHANGES;", "Error in WHERE expression: Unknown column WINDOWSTART."),
    # joins
    ("CREATE STREAM o AS SELECT s.k, w FROM s JOIN s WITHIN 1 SECOND ON s.k = s.k;", "self joins are not yet supported"),
    # n-way joins (ksqlDB's multi-joins.json texts)
    ("CREATE STREAM o AS SELECT s.v, t.x, t2.y FROM s JOIN t ON s.k = t.k JOIN t2 ON s.k = t2.k;",
     r"must include the join expressions S\.K, T\.K or T2\.K in its projection \(eg, SELECT S\.K\.\.\.\)\."),
    ("CREATE STREAM o AS SELECT s.v, t.x, t2.y FROM s JOIN t ON s.name = t.k JOIN t2 ON s.k = t2.k;",
     r"must include the join expressions S\.K or T2\.K in its projection"),
    ("CREATE STREAM o AS SELECT s.v, t.x, t2.y FROM s JOIN t ON s.k = t.k JOIN t2 ON s.name = t2.k;",
     r"must include the join expressions S\.NAME or T2\.K in its projection"),
    ("CREATE STREAM o AS SELECT s.v, t.x, t2.y FROM s JOIN t ON s.k = t.k JOIN t2 ON LCASE(s.k) = t2.k;",
     r"must include the join expression T2\.K in its projection \(eg, SELECT T2\.K\.\.\.\)\."),
    ("CREATE STREAM o AS SELECT * FROM s JOIN t ON s.name = t.k JOIN t2 ON s.name = s.name;",
     "Each side of the join must reference exactly one source and not the same source. Left side references `S` and "
     "right references `S`"),
    ("CREATE STREAM o AS SELECT * FROM s JOIN t ON s.k = t.k JOIN t2 ON s.k = t.k;",
     r"A join criteria is expected to reference the source \(`T2`\) in the FROM clause, instead the right source "
     "references `T` and the left source references `S`"),
    ("CREATE STREAM o AS SELECT * FROM s JOIN t ON s.k = t.k JOIN t ON s.name = t.k;",
     "N-way joins do not support multiple occurrences of the same source. Source: 'T'"),
    ("CREATE STREAM o AS SELECT * FROM t JOIN t2 ON t.k = t2.k JOIN s ON t.k = s.k;",
     r"Invalid join order: table-stream joins are not supported; only stream-table joins. Got T \[INNER\] JOIN S\."),
    ("CREATE TABLE o AS SELECT s.k, COUNT(*) AS c, WINDOWSTART AS ws FROM s JOIN t ON s.k = t.k "
     "WINDOW TUMBLING (SIZE 1 SECOND) GROUP BY s.k;", "SELECT column 'WINDOWSTART' cannot be resolved."),
    # foreign-key table-table joins (fk-join.json texts)
    ("CREATE TABLE o AS SELECT t.k, t2.y FROM t RIGHT JOIN t2 ON CAST(t.x AS STRING) = t2.k;",
     "RIGHT OUTER JOIN on a foreign key is not supported"),
    ("CREATE TABLE o AS SELECT t2.k, t2.y FROM t JOIN t2 ON CAST(t.x AS STRING) = t2.k;",
     r"Primary key column missing in projection\. For foreign-key table-table joins, the projection must include all "
     r"primary key columns from the left input table \(`T`\)\. Missing column: `K`\."),
    ("CREATE STREAM o AS SELECT s.k, w FROM s JOIN s3 WITHIN 1 SECOND ON s.k = s3.k;",
     r"Can't join `S` with `S3` since the number of partitions don't match. `S` partitions = 2; `S3` partitions = 4."),
    ("CREATE STREAM o AS SELECT s.k, kv.v AS kvv FROM s JOIN kv WITHIN 1 SECOND ON s.k = kv.k;",
     "Source\\(s\\) KV are using the 'KAFKA' value format. This format does not yet support JOIN."),
    ("SELECT * FROM s JOIN ws WITHIN 1 SECOND ON s.k = ws.k EMIT CHANGES;",
     "Can not join windowed source to non-windowed source.\n`WS` is SESSION windowed\n`S` is not windowed"),
    ("SELECT * FROM s FULL JOIN t ON s.k = t.k EMIT CHANGES;",
     r"Invalid join type: full-outer join not supported for stream-table join. Got S \[FULL\] OUTER JOIN T."),
    ("SELECT * FROM t JOIN s WITHIN 1 SECOND ON t.k = s.k EMIT CHANGES;",
     r"Invalid join order: table-stream joins are not supported; only stream-table joins. Got T \[INNER\] JOIN S."),
    ("SELECT * FROM s JOIN t ON s.name = t.x EMIT CHANGES;", r"Invalid join condition: types don't match"),
    ("SELECT * FROM s JOIN t ON s.k = 'x' EMIT CHANGES;",
     r"Invalid comparison expression ''x'' in join '\(S.K = 'x'\)'. Each side of the join comparision must contain"),
    ("SELECT * FROM s JOIN t ON s.k = t.k AND s.v = t.x EMIT CHANGES;",
     r"joins on multiple conditions are not yet supported. Got \(\(S.K = T.K\) AND \(S.V = T.X\)\)"),
    ("SELECT x.k FROM s EMIT CHANGES;", "'X' is not a valid stream/table name or alias."),
    ("CREATE TABLE o AS SELECT * FROM wt;", "KSQL does not support persistent queries on windowed tables."),
    # expressions
    ("SELECT * FROM s WHERE arr < arr EMIT CHANGES;",
     r"Cannot compare ARR \(ARRAY<BIGINT>\) to ARR \(ARRAY<BIGINT>\) with LESS_THAN"),
    ("SELECT * FROM s WHERE NULL = NULL EMIT CHANGES;", "Comparison with NULL not supported: NULL = NULL"),
    ("SELECT * FROM s WHERE v IN (1, 'x') EMIT CHANGES;", 'invalid input syntax for type INTEGER: "x"'),
    ("SELECT CAST(name AS ARRAY<INT>) FROM s EMIT CHANGES;", "Invalid Select: Cast of STRING to ARRAY<INTEGER> is not supported"),
    ("SELECT CASE WHEN v > 1 THEN NULL ELSE NULL END FROM s EMIT CHANGES;",
     "Invalid Case expression. All case branches have NULL type"),
    ("SELECT ARRAY[NULL, NULL] FROM s EMIT CHANGES;", "Cannot construct an array with all NULL elements"),
    ("SELECT STRUCT(a := 1, a := 2) FROM s EMIT CHANGES;", "Duplicate field names found in STRUCT"),
    ("SELECT 9223372036854775808 FROM s EMIT CHANGES;", "Invalid numeric literal: 9223372036854775808"),
    # WITH clause
    ("CREATE STREAM o (a INT, b INT) WITH (kafka_topic='s', value_format='delimited', value_delimiter='<~>');",
     "Configuration VALUE_DELIMITER is invalid: Invalid delimiter value: '<~>'"),
    ("CREATE STREAM o (a INT) WITH (kafka_topic='s', value_format='json', value_delimiter='|');",
     r"JSON does not support the following configs: \[delimiter\]"),
    ("CREATE STREAM o (a INT) WITH (kafka_topic='s', value_format='kafka', wrap_single_value=true);",
     "Format 'KAFKA' does not support 'WRAP_SINGLE_VALUE' set to 'true'."),
    ("CREATE STREAM o (a INT, b INT) WITH (kafka_topic='s', value_format='json', wrap_single_value=true);",
     "'WRAP_SINGLE_VALUE' is only valid for single-field value schemas"),
    ("CREATE STREAM o (k INT KEY, a INT) WITH (kafka_topic='s', value_format='json', window_type='hopping');",
     "HOPPING windows require 'WINDOW_SIZE' to be provided in the WITH clause."),
    ("CREATE STREAM o (a INT) WITH (kafka_topic='s', value_format='json', window_type='session');",
     "Windowed sources require a key column."),
    ("CREATE STREAM o (k MAP<STRING, INT> KEY, a INT) WITH (kafka_topic='s', value_format='json', key_format='json');",
     "Map keys, including types that contain maps, are not supported"),
    ("CREATE STREAM o (k STRING KEY, a MAP<INT, INT>) WITH (kafka_topic='s', value_format='json');",
     "JSON only supports MAP types with STRING keys"),
    ("CREATE STREAM o WITH (timestamp='v') AS SELECT k, name FROM s;",
     "The TIMESTAMP column set in the WITH clause does not exist in the schema: 'V'"),
    ("CREATE STREAM o WITH (timestamp='v') AS SELECT k, v FROM s;", "Timestamp column, `V`, should be LONG"),
])
def test_refused(ms: Metastore, sql: str, pattern: str) -> None:
    refused(ms, sql, pattern)


def test_join_keys_follow_ksqldb(ms: Metastore) -> None:
    # both join columns selected: the left one is the key, the right one a value column
    effects = accepted(ms, "CREATE STREAM o AS SELECT * FROM s JOIN s2 WITHIN 1 SECOND ON s.k = s2.k;")
    sink = next(e for e in effects if isinstance(e, StartQuery)).sink
    assert [c.name for c in sink.key_columns] == ["S_K"]
    assert "S2_K" in [c.name for c in sink.value_columns]
    # a FULL OUTER join's SELECT * starts with the synthetic key
    effects = accepted(ms, "CREATE STREAM o2 AS SELECT * FROM s FULL JOIN s2 WITHIN 1 SECOND ON s.k = s2.k;", 101)
    sink = next(e for e in effects if isinstance(e, StartQuery)).sink
    assert sink.columns[0].name == "ROWKEY"
    assert sink.columns[0].is_key
    assert sink.columns[0].type == t.STRING


def test_nway_join_keys_follow_ksqldb(ms: Metastore) -> None:
    # the key is the first key synonym the projection selects (multi-joins.json "second join column")
    effects = accepted(ms, "CREATE STREAM o AS SELECT t.k, s.v, t.x, t2.y FROM s JOIN t ON s.k = t.k "
                           "JOIN t2 ON s.k = t2.k;")
    sink = next(e for e in effects if isinstance(e, StartQuery)).sink
    assert [c.name for c in sink.key_columns] == ["T_K"]
    # tables on their primary keys: a TABLE; a FULL join after an INNER one has the synthetic key
    effects = accepted(ms, "CREATE TABLE o2 AS SELECT ROWKEY AS id, t.x, t2.y, t3.z FROM t JOIN t2 ON t.k = t2.k "
                           "FULL JOIN t3 ON t.k = t3.k;", 101)
    sink = next(e for e in effects if isinstance(e, StartQuery)).sink
    assert sink.kind is sql_ast.SourceKind.TABLE
    assert [c.name for c in sink.key_columns] == ["ID"]


def test_grouping_a_join_result_is_analyzed(ms: Metastore) -> None:
    # group-by.json "on join" (ON in parentheses) and "windowed join"
    effects = accepted(ms, "CREATE TABLE o AS SELECT t.k, SUM(t.x + CASE WHEN t2.y IS NULL THEN 0 ELSE t2.y END) AS s "
                           "FROM t LEFT JOIN t2 ON (t.k = t2.k) GROUP BY t.k HAVING COUNT(1) > 0;")
    sink = next(e for e in effects if isinstance(e, StartQuery)).sink
    assert [c.name for c in sink.key_columns] == ["T_K"]
    effects = accepted(ms, "CREATE TABLE o2 AS SELECT t.k, COUNT(*) AS c FROM s LEFT JOIN t ON t.k = s.k "
                           "WINDOW TUMBLING (SIZE 1 MINUTE) GROUP BY t.k HAVING COUNT(*) > 2;", 101)
    sink = next(e for e in effects if isinstance(e, StartQuery)).sink
    assert sink.window is not None


def test_a_foreign_key_join_is_keyed_by_the_left_table(ms: Metastore) -> None:
    effects = accepted(ms, "CREATE TABLE o AS SELECT t.k, t.x, t2.y FROM t LEFT JOIN t2 ON CAST(t.x AS STRING) = t2.k;")
    sink = next(e for e in effects if isinstance(e, StartQuery)).sink
    assert [c.name for c in sink.key_columns] == ["T_K"]
    assert sink.kind is sql_ast.SourceKind.TABLE


def test_in_coerces_literals_and_rowtime_compares_with_timestamp_strings(ms: Metastore) -> None:
    accepted(ms, "CREATE STREAM o AS SELECT * FROM s WHERE v IN (1, '2', 3.0) AND flag IN ('true', 'no') "
                 "AND name IN (1, true) AND ROWTIME > '2020-01-01T00:00:00';")


def test_coerced_literals_are_rewritten_in_the_resolved_tree(ms: Metastore) -> None:
    assert _where(ms, "ROWTIME > '2020-01-01T00:00:00' AND v IN (1, '2') AND flag IN ('tr', 'no') "
                      "AND name IN (1, TRUE)") == (
        '"S"."ROWTIME" > 1577836800000 AND "S"."V" IN (1, 2) AND "S"."FLAG" IN (TRUE, FALSE) '
        'AND "S"."NAME" IN (\'1\', \'true\')')
    refused(ms, "SELECT k FROM s WHERE v > '2020-01-01' EMIT CHANGES;", r"Cannot compare V \(INTEGER\) to '2020-01-01'")
    # magic-timestamp-conversion.json: partial strings, zones, and BETWEEN too
    assert _where(ms, "ROWTIME >= '2018' AND ROWTIME BETWEEN '2018-01-01T00:00:00.001' "
                      "AND '2020-02-10T08:31:44.001+0100'") == (
        '"S"."ROWTIME" >= 1514764800000 AND "S"."ROWTIME" BETWEEN 1514764800001 AND 1581319904001')


def _where(ms: Metastore, condition: str) -> str:
    """The resolved WHERE of ``SELECT k FROM s WHERE <condition>`` as SQL."""
    (stmt,) = parse(f"SELECT k FROM s WHERE {condition} EMIT CHANGES;")
    a = analyze_query(of_type(stmt, sql_ast.QueryStatement).query, ms.source_map())
    assert a.where is not None
    return a.where.sql()


def test_windowed_sources(ms: Metastore) -> None:
    wt = ms.source("WT")
    assert wt is not None
    assert wt.window is not None
    assert wt.window.size_ms == 10_000
    effects = accepted(ms, "CREATE STREAM o AS SELECT k, c FROM ws WHERE c > 1;")
    assert next(e for e in effects if isinstance(e, StartQuery)).sink.window == present(ms.source("WS"), "source WS").window


def test_select_star_of_a_windowed_source_has_window_bounds_only_in_a_push_query(ms: Metastore) -> None:
    """session-windows.json "import session stream": a persistent query's SELECT * of a windowed
    source drops WINDOWSTART/WINDOWEND (ksqlDB's FinalProjectNode: they are in the windowed key);
    a push query shows them."""
    (s,) = parse("SELECT * FROM ws EMIT CHANGES;")
    push = analyze_query(of_type(s, sql_ast.QueryStatement, "push").query, ms.source_map())
    assert [c.name for c in push.columns] == ["K", "WINDOWSTART", "WINDOWEND", "C"]
    (c,) = parse("CREATE STREAM o AS SELECT * FROM ws;")
    persistent = analyze_query(of_type(c, sql_ast.CreateAsSelect, "C*AS").query, ms.source_map(), sink="O")
    assert [col.name for col in persistent.columns] == ["K", "C"]


def test_delimiter_names(ms: Metastore) -> None:
    accepted(ms, "CREATE STREAM o (a INT, b INT) WITH (kafka_topic='s', value_format='delimited', value_delimiter='TAB');")
    assert present(ms.source("O"), "source O").value_delimiter == "\t"


def test_a_delimited_sink_inherits_its_delimited_sources_delimiter(ms: Metastore) -> None:
    """delimited.json 'should take source delimiter for sink': ksqlDB's Analyzer inherits the
    source's VALUE_DELIMITER into a sink of the same format, unless the sink names its own."""
    accepted(ms, "CREATE STREAM p (a INT, b INT) WITH (kafka_topic='s', value_format='delimited', value_delimiter='|');")
    accepted(ms, "CREATE STREAM p2 AS SELECT * FROM p;")
    accepted(ms, "CREATE STREAM p3 WITH (value_delimiter='$') AS SELECT * FROM p;")
    accepted(ms, "CREATE STREAM p4 WITH (value_format='JSON') AS SELECT * FROM p;")
    accepted(ms, "CREATE STREAM p5 WITH (value_format='DELIMITED') AS SELECT * FROM p4;")
    assert [present(ms.source(n), n).value_delimiter for n in ("P2", "P3", "P5")] == ["|", "$", ","]


def test_key_delimiter_is_the_delimited_keys_own(ms: Metastore) -> None:
    """delimited.json 'multi-column key with different kv delimiters': KEY_DELIMITER splits a
    DELIMITED key (VALUE_DELIMITER only the value), and a DELIMITED sink key inherits it."""
    accepted(ms, "CREATE STREAM kd (k1 STRING KEY, k2 STRING KEY, v INT) WITH (kafka_topic='s', format='DELIMITED', "
                 "key_delimiter=';', value_delimiter='-');")
    kd = present(ms.source("KD"), "source KD")
    assert (kd.key_delimiter, kd.value_delimiter) == (";", "-")
    accepted(ms, "CREATE STREAM kd2 AS SELECT * FROM kd;")
    assert present(ms.source("KD2"), "source KD2").key_delimiter == ";"
    accepted(ms, "CREATE STREAM kd3 WITH (key_format='JSON') AS SELECT * FROM kd;")
    assert present(ms.source("KD3"), "source KD3").key_delimiter == ","
    refused(ms, "CREATE STREAM kd4 (k1 STRING KEY, v INT) WITH (kafka_topic='s', format='JSON', key_delimiter=';');",
            r"JSON does not support the following configs: \[delimiter\]")


@pytest.mark.parametrize(("sql", "message"), [
    # comparison-expression.json: ksqlDB's FilterTypeValidator names the clause in front of the
    # expression type manager's error; binary operations print in parentheses; a join's
    # qualified columns print as the joined schema names them (I1_BAR)
    ("CREATE STREAM o AS SELECT k FROM s WHERE v >= 'not an int';",
     "Error in WHERE expression: Cannot compare V (INTEGER) to 'not an int' (STRING) with GREATER_THAN_OR_EQUAL."),
    ("CREATE STREAM o AS SELECT k FROM s WHERE v > 1 AND (id + 1 > 'x');",
     "Error in WHERE expression: Cannot compare (ID + 1) (BIGINT) to 'x' (STRING) with GREATER_THAN."),
    ("CREATE STREAM o AS SELECT s.k FROM s JOIN s2 WITHIN 1 SECOND ON s.k = s2.k WHERE s.v > s2.k;",
     "Error in WHERE expression: Cannot compare S_V (INTEGER) to S2_K (STRING) with GREATER_THAN."),
    ("CREATE STREAM o AS SELECT k FROM s WHERE RANDOM() + 1.5;",
     "Type error in WHERE expression: Should evaluate to boolean but is (RANDOM() + 1.5) (DOUBLE) instead."),
    ("CREATE STREAM o AS SELECT k FROM s WHERE true + 1.5;",
     "Error in WHERE expression: Error processing expression: (true + 1.5). Unsupported arithmetic types. BOOLEAN DECIMAL"),
    ("CREATE TABLE o AS SELECT k, SUM(id) FROM s GROUP BY k HAVING SUM(id) > '100';",
     "Error in HAVING expression: Cannot compare SUM(ID) (BIGINT) to '100' (STRING) with GREATER_THAN."),
    ("CREATE STREAM o AS SELECT k, name + 1 AS x FROM s;",
     "Error processing expression: (NAME + 1). Unsupported arithmetic types. STRING INTEGER"),
])
def test_type_errors_read_as_ksqldb_writes_them(ms: Metastore, sql: str, message: str) -> None:
    (s,) = parse(sql)
    with pytest.raises(StatementError) as refusal:
        ms.validate(s, {}, TOPICS)
    assert refusal.value.message == message


@pytest.mark.parametrize(("select", "expected"), [
    # create_array.json / create_map.json: ksqlDB's CoercionUtil over a constructor's elements
    ("ARRAY[null, 10, '2e1', v, v]", "ARRAY<DECIMAL(10, 0)>"),
    ("ARRAY[1, '2', 3000000000]", "ARRAY<BIGINT>"),
    ("MAP(name := flag, k := 'true', 10 := 'no')", "MAP<STRING, BOOLEAN>"),
    ("ARRAY[1, 'not a number']", 'invalid input syntax for type INTEGER: "not a number".'),
    ("MAP(name := v, k := 'hello')", 'invalid input syntax for type INTEGER: "hello".'),
    ("ARRAY[flag, 'maybe']", 'invalid input syntax for type BOOLEAN: "maybe".'),
    # "construct a list from compatible mismatching struct elements": one STRUCT with every field
    ("ARRAY[null, STRUCT(x := v, y := id), STRUCT(y := v, z := id)]", "ARRAY<STRUCT<`Y` BIGINT, `Z` BIGINT, `X` INTEGER>>"),
    ("ARRAY[STRUCT(a := STRUCT(b := v)), STRUCT(a := STRUCT(c := name))]",
     "ARRAY<STRUCT<`A` STRUCT<`C` STRING, `B` INTEGER>>>"),
    ("ARRAY[STRUCT(x := v), STRUCT(x := name)]",
     "invalid input syntax for type STRUCT<`X` INTEGER>: ARRAY elements must all be of one type"),
])
def test_constructor_elements_are_coerced_as_ksqldb_does(ms: Metastore, select: str, expected: str) -> None:
    (s,) = parse(f"SELECT {select} AS X FROM s EMIT CHANGES;")
    query = of_type(s, sql_ast.QueryStatement, "statement").query
    if expected.startswith("invalid"):
        with pytest.raises(StatementError) as refusal:
            analyze_query(query, ms.source_map())
        assert refusal.value.message == expected
    else:
        assert analyze_query(query, ms.source_map()).columns[0].type.ksql_name == expected


def test_a_star_argument_is_a_call_without_arguments(ms: Metastore) -> None:
    """greatest.json "test trying to call GREATEST(*)": ksqlDB's grammar takes ``name(*)`` as a
    call; a function other than COUNT then has no arguments."""
    (s,) = parse("SELECT GREATEST(*) AS HIGHEST FROM s EMIT CHANGES;")
    with pytest.raises(StatementError) as refusal:
        analyze_query(of_type(s, sql_ast.QueryStatement, "statement").query, ms.source_map())
    assert refusal.value.message == "Function 'greatest' does not accept parameters ()."
    (s,) = parse("SELECT COUNT(*) AS C FROM s GROUP BY k EMIT CHANGES;")
    assert analyze_query(of_type(s, sql_ast.QueryStatement, "statement").query, ms.source_map()).columns[-1].name == "C"
