"""ksqlDB's processing log: records a query could not read, in the Python logger ``processing``
and, with ``ksql.logging.processing.topic.auto.create=true``, in a Kafka topic as well.

ksqlDB's settings, same names and defaults:

- ``ksql.logging.processing.topic.auto.create`` (false): create the topic at start and write
  every entry to it;
- ``ksql.logging.processing.topic.name`` (``<ksql.service.id>ksql_processing_log``),
  ``ksql.logging.processing.topic.partitions`` (1), ``ksql.logging.processing.topic.replication.factor`` (1);
- ``ksql.logging.processing.stream.auto.create`` (false): create the stream
  ``ksql.logging.processing.stream.name`` (``KSQL_PROCESSING_LOG``) over the topic at start, so
  ``SELECT * FROM KSQL_PROCESSING_LOG EMIT CHANGES`` shows the entries;
- ``ksql.logging.processing.rows.include`` (false): put the bad record itself (base64) in the entry.

An entry is ksqlDB's JSON (``ProcessingLogMessageSchema`` inside the log4j record):
``{"level": "ERROR", "logger": ..., "time": <ms>, "message": {"type": 0, "deserializationError":
{"target": "key"|"value", "errorMessage": ..., "recordB64": ..., "cause": [...], "topic": ...},
"recordProcessingError": null, "productionError": null, "serializationError": null,
"kafkaStreamsThreadError": null}}``.

The entries are diagnostics, written by a plain (idempotent, not transactional) producer in the
process that met the record (a Spark executor's Python worker): they are not part of a query's
exactly-once output, and a query that replays a batch after a failure logs its bad records
again. ksqlDB's processing log is not transactional either.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

PREFIX = "ksql.logging.processing."
TOPIC_AUTO_CREATE = PREFIX + "topic.auto.create"
TOPIC_NAME = PREFIX + "topic.name"
TOPIC_PARTITIONS = PREFIX + "topic.partitions"
TOPIC_REPLICATION_FACTOR = PREFIX + "topic.replication.factor"
STREAM_AUTO_CREATE = PREFIX + "stream.auto.create"
STREAM_NAME = PREFIX + "stream.name"
ROWS_INCLUDE = PREFIX + "rows.include"
DEFAULT_STREAM_NAME = "KSQL_PROCESSING_LOG"
TOPIC_SUFFIX = "ksql_processing_log"
DESERIALIZATION_ERROR = 0        # ProcessingLogMessageSchema.MessageType.DESERIALIZATION_ERROR
SERIALIZATION_ERROR = 3          # ProcessingLogMessageSchema.MessageType.SERIALIZATION_ERROR
_FLUSH_TIMEOUT_S = 10.0

log = logging.getLogger("processing")


def _flag(props: Mapping[str, Any], name: str) -> bool:
    return str(props.get(name, "false")).strip().lower() == "true"


@dataclass(frozen=True)
class ProcessingLogSettings:
    """Where the processing log goes (picklable: Spark ships it to the Python workers)."""

    topic: str | None                       # None: the logger only
    bootstrap_servers: str = ""
    client_properties: Mapping[str, str] = field(default_factory=dict)
    include_rows: bool = False
    partitions: int = 1
    replication_factor: int = 1
    stream_name: str = DEFAULT_STREAM_NAME
    create_stream: bool = False

    @classmethod
    def from_properties(cls, props: Mapping[str, Any], service_id: str, bootstrap_servers: str,
                        client_properties: Mapping[str, str]) -> ProcessingLogSettings:
        """The settings of ksqlDB's ``ksql.logging.processing.*`` properties."""
        enabled = _flag(props, TOPIC_AUTO_CREATE)
        topic = str(props.get(TOPIC_NAME) or f"{service_id}{TOPIC_SUFFIX}")
        return cls(topic=topic if enabled else None, bootstrap_servers=bootstrap_servers,
                   client_properties=dict(client_properties), include_rows=_flag(props, ROWS_INCLUDE),
                   partitions=int(props.get(TOPIC_PARTITIONS, 1)),
                   replication_factor=int(props.get(TOPIC_REPLICATION_FACTOR, 1)),
                   stream_name=str(props.get(STREAM_NAME) or DEFAULT_STREAM_NAME),
                   create_stream=enabled and _flag(props, STREAM_AUTO_CREATE))


class _Holder:
    settings = ProcessingLogSettings(topic=None)


def use_processing_log(settings: ProcessingLogSettings) -> None:
    """Make ``settings`` the processing log of queries compiled from now on (the server, at start)."""
    _Holder.settings = settings


def current_processing_log() -> ProcessingLogSettings:
    """The settings ``use_processing_log`` set (the logger only, by default)."""
    return _Holder.settings


def _entry(logger: str, time_ms: int, message_type: int, field_name: str, error: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"type": message_type, "deserializationError": None, "recordProcessingError": None,
                               "productionError": None, "serializationError": None, "kafkaStreamsThreadError": None}
    message[field_name] = error
    return {"level": "ERROR", "logger": logger, "time": time_ms, "message": message}


def deserialization_entry(*, logger: str, topic: str, target: str, error: str, record: bytes | None,
                          include_rows: bool, time_ms: int) -> dict[str, Any]:
    """ksqlDB's processing-log record of a record that did not deserialize (``DeserializationError``)."""
    record_b64 = base64.b64encode(record).decode() if include_rows and record is not None else None
    return _entry(logger, time_ms, DESERIALIZATION_ERROR, "deserializationError",
                  {"target": target, "errorMessage": error, "recordB64": record_b64, "cause": [], "topic": topic})


def serialization_entry(*, logger: str, topic: str, target: str, error: str, record: str | None,
                        include_rows: bool, time_ms: int) -> dict[str, Any]:
    """ksqlDB's processing-log record of a row that did not serialize (``SerializationError``:
    the row as text, with ``rows.include``)."""
    return _entry(logger, time_ms, SERIALIZATION_ERROR, "serializationError",
                  {"target": target, "errorMessage": error, "record": record if include_rows else None,
                   "cause": [], "topic": topic})


def stream_statement(settings: ProcessingLogSettings) -> str:
    """ksqlDB's CREATE STREAM over the processing-log topic (its columns are ksqlDB's)."""
    cause = "CAUSE ARRAY<STRING>"
    message = (f"STRUCT<TYPE INT, DESERIALIZATIONERROR STRUCT<TARGET STRING, ERRORMESSAGE STRING, RECORDB64 STRING, "
               f"{cause}, `topic` STRING>, RECORDPROCESSINGERROR STRUCT<ERRORMESSAGE STRING, RECORD STRING, {cause}>, "
               f"PRODUCTIONERROR STRUCT<ERRORMESSAGE STRING>, SERIALIZATIONERROR STRUCT<TARGET STRING, "
               f"ERRORMESSAGE STRING, RECORD STRING, {cause}, `topic` STRING>, KAFKASTREAMSTHREADERROR STRUCT<"
               f"ERRORMESSAGE STRING, THREADNAME STRING, {cause}>>")
    return (f"CREATE STREAM IF NOT EXISTS {settings.stream_name} (LOGGER STRING, LEVEL STRING, TIME BIGINT, "
            f"MESSAGE {message}) WITH (KAFKA_TOPIC='{settings.topic}', VALUE_FORMAT='JSON', KEY_FORMAT='KAFKA');")


class _Writers:
    """One producer per settings per process (Spark reuses its Python workers)."""

    lock = threading.Lock()
    producers: ClassVar[dict[tuple[str, str, tuple[tuple[str, str], ...]], Any]] = {}

    @classmethod
    def producer(cls, settings: ProcessingLogSettings) -> Any:
        from oncestream.client import Producer

        key = (settings.topic or "", settings.bootstrap_servers, tuple(sorted(settings.client_properties.items())))
        with cls.lock:
            producer = cls.producers.get(key)
            if producer is None:
                conf = {**settings.client_properties, "bootstrap.servers": settings.bootstrap_servers,
                        "enable.idempotence": True, "acks": "all"}
                producer = cls.producers[key] = Producer(conf)
            return producer


def log_deserialization_error(settings: ProcessingLogSettings, *, logger: str, topic: str, target: str,
                              error: str, record: bytes | None) -> None:
    """Log a record that did not deserialize: to the logger ``processing``, and to the
    processing-log topic when there is one (a failure to write there is logged, never raised:
    the query goes on)."""
    log.warning("deserialization error (%s of topic %s): %s", target, topic, error)
    if settings.topic is not None:
        entry = deserialization_entry(logger=logger, topic=topic, target=target, error=error, record=record,
                                      include_rows=settings.include_rows, time_ms=int(time.time() * 1000))
        _write(settings, settings.topic, entry)


def log_serialization_error(settings: ProcessingLogSettings, *, logger: str, topic: str, target: str,
                            error: str, record: str | None) -> None:
    """Log a row that did not serialize, as ``log_deserialization_error`` does (the caller then
    fails the query, as ksqlDB's does: Kafka Streams' default for a serializer's exception)."""
    log.warning("serialization error (%s of topic %s): %s", target, topic, error)
    if settings.topic is not None:
        entry = serialization_entry(logger=logger, topic=topic, target=target, error=error, record=record,
                                    include_rows=settings.include_rows, time_ms=int(time.time() * 1000))
        _write(settings, settings.topic, entry)


def _write(settings: ProcessingLogSettings, topic: str, entry: Mapping[str, Any]) -> None:
    try:
        producer = _Writers.producer(settings)
        producer.produce(topic, json.dumps(entry).encode())
        if producer.flush(_FLUSH_TIMEOUT_S) > 0:
            log.warning("the processing-log entry was not delivered to %s within %.0f s", topic, _FLUSH_TIMEOUT_S)
    except Exception as e:  # noqa: BLE001 - diagnostics must not stop the query
        log.warning("cannot write to the processing-log topic %s: %s", topic, e)


def ensure_topic(settings: ProcessingLogSettings, timeout_s: float = 30.0) -> None:
    """Create the processing-log topic unless it exists (ksqlDB's ``topic.auto.create``; an
    existing topic is kept as it is)."""
    from kio.schema.errors import ErrorCode

    from oncestream.client import Admin, NewTopic

    if settings.topic is None:
        return
    admin = Admin({**settings.client_properties, "bootstrap.servers": settings.bootstrap_servers})
    try:
        result = admin.create_topics([NewTopic(settings.topic, settings.partitions, settings.replication_factor)],
                                     timeout=timeout_s)
    finally:
        admin.close()
    error = result.get(settings.topic)
    if error is not None and error.code() != ErrorCode.topic_already_exists:
        log.warning("cannot create the processing-log topic %s: %s", settings.topic, error)
