"""A CREATE ... AS SELECT whose sink names its schema (``VALUE_SCHEMA_ID``/``KEY_SCHEMA_ID``)
writes with that schema, as ksqlDB's ``DefaultSchemaInjector``, ``SchemaRegisterInjector`` and
``ConnectSRSchemaDataTranslator`` do (avro.json's "VALUE_SCHEMA_ID with compound types" cases):
the query's columns must be the schema's first fields, the schema is registered under the
sink's subject (the same id), fields the columns lack or leave null take the schema's defaults."""

from __future__ import annotations

import io
import json

import fastavro
import pytest

from oncestream.sql.engine.serde import layout_for
from oncestream.sql.engine.serde_registry import unframe
from oncestream.sql.errors import KsqlError, StatementError
from oncestream.sql.language.catalog import SourceInfo
from oncestream.sql.language.parser import parse
from oncestream.sql.server.metastore import Metastore
from tests.support.memory_schema_registry import MemoryRegistry

SCHEMA = {"type": "record", "name": "Transaction", "namespace": "com.acme.namespace", "fields": [
    {"name": "eventID", "type": "string"},
    {"name": "transaction", "type": {"type": "record", "name": "transaction", "fields": [
        {"name": "num_shares", "type": "int", "default": 0}, {"name": "amount", "type": ["null", "int"]}]}},
    {"name": "optField", "type": "string", "default": "foo"}]}
DDL = "CREATE STREAM TXS (`id` STRING KEY, `tx` STRING) WITH (KAFKA_TOPIC='t', VALUE_FORMAT='JSON');"
SELECT = ("AS SELECT `id`, AS_VALUE(`id`) AS `eventID`, STRUCT(`num_shares` := CAST(EXTRACTJSONFIELD(`tx`, '$.n') AS INT), "
          "`amount` := CAST(EXTRACTJSONFIELD(`tx`, '$.a') AS INT)) AS `transaction` FROM TXS;")


def _sink(registry: MemoryRegistry, with_clause: str) -> SourceInfo:
    metastore = Metastore()
    for offset, stmt in enumerate(parse(DDL + f"CREATE STREAM SINK WITH (KAFKA_TOPIC='sink', {with_clause}) " + SELECT)):
        metastore.apply(metastore.validate(stmt, {}, {"t": 1, "sink": 1}, registry), offset)
    sink = metastore.source("SINK")
    assert sink is not None
    return sink


def test_the_sink_writes_with_the_named_schema_and_its_defaults() -> None:
    registry = MemoryRegistry.empty()
    schema_id = registry.register("sink-value", "AVRO", json.dumps(SCHEMA))
    sink = _sink(registry, f"VALUE_FORMAT='AVRO', VALUE_SCHEMA_ID={schema_id}")
    assert sink.value_schema_id == schema_id
    layout = layout_for(sink.columns, sink, registry=registry)
    assert layout.value_codec is not None
    layout.value_codec.register_sink_schema()
    assert registry.subjects["sink-value"] == [schema_id]   # no schema of the columns' own
    data = layout.encode_value({"eventID": "1", "transaction": {"num_shares": None, "amount": None}})
    assert data is not None
    got_id, body = unframe(data)
    assert got_id == schema_id
    written = fastavro.schemaless_reader(io.BytesIO(body), fastavro.parse_schema(SCHEMA), None)
    assert written == {"eventID": "1", "transaction": {"num_shares": 0, "amount": None}, "optField": "foo"}


def test_columns_that_are_not_the_schemas_first_fields_are_refused() -> None:
    registry = MemoryRegistry.empty()
    other = {"type": "record", "name": "R", "fields": [{"name": "eventID", "type": "long"}]}
    schema_id = registry.register("elsewhere", "AVRO", json.dumps(other))
    with pytest.raises(StatementError, match=r"The following value columns are changed, missing or reordered: "
                                             r"\[`eventID` STRING, `transaction` STRUCT"):
        _sink(registry, f"VALUE_FORMAT='AVRO', VALUE_SCHEMA_ID={schema_id}")
    with pytest.raises(StatementError, match=r"VALUE_FORMAT should support schema inference when VALUE_SCHEMA_ID is "
                                             r"provided\. Current format is JSON\."):
        _sink(registry, f"VALUE_FORMAT='JSON', VALUE_SCHEMA_ID={schema_id}")


def test_a_subject_answering_another_id_is_refused_when_the_query_starts() -> None:
    registry = MemoryRegistry.empty()
    schema_id = registry.register("elsewhere", "AVRO", json.dumps(SCHEMA))
    sink = _sink(registry, f"VALUE_FORMAT='AVRO', VALUE_SCHEMA_ID={schema_id}")
    layout = layout_for(sink.columns, sink, registry=registry)
    assert layout.value_codec is not None
    layout.value_codec.register_sink_schema()    # the in-memory registry answers the same id: accepted
    assert registry.subjects["sink-value"] == [schema_id]

    class OtherIds(MemoryRegistry):
        def register(self, subject: str, schema_type: str, schema: str,
                     references: list[dict[str, object]] | None = None) -> int:
            return super().register(subject, schema_type, schema, references) + 100

    shifted = OtherIds(registry.schemas, registry.subjects)
    layout = layout_for(sink.columns, sink, registry=shifted)
    assert layout.value_codec is not None
    with pytest.raises(KsqlError, match=f"Schema id registered is {schema_id + 100} which is different from provided "
                                        f"VALUE_SCHEMA_ID {schema_id}"):
        layout.value_codec.register_sink_schema()
