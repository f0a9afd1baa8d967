"""Every error family of the metastore's validation, on parsed statements, with ksqlDB's wording
(each is a StatementError: HTTP 400, error_code 40001, carrying the statement text)."""

from __future__ import annotations

import pytest

from oncestream.sql.errors import BAD_STATEMENT, StatementError
from oncestream.sql.language.catalog import Format
from oncestream.sql.language.parser import parse
from oncestream.sql.language.sql_ast import CreateAsSelect
from oncestream.sql.language.statement_plan import with_server_defaults
from oncestream.sql.server.metastore import CommandResult, CreateTopic, Metastore, StartQuery, StopQuery

TOPICS = {"orders": 2, "users": 1, "raw": 6}
BASE = """
CREATE STREAM orders (id INT KEY, userid STRING, amount DOUBLE, ts BIGINT) WITH (kafka_topic='orders', value_format='json');
CREATE TABLE users (userid STRING PRIMARY KEY, name STRING) WITH (kafka_topic='users', value_format='json');
CREATE STREAM orders2 (id INT KEY, userid STRING, amount DOUBLE, ts BIGINT) WITH (kafka_topic='orders', value_format='json');
CREATE SOURCE TABLE ro (k STRING PRIMARY KEY, v STRING) WITH (kafka_topic='users', value_format='json');
"""


def fresh() -> Metastore:
    ms = Metastore()
    for offset, s in enumerate(parse(BASE)):
        ms.apply(ms.validate(s, {}, TOPICS), offset)
    return ms


def run(ms: Metastore, sql: str, offset: int) -> list:
    (s,) = parse(sql)
    return ms.apply(ms.validate(s, {}, TOPICS), offset)


def refused(ms: Metastore, sql: str, pattern: str) -> StatementError:
    (s,) = parse(sql)
    with pytest.raises(StatementError, match=pattern) as info:
        ms.validate(s, {}, TOPICS)
    assert info.value.error_code == BAD_STATEMENT
    assert info.value.http_status == 400
    if "format does not support schema" in info.value.message and isinstance(s, CreateAsSelect):
        # a C*AS sink's formats are checked on the rewritten statement, whose text ksqlDB's error
        # carries (tests/unit/sql/test_statement_text.py)
        assert info.value.statement_text is not None
        assert info.value.statement_text.endswith("\nEMIT CHANGES")
    else:
        assert info.value.statement_text == s.text
    return info.value


@pytest.mark.parametrize(("sql", "pattern"), [
    ("CREATE STREAM s (a INT) WITH (value_format='json');", 'Missing required property "KAFKA_TOPIC"'),
    ("CREATE STREAM s (a INT) WITH (kafka_topic='raw');", "Statement is missing the 'VALUE_FORMAT' property"),
    ("CREATE STREAM s (a INT) WITH (kafka_topic='raw', value_format='xml');", "Unknown format: XML"),
    ("CREATE STREAM s (a INT, b INT) WITH (kafka_topic='raw', value_format='kafka');",
     r"The 'KAFKA' format only supports a single field. Got: \[`A` INTEGER, `B` INTEGER\]"),
    ("CREATE STREAM s (a INT, b STRING) WITH (kafka_topic='raw', value_format='json', timestamp='c');",
     "The TIMESTAMP column set in the WITH clause does not exist in the schema: 'C'"),
    ("CREATE STREAM s (a INT, b STRING) WITH (kafka_topic='raw', value_format='json', timestamp='b');",
     "Timestamp column, `B`, should be LONG"),
    ("CREATE STREAM s (a INT) WITH (kafka_topic='raw', value_format='json', partitions=3);",
     "A Kafka topic with the name 'raw' already exists, with different partition/replica configuration than required. "
     r"KSQL expects 3 partitions \(topic has 6\)"),
    ("CREATE STREAM s (a INT) WITH (kafka_topic='nope', value_format='json');",
     "Topic 'nope' does not exist. If you want to create a new topic for the stream/table please re-run the statement "
     "providing the required 'PARTITIONS' configuration in the WITH clause"),
    ("CREATE TABLE t (a INT, b INT) WITH (kafka_topic='raw', value_format='json');", "Tables require a PRIMARY KEY"),
    ("CREATE STREAM orders (a INT) WITH (kafka_topic='raw', value_format='json');",
     "Cannot add stream 'ORDERS': A stream with the same name already exists"),
    ("CREATE TABLE orders (a INT PRIMARY KEY) WITH (kafka_topic='raw', value_format='json');",
     "Cannot add table 'ORDERS': A stream with the same name already exists"),
    ("CREATE OR REPLACE TABLE ro (k STRING PRIMARY KEY, v STRING) WITH (kafka_topic='users', value_format='json');",
     "CREATE OR REPLACE is not supported on source tables"),
    ("CREATE STREAM s AS SELECT id, amount FROM nope;", "NOPE does not exist."),
    ("CREATE STREAM users AS SELECT id, amount FROM orders;",
     "Cannot add stream 'USERS': A table with the same name already exists"),
    ("CREATE TABLE t AS SELECT id, amount FROM orders;",
     "Invalid result type. Your SELECT query produces a STREAM. Please use CREATE STREAM AS SELECT statement instead."),
    ("CREATE STREAM s WITH (value_format='kafka') AS SELECT id, userid, amount FROM orders;",
     "The 'KAFKA' format only supports a single field"),
    ("CREATE STREAM s WITH (key_format='json') AS SELECT id, amount FROM orders PARTITION BY NULL;",
     "Key format specified for stream without key columns."),
    ("CREATE STREAM s AS SELECT * FROM orders LIMIT 3;", "CREATE STREAM AS SELECT statements don't support LIMIT clause."),
    ("INSERT INTO nope SELECT * FROM orders;", "Source `NOPE` does not exist."),
    ("INSERT INTO users SELECT * FROM orders;", "INSERT INTO can only be used to insert into a stream. USERS is a table."),
    ("INSERT INTO orders SELECT * FROM orders;", "a query cannot read from its own sink"),
    ("INSERT INTO orders2 WITH (query_id='csas_mine') SELECT * FROM orders;", "Query IDs must not start with a reserved"),
    ("DROP STREAM nope;", "Stream NOPE does not exist."),
    ("DROP TABLE nope;", "Table NOPE does not exist."),
    ("DROP TABLE orders;", "Incompatible data source type is stream, but statement was DROP table"),
    ("DROP TABLE ro DELETE TOPIC;", "Cannot delete topic for read-only source: RO"),
    ("DROP STREAM orders DELETE TOPIC;", r"Refusing to delete topic. Found other data sources \(ORDERS2\) using topic orders"),
    ("TERMINATE CSAS_NOPE_9;", "Unknown queryId: CSAS_NOPE_9"),
])
def test_refused_statements(sql: str, pattern: str) -> None:
    refused(fresh(), sql, pattern)


def test_read_only_sources_cannot_be_inserted_into() -> None:
    ms = fresh()
    run(ms, "CREATE SOURCE STREAM ros (id INT KEY, v STRING) WITH (kafka_topic='raw', value_format='json');", 9)
    refused(ms, "INSERT INTO ros SELECT id, userid AS v FROM orders;", "Cannot insert into read-only stream: ROS")


def test_local_statements_are_refused_by_validate() -> None:
    refused(fresh(), "SHOW STREAMS;", "answered locally")


def test_new_topic_with_partitions_and_compaction_for_tables() -> None:
    ms = fresh()
    effects = run(ms, "CREATE TABLE t (k STRING PRIMARY KEY, v INT) WITH (kafka_topic='new_t', value_format='json', "
                      "partitions=3, replicas=1);", 10)
    assert effects == [CreateTopic("new_t", 3, 1, compacted=True), CommandResult("SUCCESS", "Table created")]


def test_sink_defaults_topic_partitions_and_formats_from_the_source() -> None:
    ms = fresh()
    effects = run(ms, "CREATE STREAM big WITH (value_format='delimited') AS SELECT id, amount FROM orders;", 10)
    start = next(e for e in effects if isinstance(e, StartQuery))
    assert (start.sink.topic, start.sink.partitions, start.sink.key_format, start.sink.value_format) == \
        ("BIG", 2, Format.KAFKA, Format.DELIMITED)
    effects = run(ms, "CREATE STREAM nokey AS SELECT id, amount FROM orders PARTITION BY NULL;", 11)
    start = next(e for e in effects if isinstance(e, StartQuery))
    assert start.sink.key_format is Format.NONE
    assert start.sink.key_columns == ()


def test_create_or_replace_as_select_keeps_the_query_id() -> None:
    ms = fresh()
    run(ms, "CREATE STREAM big AS SELECT id, amount FROM orders WHERE amount > 10;", 10)
    effects = run(ms, "CREATE OR REPLACE STREAM big AS SELECT id, amount FROM orders WHERE amount > 20;", 11)
    assert effects[0] == StopQuery("CSAS_BIG_10")
    start = next(e for e in effects if isinstance(e, StartQuery))
    assert start.query.query_id == "CSAS_BIG_10"
    assert "amount > 20" in start.query.statement
    assert [q.query_id for q in ms.queries()] == ["CSAS_BIG_10"]
    refused(ms, "CREATE OR REPLACE STREAM big AS SELECT id, userid FROM orders;", "Cannot upgrade data source")


def test_insert_into_with_query_id_and_terminate_all() -> None:
    ms = fresh()
    run(ms, "CREATE STREAM big AS SELECT * FROM orders;", 10)
    effects = run(ms, "INSERT INTO big WITH (query_id='my_q') SELECT * FROM orders;", 11)
    assert effects[-1] == CommandResult("SUCCESS", "Created query with ID MY_Q", "MY_Q")
    refused(ms, "INSERT INTO big WITH (query_id='my_q') SELECT * FROM orders;", "Query ID 'MY_Q' already exists.")
    effects = run(ms, "TERMINATE ALL;", 12)
    assert effects == [StopQuery("CSAS_BIG_10"), StopQuery("MY_Q"), CommandResult("SUCCESS", "All queries terminated.")]
    assert ms.queries() == []


def _created_formats(sql: str, properties: dict[str, str]) -> tuple[Format, Format]:
    ms = fresh()
    (s,) = parse(sql)
    ms.apply(ms.validate(s, properties, TOPICS), 100)
    source = ms.source("S")
    assert source is not None
    return source.key_format, source.value_format


@pytest.mark.parametrize(("with_clause", "properties", "formats"), [
    # the WITH clause leaves a format out: the config's default (ksqlDB's DefaultFormatInjector)
    ("", {"ksql.persistence.default.format.value": "JSON"}, (Format.KAFKA, Format.JSON)),
    ("", {"ksql.persistence.default.format.value": "delimited", "ksql.persistence.default.format.key": "JSON"},
     (Format.JSON, Format.DELIMITED)),
    (", key_format='json'", {"ksql.persistence.default.format.value": "KAFKA"}, (Format.JSON, Format.KAFKA)),
    (", value_format='kafka'", {"ksql.persistence.default.format.key": "JSON"}, (Format.JSON, Format.KAFKA)),
    # what the WITH clause names wins over the defaults (FORMAT sets both)
    (", key_format='json', value_format='delimited'",
     {"ksql.persistence.default.format.key": "KAFKA", "ksql.persistence.default.format.value": "JSON"},
     (Format.JSON, Format.DELIMITED)),
    (", format='json'", {"ksql.persistence.default.format.key": "KAFKA", "ksql.persistence.default.format.value": "KAFKA"},
     (Format.JSON, Format.JSON)),
])
def test_a_create_takes_the_default_formats_its_with_clause_leaves_out(with_clause: str, properties: dict[str, str],
                                                                       formats: tuple[Format, Format]):
    sql = f"CREATE STREAM s (k INT KEY, a INT) WITH (kafka_topic='raw'{with_clause});"
    assert _created_formats(sql, properties) == formats


def test_a_missing_format_without_a_default_is_refused_with_ksqldbs_text():
    ms = fresh()
    (s,) = parse("CREATE STREAM s (a INT) WITH (kafka_topic='raw');")
    with pytest.raises(StatementError) as info:
        ms.validate(s, {"ksql.persistence.default.format.key": ""}, TOPICS)
    assert info.value.message == ("Statement is missing the 'VALUE_FORMAT' property from the WITH clause. Either provide "
                                  "one or set a default via the 'ksql.persistence.default.format.value' config.")
    (s,) = parse("CREATE STREAM s (a INT) WITH (kafka_topic='raw', value_format='json');")
    with pytest.raises(StatementError) as info:
        ms.validate(s, {"ksql.persistence.default.format.key": ""}, TOPICS)
    assert info.value.message == ("Statement is missing the 'KEY_FORMAT' property from the WITH clause. Either provide "
                                  "one or set a default via the 'ksql.persistence.default.format.key' config.")
    (s,) = parse("CREATE STREAM s (a INT) WITH (kafka_topic='raw');")
    with pytest.raises(StatementError, match="Unknown format: XML"):
        ms.validate(s, {"ksql.persistence.default.format.value": "xml"}, TOPICS)


def test_the_server_config_sets_a_default_format_the_request_does_not():
    """A node's config (``ksql.persistence.default.format.*``) counts for a statement whose
    request does not set it; the request's (SET) wins; other server settings stay out."""
    server = {"ksql.persistence.default.format.value": "JSON", "ksql.persistence.default.format.key": "JSON",
              "ksql.streams.num.stream.threads": "4"}
    merged = with_server_defaults({"ksql.persistence.default.format.key": "KAFKA"}, server)
    assert merged == {"ksql.persistence.default.format.value": "JSON", "ksql.persistence.default.format.key": "KAFKA"}
    assert _created_formats("CREATE STREAM s (k INT KEY, a INT) WITH (kafka_topic='raw');", merged) == \
        (Format.KAFKA, Format.JSON)


@pytest.mark.parametrize(("sql", "properties", "topic"), [
    # sink-topic-naming.json: the default topic of a C*AS is its name, upper case, after the prefix
    ("CREATE STREAM OutPut AS SELECT * FROM orders;", {}, "OUTPUT"),
    ("CREATE STREAM OUTPUT AS SELECT * FROM orders;", {"ksql.output.topic.name.prefix": "some-prefix-"},
     "some-prefix-OUTPUT"),
    # a named topic takes no prefix
    ("CREATE STREAM OUTPUT WITH (KAFKA_TOPIC='Fred') AS SELECT * FROM orders;",
     {"ksql.output.topic.name.prefix": "some-prefix-"}, "Fred"),
])
def test_the_output_topic_prefix_goes_before_a_default_sink_topic_only(sql: str, properties: dict[str, str],
                                                                       topic: str):
    ms = fresh()
    (s,) = parse(sql)
    ms.apply(ms.validate(s, properties, TOPICS), 100)
    sink = ms.source("OUTPUT")
    assert sink is not None
    assert sink.topic == topic


def test_the_server_config_sets_the_output_topic_prefix_the_request_does_not():
    assert with_server_defaults({}, {"ksql.output.topic.name.prefix": "p-"}) == {"ksql.output.topic.name.prefix": "p-"}
