"""``KEY_SCHEMA_FULL_NAME``/``VALUE_SCHEMA_FULL_NAME`` with PROTOBUF, as ksqlDB (protobuf.json's
"specify a protobuf schema ..." cases): inference reads the message the name picks in a file of
several (several without a name are refused), a C*AS sink's message is named so (its own name,
else the PROTOBUF source's, which the format inherits), and records are written with that
message's index."""

from __future__ import annotations

import re

import pytest

from oncestream.sql.engine.compile.plan import key_layout_of
from oncestream.sql.engine.serde import layout_for, layout_of
from oncestream.sql.engine.serde_protobuf import decode_indexes
from oncestream.sql.engine.serde_registry import unframe
from oncestream.sql.errors import StatementError
from oncestream.sql.language import types as t
from oncestream.sql.language.catalog import Column, Format, Namespace, SourceInfo
from oncestream.sql.language.parser import parse
from oncestream.sql.language.sql_ast import SourceKind
from oncestream.sql.server.metastore import Metastore
from tests.support.memory_schema_registry import MemoryRegistry

KEYS = 'syntax = "proto3"; message ProtobufKey1 {uint32 k1 = 1;} message ProtobufKey2 {string k1 = 1;}'
VALUES = 'syntax = "proto3"; message ProtobufValue1 {float c1 = 1; uint32 c2 = 2;} message ProtobufValue2 {uint32 c1 = 1;}'


def _metastore(registry: MemoryRegistry, sql: str) -> Metastore:
    metastore = Metastore()
    for offset, stmt in enumerate(parse(sql)):
        metastore.apply(metastore.validate(stmt, {}, {"input": 1, "OUTPUT": 1}, registry), offset)
    return metastore


def _registry() -> MemoryRegistry:
    registry = MemoryRegistry.empty()
    registry.register("input-key", "PROTOBUF", KEYS)
    registry.register("input-value", "PROTOBUF", VALUES)
    return registry


def test_the_full_name_picks_the_message_columns_are_inferred_from() -> None:
    metastore = _metastore(_registry(), "CREATE STREAM INPUT WITH (kafka_topic='input', format='PROTOBUF', "
                                        "KEY_SCHEMA_FULL_NAME='ProtobufKey2', VALUE_SCHEMA_FULL_NAME='ProtobufValue2');")
    source = metastore.source("INPUT")
    assert source is not None
    assert [(c.name, c.type, c.is_key) for c in source.columns] == [("K1", t.STRING, True), ("C1", t.BIGINT, False)]
    assert (source.key_schema_name, source.value_schema_name) == ("ProtobufKey2", "ProtobufValue2")


def test_several_messages_without_a_name_or_an_unknown_name_are_refused() -> None:
    with pytest.raises(StatementError, match=re.escape("Key schema has multiple schema definitions. \n\n- ProtobufKey1\n"
                                                       "- ProtobufKey2\n\nPlease specify a schema full name in the "
                                                       "WITH clause using KEY_SCHEMA_FULL_NAME")):
        _metastore(_registry(), "CREATE STREAM INPUT WITH (kafka_topic='input', format='PROTOBUF');")
    with pytest.raises(StatementError, match="Schema does not contain the message Nope"):
        _metastore(_registry(), "CREATE STREAM INPUT WITH (kafka_topic='input', format='PROTOBUF', "
                                "KEY_SCHEMA_FULL_NAME='ProtobufKey2', VALUE_SCHEMA_FULL_NAME='Nope');")


def test_a_sink_names_its_message_or_inherits_the_sources_name() -> None:
    registry = _registry()
    metastore = _metastore(registry, "CREATE STREAM INPUT WITH (kafka_topic='input', format='PROTOBUF', "
                                     "KEY_SCHEMA_FULL_NAME='ProtobufKey2', VALUE_SCHEMA_FULL_NAME='ProtobufValue2');"
                                     "CREATE STREAM OUTPUT WITH (VALUE_SCHEMA_FULL_NAME='acme.Out') AS SELECT * FROM INPUT;")
    sink = metastore.source("OUTPUT")
    assert sink is not None
    assert (sink.key_schema_name, sink.value_schema_name) == ("ProtobufKey2", "acme.Out")
    layout = layout_for(sink.columns, sink, registry=registry)
    assert layout.key_codec is not None
    assert layout.value_codec is not None
    layout.key_codec.register_sink_schema()
    layout.value_codec.register_sink_schema()
    key_schema = registry.latest("OUTPUT-key")
    value_schema = registry.latest("OUTPUT-value")
    assert key_schema is not None
    assert value_schema is not None
    assert "message ProtobufKey2 {" in key_schema.schema
    assert "package acme;" in value_schema.schema
    assert "message Out {" in value_schema.schema
    data = layout.encode_value({"C1": 7})
    assert data is not None
    assert layout.decode_value(data) == {"C1": 7}
    # a JSON sink does not inherit a PROTOBUF name
    other = _metastore(_registry(), "CREATE STREAM INPUT WITH (kafka_topic='input', format='PROTOBUF', "
                                    "KEY_SCHEMA_FULL_NAME='ProtobufKey2', VALUE_SCHEMA_FULL_NAME='ProtobufValue2');"
                                    "CREATE STREAM OUTPUT WITH (VALUE_FORMAT='JSON') AS SELECT * FROM INPUT;").source("OUTPUT")
    assert other is not None
    assert (other.key_schema_name, other.value_schema_name) == ("ProtobufKey2", None)


def test_records_of_a_named_message_carry_its_index() -> None:
    registry = _registry()
    schema_id = registry.register("input-value", "PROTOBUF", VALUES)
    source = _metastore(registry, "CREATE STREAM INPUT WITH (kafka_topic='input', format='PROTOBUF', "
                                  f"KEY_SCHEMA_FULL_NAME='ProtobufKey2', VALUE_SCHEMA_ID={schema_id}, "
                                  "VALUE_SCHEMA_FULL_NAME='ProtobufValue2');").source("INPUT")
    assert source is not None
    layout = layout_of(source, registry)
    data = layout.encode_value({"c1": 5})
    assert data is not None
    got_id, body = unframe(data)
    assert got_id == schema_id
    assert decode_indexes(body)[0] == (1,)
    assert layout.decode_value(data) == {"c1": 5}


def test_a_registry_key_is_written_again_with_the_sinks_schema() -> None:
    """A query whose output key is its source's key passes the key's bytes through only when they
    would be the same bytes: in a registry format the frame names the source subject's schema,
    so the sink's key is encoded again with its own (ksqlDB's sink serializer): protobuf.json's
    "specify a protobuf schema from multiple protobuf schema definitions" key ``k1`` -> ``K1``."""
    registry = _registry()
    keys = (Column("K1", t.STRING, Namespace.KEY), Column("C1", t.BIGINT))

    def layout(fmt: Format, topic: str) -> tuple[object, ...]:
        sink = SourceInfo(name=topic, kind=SourceKind.STREAM, topic=topic, key_format=fmt, value_format=Format.JSON,
                          columns=keys, statement="")
        return key_layout_of(layout_for(keys, sink, registry=registry))

    assert layout(Format.PROTOBUF, "input") != layout(Format.PROTOBUF, "OUTPUT")
    assert layout(Format.AVRO, "input") != layout(Format.AVRO, "OUTPUT")
    assert layout(Format.JSON, "input") == layout(Format.JSON, "OUTPUT")
    assert layout(Format.PROTOBUF_NOSR, "input") == layout(Format.PROTOBUF_NOSR, "OUTPUT")
