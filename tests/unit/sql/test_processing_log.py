"""ksqlDB's processing log (``oncestream.sql.engine.processing_log``): its settings under ksqlDB's
names and defaults, the CREATE STREAM the server runs at start (validated by the metastore as a
statement from a user would be), and an entry read back through that stream's columns by the
JSON format. The topic side through a broker and a push query is
tests/spark/sql/test_golden_protobuf.py."""

from __future__ import annotations

import base64
import json
import logging

import pytest

from oncestream.sql.engine import processing_log
from oncestream.sql.engine.processing_log import (
    ProcessingLogSettings,
    deserialization_entry,
    serialization_entry,
    stream_statement,
)
from oncestream.sql.engine.serde import layout_of
from oncestream.sql.language.catalog import SourceInfo
from oncestream.sql.language.parser import parse
from oncestream.sql.server.metastore import Metastore


def test_settings_are_ksqldbs_names_and_defaults():
    off = ProcessingLogSettings.from_properties({}, "default_", "b:9092", {})
    assert off.topic is None
    assert not off.create_stream
    assert not off.include_rows
    on = ProcessingLogSettings.from_properties({"ksql.logging.processing.topic.auto.create": "true",
                                                "ksql.logging.processing.stream.auto.create": "true"},
                                               "default_", "b:9092", {"security.protocol": "SSL"})
    assert (on.topic, on.stream_name, on.create_stream, on.partitions) == (
        "default_ksql_processing_log", "KSQL_PROCESSING_LOG", True, 1)
    named = ProcessingLogSettings.from_properties({"ksql.logging.processing.topic.auto.create": "true",
                                                   "ksql.logging.processing.topic.name": "errors",
                                                   "ksql.logging.processing.stream.name": "ERRS"}, "x", "b", {})
    assert (named.topic, named.stream_name, named.create_stream) == ("errors", "ERRS", False)


def _log_stream() -> SourceInfo:
    """The KSQL_PROCESSING_LOG stream the server creates, validated by the metastore as a user's
    statement would be."""
    settings = ProcessingLogSettings(topic="default_ksql_processing_log", include_rows=True)
    metastore = Metastore()
    (stmt,) = parse(stream_statement(settings))
    metastore.apply(metastore.validate(stmt, {}, {"default_ksql_processing_log": 1}, None), 0)
    source = metastore.source("KSQL_PROCESSING_LOG")
    assert source is not None
    return source


def test_the_stream_reads_an_entry_in_ksqldbs_shape():
    source = _log_stream()
    assert [c.name for c in source.columns] == ["LOGGER", "LEVEL", "TIME", "MESSAGE"]
    entry = deserialization_entry(logger="processing.t.value.deserializer", topic="t", target="value",
                                  error="Schema 9 not found", record=b"\x00bad", include_rows=True, time_ms=5)
    # ksqlDB's record: camelCase inside "message", read case-insensitively into the columns
    assert set(entry["message"]) == {"type", "deserializationError", "recordProcessingError", "productionError",
                                     "serializationError", "kafkaStreamsThreadError"}
    row = layout_of(source).decode_value(json.dumps(entry).encode())
    assert row is not None
    assert (row["LOGGER"], row["LEVEL"], row["TIME"]) == ("processing.t.value.deserializer", "ERROR", 5)
    error = row["MESSAGE"]["DESERIALIZATIONERROR"]
    assert (error["TARGET"], error["ERRORMESSAGE"], error["topic"]) == ("value", "Schema 9 not found", "t")
    assert base64.b64decode(error["RECORDB64"]) == b"\x00bad"
    assert row["MESSAGE"]["TYPE"] == 0
    assert row["MESSAGE"]["RECORDPROCESSINGERROR"] is None
    without_rows = deserialization_entry(logger="l", topic="t", target="key", error="e", record=b"x",
                                         include_rows=False, time_ms=1)
    assert without_rows["message"]["deserializationError"]["recordB64"] is None


def test_without_a_topic_only_the_logger_hears(caplog: pytest.LogCaptureFixture):
    with caplog.at_level(logging.WARNING, logger="processing"):
        processing_log.log_deserialization_error(ProcessingLogSettings(topic=None), logger="l", topic="t",
                                                 target="value", error="bad bytes", record=b"x")
    assert "bad bytes" in caplog.text


def test_a_serialization_error_entry_is_ksqldbs_type_3_and_reads_through_the_stream():
    source = _log_stream()
    entry = serialization_entry(logger="processing.out.value.serializer", topic="out", target="value",
                                error="incompatible schema", record="{'ID': 1}", include_rows=True, time_ms=7)
    assert entry["message"]["type"] == 3
    assert entry["message"]["deserializationError"] is None
    row = layout_of(source).decode_value(json.dumps(entry).encode())
    assert row is not None
    error = row["MESSAGE"]["SERIALIZATIONERROR"]
    assert (error["TARGET"], error["ERRORMESSAGE"], error["RECORD"], error["topic"]) == (
        "value", "incompatible schema", "{'ID': 1}", "out")
    hidden = serialization_entry(logger="l", topic="t", target="key", error="e", record="r", include_rows=False,
                                 time_ms=1)
    assert hidden["message"]["serializationError"]["record"] is None


def test_a_serialization_error_reaches_the_logger(caplog: pytest.LogCaptureFixture):
    with caplog.at_level(logging.WARNING, logger="processing"):
        processing_log.log_serialization_error(ProcessingLogSettings(topic=None), logger="l", topic="t",
                                               target="key", error="cannot write", record="r")
    assert "serialization error (key of topic t): cannot write" in caplog.text
