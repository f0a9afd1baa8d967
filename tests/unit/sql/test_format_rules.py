"""What the registry formats refuse (``oncestream.sql.language.format_rules`` through the
metastore's validation), each with the message of ksqlDB's QTT cases (avro.json, protobuf.json,
json_sr.json): MAP keys other than STRING, Avro-illegal names, ``*_SCHEMA_FULL_NAME`` on a format
without it or blank, and a MAP-typed key of a C*AS named as its sink names it."""

from __future__ import annotations

import json

import pytest

from oncestream.sql.errors import StatementError
from oncestream.sql.language import types as t
from oncestream.sql.language.catalog import Column
from oncestream.sql.language.format_rules import check_avro_names
from oncestream.sql.language.parser import parse
from oncestream.sql.language.schema_mapping import avro_schema_of
from oncestream.sql.server.metastore import Metastore
from tests.support.memory_schema_registry import MemoryRegistry

TOPICS = {"input_topic": 1}


def _validate(sql: str, registry: MemoryRegistry | None = None) -> None:
    metastore = Metastore()
    registry = registry or MemoryRegistry.empty()
    for offset, stmt in enumerate(parse(sql)):
        metastore.apply(metastore.validate(stmt, {}, TOPICS, registry), offset)


@pytest.mark.parametrize(("fmt", "message"), [
    ("AVRO", "Avro only supports MAPs with STRING keys"),
    ("PROTOBUF", "PROTOBUF format only supports MAP types with STRING keys. See https://github.com/confluentinc/ksql/issues/6177."),
    ("PROTOBUF_NOSR", "PROTOBUF format only supports MAP types with STRING keys"),
    ("JSON_SR", "JSON only supports MAP types with STRING keys"),
])
def test_map_keys_other_than_string_are_refused_in_create_and_create_as(fmt: str, message: str) -> None:
    with pytest.raises(StatementError, match=message.replace(".", r"\.")):
        _validate(f"CREATE STREAM INPUT (foo MAP<INT, DOUBLE>) WITH (kafka_topic='input_topic', value_format='{fmt}');")
    with pytest.raises(StatementError, match=message.replace(".", r"\.")):
        _validate(f"CREATE STREAM INPUT (k INT, v DOUBLE) WITH (kafka_topic='input_topic', value_format='{fmt}');"
                  "CREATE STREAM OUTPUT AS SELECT MAP(k:=v) FROM INPUT;")
    # nested too, and STRING keys are fine
    with pytest.raises(StatementError, match="MAP"):
        _validate(f"CREATE STREAM INPUT (s STRUCT<m MAP<BIGINT, INT>>) WITH (kafka_topic='input_topic', value_format='{fmt}');")
    _validate(f"CREATE STREAM INPUT (m MAP<STRING, INT>) WITH (kafka_topic='input_topic', value_format='{fmt}');")


def test_avro_illegal_names_are_refused_when_the_schema_is_registered() -> None:
    message = "Schema is not compatible with Avro: Illegal initial character: 1AvroDoesNotLikeFieldsThatStartWithNumbers"
    with pytest.raises(StatementError, match=message):
        _validate("CREATE STREAM INPUT (`1AvroDoesNotLikeFieldsThatStartWithNumbers` DOUBLE) "
                  "WITH (kafka_topic='input_topic', value_format='AVRO');")
    with pytest.raises(StatementError, match=message):
        _validate("CREATE STREAM INPUT (v DOUBLE) WITH (kafka_topic='input_topic', value_format='AVRO');"
                  "CREATE STREAM OUTPUT AS SELECT v AS `1AvroDoesNotLikeFieldsThatStartWithNumbers` FROM INPUT;")
    # a subject with a schema already: ksqlDB registers nothing for a CREATE, so checks nothing
    registry = MemoryRegistry.empty()
    registry.register("input_topic-value", "AVRO", '{"type": "record", "name": "R", "fields": []}')
    _validate("CREATE STREAM INPUT (`1a` DOUBLE) WITH (kafka_topic='input_topic', value_format='AVRO');", registry)
    # JSON_SR has no such rule
    _validate("CREATE STREAM INPUT (`1a` DOUBLE) WITH (kafka_topic='input_topic', value_format='JSON_SR');")


def test_avro_name_rules_follow_avros_validate_name() -> None:
    with pytest.raises(StatementError, match="Illegal character in: a-b"):
        check_avro_names((Column("a-b", t.INTEGER),), key=False)
    with pytest.raises(StatementError, match="Illegal initial character: 2x"):
        check_avro_names((Column("S", t.struct_of(("2x", t.INTEGER))),), key=False)
    check_avro_names((Column("_ok9", t.INTEGER), Column("é", t.STRING)), key=False)
    check_avro_names((Column("1k", t.STRING),), key=True)   # a single key column is its bare type: no name


def test_full_schema_name_rules() -> None:
    with pytest.raises(StatementError, match=r"fullSchemaName cannot be empty\. Format configuration: \{fullSchemaName=\}"):
        _validate("CREATE STREAM INPUT (K STRING KEY, foo STRING) WITH (kafka_topic='input_topic', value_format='AVRO', "
                  "VALUE_AVRO_SCHEMA_FULL_NAME=' ');")
    with pytest.raises(StatementError, match=r"JSON does not support the following configs: \[fullSchemaName\]"):
        _validate("CREATE STREAM INPUT (K STRING KEY, foo STRING) WITH (kafka_topic='input_topic', value_format='JSON', "
                  "VALUE_AVRO_SCHEMA_FULL_NAME='com.custom.schema');")
    with pytest.raises(StatementError, match=r"KAFKA does not support the following configs: \[fullSchemaName\]"):
        _validate("CREATE STREAM INPUT (K STRING KEY, foo STRING) WITH (kafka_topic='input_topic', value_format='JSON', "
                  "KEY_SCHEMA_FULL_NAME='Key');")
    _validate("CREATE STREAM INPUT (K STRING KEY, foo STRING) WITH (kafka_topic='input_topic', format='PROTOBUF', "
              "KEY_SCHEMA_FULL_NAME='Key', VALUE_SCHEMA_FULL_NAME='Value');")


@pytest.mark.parametrize(("partition_by", "shown"), [
    ("MAP(k:=v)", "`KSQL_COL_0`. Column type: MAP<STRING, STRING>"),
    ("STRUCT(f := MAP(k:=v))", "`KSQL_COL_0`. Column type: STRUCT<`F` MAP<STRING, STRING>>"),
])
def test_a_map_typed_key_of_a_create_as_is_named_as_the_sink_names_it(partition_by: str, shown: str) -> None:
    with pytest.raises(StatementError, match=f"Key column name: {shown}".replace("(", r"\(").replace(")", r"\)")):
        _validate("CREATE STREAM INPUT (k STRING KEY, v STRING) WITH (kafka_topic='input_topic', format='JSON');"
                  f"CREATE STREAM OUTPUT AS SELECT * FROM INPUT PARTITION BY {partition_by};")


def test_an_avro_full_schema_name_names_the_record_a_sink_registers() -> None:
    """``VALUE_AVRO_SCHEMA_FULL_NAME``: the record's namespace and name (nested records
    ``<name>_<FIELD>`` in its namespace), and Avro's name rules apply to it too."""
    schema = json.loads(avro_schema_of([("A", t.struct_of(("X", t.INTEGER)))], unwrapped=False, full_name="com.custom.schema"))
    assert (schema["namespace"], schema["name"]) == ("com.custom", "schema")
    nested = schema["fields"][0]["type"][1]
    assert (nested["namespace"], nested["name"]) == ("com.custom", "schema_A")
    with pytest.raises(StatementError, match="Illegal initial character: 9bad"):
        check_avro_names((Column("A", t.INTEGER),), key=False, full_name="com.9bad.schema")
