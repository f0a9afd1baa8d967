"""Helpers of the SQL golden tests: topics, input records produced with confluent-kafka, sources
and queries built from SQL text, and the output topic read back read_committed with
confluent-kafka."""

from __future__ import annotations

import json
import math
import struct
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncestream.sql.engine.runtime import ERROR, QueryRuntime
from oncestream.sql.language import sql_ast
from oncestream.sql.language.catalog import Column, Format, Namespace, QueryInfo, SourceInfo
from oncestream.sql.language.sql_ast import SourceKind, WindowSpec
from oncestream.sql.language.types import SqlType
from tests.support.narrow import of_type

OUTPUT_TIMEOUT_S = 180.0
EARLIEST = {"auto.offset.reset": "earliest"}


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def create_topics(bootstrap: str, *names: str, partitions: int = 1, config: Mapping[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(n, partitions, 1, config=dict(config or {})) for n in names]
    for future in admin.create_topics(topics).values():
        future.result(30)


def produce(bootstrap: str, topic: str, records: Iterable[tuple[bytes | None, bytes | None, int]]) -> None:
    """(key, value, timestamp ms) records, acknowledged by all replicas before returning."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for key, value, ts in records:
        producer.produce(topic, value=value, key=key, timestamp=ts)
    assert producer.flush(30) == 0


def read_output(bootstrap: str, topic: str, count: int, timeout_s: float = OUTPUT_TIMEOUT_S,
                runtime: QueryRuntime | None = None, query_id: str | None = None) -> list[tuple[bytes | None, bytes | None]]:
    """Records of ``topic`` visible read_committed, once at least ``count`` are there (fails with
    the query's error if it stopped)."""
    return [(key, value) for key, value, _ts in read_timed_output(bootstrap, topic, count, timeout_s, runtime, query_id)]


def read_timed_output(bootstrap: str, topic: str, count: int, timeout_s: float = OUTPUT_TIMEOUT_S,
                      runtime: QueryRuntime | None = None,
                      query_id: str | None = None) -> list[tuple[bytes | None, bytes | None, int]]:
    """As ``read_output``, with each record's timestamp (ms)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("check"),
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    out: list[tuple[bytes | None, bytes | None, int]] = []
    try:
        meta = consumer.list_topics(topic, timeout=10)
        consumer.assign([TopicPartition(topic, p, 0) for p in sorted(meta.topics[topic].partitions)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                out.append((msg.key(), msg.value(), msg.timestamp()[1]))
                continue
            if len(out) >= count:
                return out
            if runtime is not None and query_id is not None:
                status = runtime.status(query_id)
                if status.state == ERROR:
                    raise AssertionError(f"query {query_id} failed: {status.error}")
        raise AssertionError(f"{topic}: {len(out)} of {count} records after {timeout_s} s: {out}")
    finally:
        consumer.close()


def per_bigint_key(records: Iterable[tuple[bytes | None, bytes | None]]) -> dict[int, list[Any]]:
    """JSON values (None: tombstone) per KAFKA BIGINT key, in topic order: what a compacted
    changelog's reader sees of each key."""
    out: dict[int, list[Any]] = {}
    for key, value in records:
        if key is None:
            raise AssertionError(f"a record without a key: {value!r}")
        out.setdefault(struct.unpack(">q", key)[0], []).append(None if value is None else json.loads(value))
    return out


def read_all(bootstrap: str, topic: str, count: int, timeout_s: float = 120.0) -> list[bytes]:
    """The values of ``topic`` (not transactional: read_uncommitted) once ``count`` are there."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("log"), "enable.auto.commit": False})
    out: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout_s
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                out.append(msg.value() or b"")
    finally:
        consumer.close()
    assert len(out) >= count, f"{topic}: {len(out)} of {count} records: {out}"
    return out


def col(name: str, t: SqlType, key: bool = False) -> Column:
    return Column(name, t, Namespace.KEY if key else Namespace.VALUE)


def source(name: str, topic: str, columns: Sequence[Column], *, kind: SourceKind = SourceKind.STREAM,
           key_format: Format = Format.KAFKA, value_format: Format = Format.JSON, window: WindowSpec | None = None,
           **kw: Any) -> SourceInfo:
    if not any(c.is_key for c in columns):
        key_format = Format.NONE
    return SourceInfo(name=name, kind=kind, topic=topic, key_format=key_format, value_format=value_format,
                      columns=tuple(columns), statement="", window=window, **kw)


@dataclass
class Analyzed:
    """What the compiler reads of the analyzer's result (until tests use ``analyze_query``)."""

    columns: tuple[Column, ...]
    result_kind: SourceKind
    sources: dict[str, SourceInfo]
    query: Any
    window: WindowSpec | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def start(runtime: QueryRuntime, query_id: str, analyzed: Any, sink: SourceInfo,
          properties: Mapping[str, Any] = EARLIEST) -> None:
    info = QueryInfo(query_id=query_id, statement="", sink=sink.name, sources=tuple(analyzed.sources),
                     query=analyzed.query, output_columns=tuple(analyzed.columns), command_offset=0)
    runtime.start_persistent(info, analyzed, sink, properties)
    status = runtime.status(query_id)
    assert status.state != ERROR, status.error


def analyze(sql: str, sources: Mapping[str, SourceInfo]) -> tuple[Any, Any]:
    """(statement, analyzed query) of one statement, parsed and analyzed by the SQL layer."""
    from oncestream.sql.language.analyzer import analyze_query
    from oncestream.sql.language.parser import parse

    (statement,) = parse(sql)
    if isinstance(statement, sql_ast.CreateAsSelect):
        return statement, analyze_query(statement.query, sources, sink=statement.name)
    if isinstance(statement, sql_ast.InsertInto):
        return statement, analyze_query(statement.query, sources, sink=statement.target)
    return statement, analyze_query(of_type(statement, sql_ast.QueryStatement, sql).query, sources)


def sink_of(analyzed: Any, name: str, topic: str, *, key_format: Format = Format.KAFKA,
            value_format: Format = Format.JSON, **kw: Any) -> SourceInfo:
    """The sink a CREATE ... AS SELECT creates: the analyzed query's columns, kind and window."""
    if not analyzed.key_columns:
        key_format = Format.NONE
    return SourceInfo(name=name, kind=analyzed.result_kind, topic=topic, key_format=key_format,
                      value_format=value_format, columns=tuple(analyzed.columns), statement="",
                      window=analyzed.window, **kw)


def ddl(sql: str) -> SourceInfo:
    """The source a ``CREATE STREAM|TABLE`` statement declares (parsed by the SQL layer; formats
    default as ksqlDB's: KEY_FORMAT KAFKA, VALUE_FORMAT from FORMAT or JSON)."""
    from oncestream.sql.language.parser import parse

    (parsed,) = parse(sql)
    statement = of_type(parsed, sql_ast.CreateSource, sql)
    props = {k.upper(): v for k, v in statement.properties.items()}
    fmt = props.get("FORMAT")
    columns = tuple(Column(c.name, c.type, Namespace.HEADERS, header_key=c.header_key) if c.headers
                    else Column(c.name, c.type, Namespace.KEY if c.key else Namespace.VALUE) for c in statement.columns)
    key_format = Format(str(props.get("KEY_FORMAT", fmt or "KAFKA")).upper())
    if not any(c.is_key for c in columns):
        key_format = Format.NONE
    return SourceInfo(name=statement.name, kind=statement.kind, topic=str(props["KAFKA_TOPIC"]),
                      key_format=key_format, value_format=Format(str(props.get("VALUE_FORMAT", fmt or "JSON")).upper()),
                      columns=columns, statement=sql, timestamp_column=props.get("TIMESTAMP"),
                      timestamp_format=props.get("TIMESTAMP_FORMAT"),
                      value_delimiter=str(props.get("VALUE_DELIMITER", ",")))


def registry_source(text: str, topic: str) -> SourceInfo:
    """The source a CREATE statement makes through the metastore, columns inferred from the SQL
    engine's registry (``use_registry``) when it declares none."""
    from oncestream.sql.engine.serde import current_registry
    from oncestream.sql.language.parser import parse
    from oncestream.sql.server.metastore import Metastore

    metastore = Metastore()
    (stmt,) = parse(text)
    command = metastore.validate(stmt, {}, {topic: 1}, current_registry())
    metastore.apply(command, 0)
    (created,) = metastore.sources()
    return created


def registered_message_class(client: Any, subject: str) -> Any:
    """The protobuf message class of a subject's latest schema (its first message), built from the
    descriptor the registry serves (``format=serialized``) with the well-known imports ksqlDB's
    schemas use."""
    import base64

    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    latest = client.get_latest_version(subject)
    assert latest.schema_id is not None
    serialized = client.get_schema(latest.schema_id, fmt="serialized").schema_str or ""
    proto = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(serialized))
    pool = descriptor_pool.DescriptorPool()
    for module in ("google.protobuf.timestamp_pb2", "google.protobuf.wrappers_pb2", "google.type.date_pb2",
                   "google.type.timeofday_pb2"):
        pool.AddSerializedFile(__import__(module, fromlist=["DESCRIPTOR"]).DESCRIPTOR.serialized_pb)
    pool.Add(proto)
    package = f"{proto.package}." if proto.package else ""
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(package + proto.message_type[0].name))


def spark_plain(value: Any) -> Any:
    """Spark's Rows as dicts, recursively (ksqlDB's structs compare field by field); NaN as "NaN"
    (NaN equals nothing, itself included)."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if hasattr(value, "asDict"):
        return {k: spark_plain(v) for k, v in value.asDict().items()}
    if isinstance(value, list):
        return [spark_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: spark_plain(v) for k, v in value.items()}
    return value
