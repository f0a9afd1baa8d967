"""Statements ksqlDB refuses, refused with ksqlDB's own message (its query-validation tests
compare that the message contains the expected text): the WITH clause's formats, delimiter and
schema ids, a CREATE without columns, the place a parse-time column check names, IN lists whose
items do not fit one type, unknown qualifiers, aggregates without GROUP BY, join types."""

from __future__ import annotations

import pytest

from oncestream.sql.errors import KsqlError
from oncestream.sql.language import sql_ast
from oncestream.sql.language.analyzer import analyze_query
from oncestream.sql.language.parser import parse
from oncestream.sql.server.metastore import Metastore
from tests.support.metastores import metastore_with

DDL = """
CREATE STREAM s (k STRING KEY, id BIGINT, v INT, name STRING) WITH (kafka_topic='s', value_format='json');
CREATE TABLE lt (l_id BIGINT PRIMARY KEY, fk BIGINT) WITH (kafka_topic='lt', value_format='json');
CREATE TABLE rt (r_id BIGINT PRIMARY KEY, f1 STRING) WITH (kafka_topic='rt', value_format='json');
CREATE STREAM dl (k STRING KEY, x DOUBLE, y DOUBLE, v INT) WITH (kafka_topic='dl', value_format='delimited');
CREATE TABLE mt (m_id BIGINT PRIMARY KEY, f2 BIGINT) WITH (kafka_topic='mt', value_format='json');
CREATE STREAM c (k STRING KEY, id BIGINT, v INT, name STRING, d DECIMAL(4, 2), flag BOOLEAN, arr ARRAY<BIGINT>,
                 m MAP<STRING, BIGINT>, st STRUCT<F0 BIGINT>, b BOOLEAN) WITH (kafka_topic='c', value_format='json');
"""
TOPICS = {"dl": 1, "s": 1, "c": 1, "lt": 1, "rt": 1, "mt": 1, "input": 1, "test_topic": 1}


@pytest.fixture
def ms() -> Metastore:
    return metastore_with(DDL, TOPICS)


def refusal(ms: Metastore, sql: str, topics: dict[str, int] = TOPICS) -> str:
    """The message a statement is refused with (parsed, then validated as a node validates it)."""
    def run() -> None:
        for s in parse(sql, ms.custom_types()):   # a parse error is a refusal too
            ms.validate(s, {}, topics)

    with pytest.raises(KsqlError) as caught:
        run()
    return caught.value.message


_DELIMITER_EMPTY = ("Failed to prepare statement: Configuration VALUE_DELIMITER is invalid: Delimiter cannot be empty, "
                    "if you meant to have a tab or space for delimiter, please use the special values 'TAB' or 'SPACE'"
                    "\nExample valid value: ';'")
_BOTH = ("Cannot supply both '{}' and 'FORMAT' properties, as 'FORMAT' sets both key and value formats. "
         "Either use just 'FORMAT', or use 'KEY_FORMAT' and 'VALUE_FORMAT'.")


@pytest.mark.parametrize(("sql", "message"), [
    # FormatFactory.of
    ("CREATE STREAM o (a INT) WITH (kafka_topic='input', value_format='foo');", "Unknown format: FOO"),
    ("CREATE STREAM o (a INT) WITH (kafka_topic='input', value_format='json', key_format='foo');",
     "Unknown format: FOO"),
    ("CREATE STREAM o (a INT) WITH (kafka_topic='input', format='foo');", "Unknown format: FOO"),
    ("CREATE STREAM o WITH (value_format='foo') AS SELECT * FROM s;", "Unknown format: FOO"),
    # CommonCreateConfigs.validateKeyValueFormats, before the missing columns
    ("CREATE STREAM o WITH (kafka_topic='test_topic', key_format='KAFKA', format='KAFKA');", _BOTH.format("KEY_FORMAT")),
    ("CREATE STREAM o WITH (kafka_topic='test_topic', value_format='JSON', format='KAFKA');",
     _BOTH.format("VALUE_FORMAT")),
    ("CREATE STREAM o WITH (key_format='KAFKA', format='JSON') AS SELECT * FROM s;", _BOTH.format("KEY_FORMAT")),
    # Delimiter.parse, while the statement is prepared: before the columns and the format
    ("CREATE STREAM o WITH (kafka_topic='test_topic', value_format='DELIMITED', value_delimiter='<~>');",
     "Failed to prepare statement: Configuration VALUE_DELIMITER is invalid: Invalid delimiter value: '<~>'. "
     "Delimiter must be a single character or TAB,SPACE\nExample valid value: ';'"),
    ("CREATE STREAM o WITH (kafka_topic='test_topic', value_format='DELIMITED', value_delimiter='');", _DELIMITER_EMPTY),
    ("CREATE STREAM o WITH (kafka_topic='test_topic', value_format='DELIMITED', value_delimiter=' ');", _DELIMITER_EMPTY),
    ("CREATE STREAM o WITH (kafka_topic='test_topic', value_format='DELIMITED', value_delimiter='\t');", _DELIMITER_EMPTY),
    ("CREATE STREAM o WITH (kafka_topic='test_topic', value_format='JSON', value_delimiter='|');",
     "JSON does not support the following configs: [delimiter]"),
    # TableElements.toLogicalSchema
    ("CREATE STREAM o WITH (kafka_topic='input', value_format='KAFKA');", "No columns supplied."),
    ("CREATE STREAM o WITH (kafka_topic='input', value_format='DELIMITED');", "No columns supplied."),
    # DefaultSchemaInjector, before the registry is asked
    ("CREATE STREAM o WITH (kafka_topic='input', key_format='kafka', value_format='protobuf', key_schema_id=1);",
     "KEY_FORMAT should support schema inference when KEY_SCHEMA_ID is provided. Current format is KAFKA."),
    ("CREATE STREAM o WITH (kafka_topic='input', key_format='protobuf', value_format='kafka', value_schema_id=1);",
     "VALUE_FORMAT should support schema inference when VALUE_SCHEMA_ID is provided. Current format is KAFKA."),
    ("CREATE STREAM o (`c3` INT KEY) WITH (kafka_topic='input', key_format='protobuf', value_format='protobuf', "
     "key_schema_id=1);", "Table elements and KEY_SCHEMA_ID cannot both exist for create statement."),
    ("CREATE STREAM o (`c1` INT, `c2` INT) WITH (kafka_topic='input', key_format='protobuf', value_format='protobuf', "
     "value_schema_id=2);", "Table elements and VALUE_SCHEMA_ID cannot both exist for create statement."),
    ("CREATE STREAM o WITH (value_format='kafka', value_schema_id=2) AS SELECT k, id FROM s;",
     "VALUE_FORMAT should support schema inference when VALUE_SCHEMA_ID is provided. Current format is KAFKA."),
    # the statement grammar has ASSERT TOPIC / SCHEMA only; RUN SCRIPT is the test tool's
    ("ASSERT VALUES foo (id INT) VALUES (123);", "line 1:8: Syntax Error\nSyntax error at or near 'VALUES' at line 1:8"),
    ("ASSERT STREAM foo (id INT);", "line 1:8: Syntax Error\nSyntax error at or near 'STREAM' at line 1:8"),
    ("ASSERT TOPIC foo;", "line 1:1: The ASSERT statement is not supported"),
    ("RUN SCRIPT 'foo';", "line 1:1: Syntax Error\nUnknown statement 'RUN'"),
    # GROUP BY / PARTITION BY items are ksqlDB's valueExpression: no AND/OR or comparison outside parentheses
    ("CREATE TABLE o AS SELECT COUNT(*) FROM s GROUP BY name AND id;",
     "line 1:56: Syntax Error\nmismatched input 'AND' expecting ';'"),
    ("CREATE STREAM o AS SELECT * FROM s PARTITION BY name = 'x';",
     "line 1:54: Syntax Error\nmismatched input '=' expecting ';'"),
    # the grammar's IN list has at least one expression
    ("CREATE STREAM o AS SELECT * FROM s WHERE id IN ( );", "line 1:42: Syntax Error\nAn IN list needs at least one value"),
    # CreateTable/CreateStream name the column's place as NodeLocation does
    ("CREATE TABLE o (ID INT KEY, F0 INT) WITH (kafka_topic='input', value_format='JSON');",
     "Line: 1, Col: 17: Column `ID` is a 'KEY' column: please use 'PRIMARY KEY' for tables."),
    ("CREATE STREAM o (ID INT PRIMARY KEY, F0 INT) WITH (kafka_topic='input', value_format='JSON');",
     "Line: 1, Col: 18: Column `ID` is a 'PRIMARY KEY' column: please use 'KEY' for streams."),
])
def test_refused_with_ksqldbs_text(ms: Metastore, sql: str, message: str) -> None:
    got = refusal(ms, sql)
    assert message in got, got


@pytest.mark.parametrize(("given", "delimiter"), [("TAB", "\t"), ("SPACE", " "), ("|", "|"), ("tab", "\t")])
def test_named_and_single_character_delimiters_are_accepted(ms: Metastore, given: str, delimiter: str) -> None:
    (s,) = parse(f"CREATE STREAM o (a INT, b INT) WITH (kafka_topic='input', value_format='delimited', "
                 f"value_delimiter='{given}');")
    ms.apply(ms.validate(s, {}, TOPICS), 100)
    source = ms.source("O")
    assert source is not None
    assert source.value_delimiter == delimiter


_HINT = "\nHint: You might need to add explicit type casts."


@pytest.mark.parametrize(("where", "message"), [
    # the list's running common type is reported (DECIMAL(4, 2) widened by 10 to DECIMAL(12, 2))
    ("v IN (10, true)", "Invalid Predicate: operator does not exist: INTEGER = BOOLEAN (true)" + _HINT),
    ("d IN (10, true)", "Invalid Predicate: operator does not exist: DECIMAL(12, 2) = BOOLEAN (true)" + _HINT),
    ("flag IN (10)", "Invalid Predicate: operator does not exist: BOOLEAN = INTEGER (10)" + _HINT),
    ("id IN (1, name)", "Invalid Predicate: operator does not exist: BIGINT = STRING (NAME)" + _HINT),
    ("name IN (1, 'a', true, id)", "Invalid Predicate: operator does not exist: STRING = BIGINT (ID)" + _HINT),
    # constructors as ksqlDB's ExpressionFormatter prints them
    ("arr IN (arr, ARRAY[b])", "Invalid Predicate: operator does not exist: ARRAY<BIGINT> = ARRAY<BOOLEAN> (ARRAY[B])"),
    ("arr IN (ARRAY_LENGTH(arr))", "Invalid Predicate: operator does not exist: ARRAY<BIGINT> = INTEGER (ARRAY_LENGTH(ARR))"),
    ("m IN (MAP('a' := b))",
     "Invalid Predicate: operator does not exist: MAP<STRING, BIGINT> = MAP<STRING, BOOLEAN> (MAP('a':=B))"),
    ("st IN (STRUCT(F0 := b))",
     "Invalid Predicate: operator does not exist: STRUCT<`F0` BIGINT> = STRUCT<`F0` BOOLEAN> (STRUCT(F0:=B))"),
    ("st IN (ARRAY[10])", "Invalid Predicate: operator does not exist: STRUCT<`F0` BIGINT> = ARRAY<INTEGER> (ARRAY[10])"),
    # a string literal inside a constructor must parse as the element type
    ("arr IN (arr, ARRAY['10', 'not 10'])", 'Invalid Predicate: invalid input syntax for type BIGINT: "not 10"'),
    ("m IN (MAP('10' := 'not 10'))", 'Invalid Predicate: invalid input syntax for type BIGINT: "not 10"'),
    ("st IN (STRUCT(F0 := 'not 10'))", 'Invalid Predicate: invalid input syntax for type BIGINT: "not 10"'),
])
def test_in_list_refused_with_ksqldbs_text(ms: Metastore, where: str, message: str) -> None:
    got = refusal(ms, f"CREATE STREAM o AS SELECT * FROM c WHERE {where};")
    assert message in got, got


@pytest.mark.parametrize("where", ["v IN (1, 2.5, '3', NULL)", "name IN ('a', 1, true)", "d IN (1, 2.25, '3.5')",
                                   "flag IN ('yes', false)", "arr IN (arr, ARRAY[1, 2])"])
def test_in_lists_of_one_type_are_accepted(ms: Metastore, where: str) -> None:
    for s in parse(f"CREATE STREAM o AS SELECT * FROM c WHERE {where};"):
        ms.validate(s, {}, TOPICS)


_STATE = ("One of the functions used in the statement has an intermediate type that the value format can not handle. "
          "Please remove the function or change the format.")
_UNKNOWN = "Failed to prepare statement: 'UNKNOWN' is not a valid stream/table name or alias."


@pytest.mark.parametrize(("sql", "message"), [
    # AstBuilder checks qualifiers while preparing: before resolving (so not "ambiguous") or finding sources
    ("CREATE STREAM o AS SELECT unknown.* FROM s;", _UNKNOWN),
    ("CREATE TABLE o AS SELECT * FROM lt JOIN rt ON l_id = unknown.r_id;", _UNKNOWN),
    ("CREATE TABLE o AS SELECT * FROM lt JOIN rt ON unknown.fk = r_id;", _UNKNOWN),
    ("SELECT unknown.id FROM nowhere EMIT CHANGES;", _UNKNOWN),
    # grammatical, refused by ksqlDB's GroupBy/PartitionBy nodes while preparing
    ("CREATE STREAM o AS SELECT id, name FROM s PARTITION BY ();",
     "Failed to prepare statement: PARTITION BY requires at least one expression"),
    ("CREATE TABLE o AS SELECT id, COUNT(*) FROM s GROUP BY ();",
     "Failed to prepare statement: GROUP BY requires at least one expression"),
    # AggregateAnalyzer gives an argument-less aggregate the default argument ROWTIME
    ("CREATE TABLE o AS SELECT COUNT(*) FROM s;",
     "CREATE TABLE AS SELECT statement does not support aggregate function [COUNT(ROWTIME)] without a GROUP BY clause."),
    # the Analyzer's aggregate rules come before the planner's WINDOW check
    ("CREATE TABLE o AS SELECT k, COUNT(*) AS c FROM s WINDOW TUMBLING (SIZE 2 MILLISECONDS) EMIT FINAL;",
     "Non-aggregate SELECT expression(s) not part of GROUP BY: K"),
    ("CREATE STREAM o AS SELECT k, id FROM s WINDOW TUMBLING (SIZE 2 MILLISECONDS);",
     "WINDOW clause requires a GROUP BY clause."),
    # a key column of a join is named as the joined schema names it, clash or not
    ("CREATE TABLE o AS SELECT l_id, l_id AS l_id_duplicate, f1 FROM lt JOIN rt ON fk = r_id;",
     "The projection contains a key column (`LT_L_ID`) more than once, aliased as: L_ID and L_ID_DUPLICATE."),
    # a foreign-key join must join two sources, not a join's result
    ("CREATE TABLE o AS SELECT l_id, fk, f2, f1 FROM lt JOIN mt ON l_id = m_id JOIN rt ON fk = r_id;",
     "Invalid join condition: foreign-key table-table joins are not supported as part of n-way joins. "
     "Got LT.FK = RT.R_ID."),
    ("CREATE TABLE o AS SELECT l_id, fk, f2, f1 FROM lt JOIN mt ON fk = m_id JOIN rt ON fk = r_id;",
     "Invalid join condition: foreign-key table-table joins are not supported as part of n-way joins. "
     "Got LT.FK = RT.R_ID."),
    # an aggregation's state is kept in the source's value format: DELIMITED holds no STRUCT or ARRAY
    ("CREATE TABLE o AS SELECT k, AVG(v) AS a FROM dl GROUP BY k;", _STATE),
    ("CREATE TABLE o AS SELECT k, CORRELATION(x, y) AS c FROM dl GROUP BY k;", _STATE),
    ("CREATE TABLE o AS SELECT k, STDDEV_SAMP(x) AS d FROM dl GROUP BY k;", _STATE),
    ("CREATE TABLE o AS SELECT k, TOPK(v, 3) AS t FROM dl GROUP BY k;", _STATE),
    ("SELECT k, LATEST_BY_OFFSET(v) FROM dl GROUP BY k EMIT CHANGES;", _STATE),
    # a join condition's sides as ExpressionFormatter prints them (CAST to STRING, not VARCHAR)
    ("CREATE TABLE o AS SELECT * FROM lt JOIN rt ON CAST(fk AS STRING) = r_id;",
     "Invalid join condition: types don't match. Got CAST(LT.FK AS STRING){STRING} = RT.R_ID{BIGINT}."),
])
def test_query_refused_with_ksqldbs_text(ms: Metastore, sql: str, message: str) -> None:
    got = refusal(ms, sql) if not sql.startswith("SELECT") else _query_refusal(ms, sql)
    assert message in got, got


def _query_refusal(ms: Metastore, sql: str) -> str:
    (statement,) = parse(sql)
    assert isinstance(statement, sql_ast.QueryStatement)
    with pytest.raises(KsqlError) as caught:
        analyze_query(statement.query, ms.source_map())
    return caught.value.message


@pytest.mark.parametrize("select", ["k, COUNT(*) AS n", "k, SUM(v) AS s", "k, MIN(x) AS m, MAX(y) AS n"])
def test_aggregates_with_primitive_state_run_over_delimited(ms: Metastore, select: str) -> None:
    (statement,) = parse(f"CREATE TABLE o AS SELECT {select} FROM dl GROUP BY k;")
    ms.validate(statement, {}, TOPICS)


_WINDOWED = """
CREATE STREAM w1 (id INT KEY, v BIGINT) WITH (kafka_topic='w1', key_format='{fmt}', value_format='JSON',
                                            window_type='Hopping', window_size='5 SECONDS');
CREATE STREAM w2 (id INT KEY, v BIGINT) WITH (kafka_topic='w2', key_format='{fmt}', value_format='JSON',
                                            window_type='{kind}', window_size='{size}');
"""
_JOIN_WINDOWED = "CREATE STREAM o AS SELECT * FROM w1 JOIN w2 WITHIN 1 MINUTE ON w1.id = w2.id;"


def test_windowed_sources_with_other_windows_join_only_with_registry_keys() -> None:
    """The window is part of a windowed key's format: a KAFKA key would have to be repartitioned,
    which ksqlDB cannot do for a windowed source; a registry key format is repartitioned anyway."""
    topics = {"w1": 1, "w2": 1}
    kafka = metastore_with(_WINDOWED.format(fmt="KAFKA", kind="Tumbling", size="2 SECONDS"), topics)
    assert refusal(kafka, _JOIN_WINDOWED, topics) == ("Implicit repartitioning of windowed sources is not supported. "
                                                      "See https://github.com/confluentinc/ksql/issues/4385.")
    for fmt, kind, size in (("JSON_SR", "Tumbling", "2 SECONDS"), ("KAFKA", "Hopping", "5 SECONDS")):
        ms = metastore_with(_WINDOWED.format(fmt=fmt, kind=kind, size=size), topics)
        (statement,) = parse(_JOIN_WINDOWED)
        ms.validate(statement, {}, topics)
