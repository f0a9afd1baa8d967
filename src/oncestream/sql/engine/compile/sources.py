"""Reading a source into a compiled query: our connector (read_committed) -> the source's formats
-> its columns plus ksqlDB's pseudo columns.

The frame of one source holds its key columns, value columns, ``ROWTIME`` (BIGINT ms: the record
timestamp, or the ``TIMESTAMP`` column), ``ROWPARTITION``, ``ROWOFFSET``, a windowed source's
``WINDOWSTART``/``WINDOWEND``, ``__TS`` (ROWTIME as a Spark timestamp, for windows and watermarks)
and ``__TOMBSTONE`` (the record's value is null), the source's header columns (HEADERS,
HEADER('k'): from the connector's ``headers``, read only when there are some) and ``__RAWKEY``
(the record key's bytes, written through unchanged when the output key is the source key in the
same layout). Records with a null
value are kept: a table's delete its key; a stream's go on as ksqlDB's null rows, which most
operators drop (``without_null_values``; compile/null_values.py has ksqlDB's rules). Records whose
ROWTIME is negative or null are dropped, as Kafka Streams drops them, and so are a table's records
whose key is null (Kafka Streams' table source skips them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from oncestream.sql.engine.compile import serde_columns
from oncestream.sql.engine.serde import layout_of
from oncestream.sql.errors import StatementError
from oncestream.sql.language.catalog import ROWOFFSET, ROWPARTITION, ROWTIME, SourceInfo
from oncestream.sql.language.sql_ast import SourceKind
from oncestream.sql.language.types import HEADERS_TYPE, BaseType

TS = "__TS"
TOMBSTONE = serde_columns.TOMBSTONE
RAW_KEY = "__RAWKEY"
# The record's own timestamp until ROWTIME is made (the connector's ``timestamp`` renamed: a value
# column named TIMESTAMP, legal in ksqlDB, would make it ambiguous in Spark's case-insensitive names)
RECORD_TIMESTAMP = "__RECORD_TIMESTAMP"

EARLIEST = "earliest"
LATEST = "latest"


@dataclass(frozen=True)
class ReadSettings:
    """How a query reads its sources: the cluster, the client properties (librdkafka names,
    security included) and where a new query starts (ksqlDB's default ``latest``)."""

    bootstrap_servers: str
    client_properties: Mapping[str, str] = field(default_factory=dict)
    starting_offsets: str = LATEST
    max_offsets_per_trigger: int | None = None


def kafka_options(bootstrap_servers: str, client_properties: Mapping[str, str]) -> dict[str, str]:
    """Connector options carrying the cluster and the client properties (``kafka.*``)."""
    options = {f"kafka.{k}": str(v) for k, v in client_properties.items()}
    options["kafka.bootstrap.servers"] = bootstrap_servers
    return options


def starting_offsets(properties: Mapping[str, object]) -> str:
    """``earliest`` or ``latest`` from ksqlDB's property names (``auto.offset.reset``,
    ``ksql.streams.auto.offset.reset``); ``latest`` when unset, as ksqlDB."""
    for name in ("ksql.streams.auto.offset.reset", "auto.offset.reset", "streams.auto.offset.reset"):
        value = properties.get(name)
        if value is not None:
            text = str(value).strip().lower()
            if text not in (EARLIEST, LATEST):
                raise StatementError(f"Invalid value {value} for configuration {name}: "
                                     "String must be one of: earliest, latest, none")
            return text
    return LATEST


def timestamp_ms(value: F.Column, base: BaseType, timestamp_format: str | None) -> F.Column:
    """A ``TIMESTAMP='col'`` column's value as epoch ms: BIGINT as is, TIMESTAMP, or STRING
    parsed with ``TIMESTAMP_FORMAT`` (ksqlDB's default ``yyyy-MM-dd'T'HH:mm:ss.SSS``)."""
    if base is BaseType.TIMESTAMP:
        return F.unix_millis(value)
    if base is BaseType.STRING:
        return F.unix_millis(F.to_timestamp(value, timestamp_format or "yyyy-MM-dd'T'HH:mm:ss.SSS"))
    return value.cast("bigint")


def _rowtime(source: SourceInfo) -> F.Column:
    column = source.timestamp_column
    if column is None:
        return F.unix_millis(F.col(RECORD_TIMESTAMP))
    spec = source.column(column)
    if spec is None:
        raise StatementError(f"The TIMESTAMP column set in the WITH clause does not exist in the schema: '{column}'")
    return timestamp_ms(F.col(f"`{column}`"), spec.type.base, source.timestamp_format)


def header_column(header_key: str | None) -> F.Column:
    """A header column from the connector's ``headers`` (array of struct key, value; null when the
    record has none): ``header_key`` None gives them all in order as ksqlDB's HEADERS type (an
    empty array for none); else the value of the last header with that key (Kafka's
    ``Headers.lastHeader``, as ksqlDB reads HEADER('k')), null when there is none."""
    raw = F.col("headers")
    if header_key is None:
        all_type = serde_columns.spark_type(HEADERS_TYPE)
        return F.coalesce(raw.cast(all_type), F.array().cast(all_type))
    matching = F.filter(raw, lambda h: h["key"] == F.lit(header_key))
    return F.try_element_at(matching, F.lit(-1))["value"]


def read_source(spark: SparkSession, source: SourceInfo, settings: ReadSettings, prefix: str | None = None) -> DataFrame:
    """The streaming frame of ``source`` (see the module docstring); with ``prefix`` every column
    is named ``<prefix>__<column>`` (the sides of a join)."""
    reader = spark.readStream.format("oncestream")
    for key, value in kafka_options(settings.bootstrap_servers, settings.client_properties).items():
        reader = reader.option(key, value)
    # the connector's headers column only when a header column reads it (it costs a list per record)
    with_headers = bool(source.header_columns)
    reader = (reader.option("subscribe", source.topic).option("startingOffsets", settings.starting_offsets)
              .option("includeHeaders", "true" if with_headers else "false"))
    if settings.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(settings.max_offsets_per_trigger))
    raw = reader.load()
    if source.kind is SourceKind.TABLE:
        # Kafka Streams' table source (KTableSource) skips a record whose key is null: a table
        # row has a key; ksqlDB's sink would refuse it (a compacted topic needs keys).
        raw = raw.where(F.col("key").isNotNull())
    layout = layout_of(source)
    decoded = raw.select(*serde_columns.decode_key(layout, F.col("key")),
                         *serde_columns.decode_value(layout, F.col("value")),
                         *[header_column(c.header_key).alias(c.name) for c in source.header_columns],
                         F.col("timestamp").alias(RECORD_TIMESTAMP), F.col("partition").alias(ROWPARTITION),
                         F.col("offset").alias(ROWOFFSET),
                         F.col("key").alias(RAW_KEY))
    frame = (decoded.withColumn(ROWTIME, _rowtime(source)).drop(RECORD_TIMESTAMP)
             .withColumn(TS, F.timestamp_millis(F.col(ROWTIME))))
    # Kafka Streams skips a record whose timestamp (or TIMESTAMP column) is negative or cannot be
    # extracted (null): it has no place in stream time, and no record can be written with it.
    frame = frame.where(F.col(ROWTIME) >= 0)
    # A record of a registry format that did not decode is in the processing log, not the query.
    for marker in (c for c in frame.columns if c.startswith(serde_columns.UNREADABLE)):
        frame = frame.where(~F.col(marker)).drop(marker)
    if prefix is not None:
        frame = frame.select(*[F.col(f"`{c}`").alias(f"{prefix}__{c}") for c in frame.columns])
    return frame


def without_null_values(frame: DataFrame, source: SourceInfo, prefix: str | None = None) -> DataFrame:
    """``frame`` (``source`` read by ``read_source`` with ``prefix``) without a stream's records
    whose value is null, which ksqlDB's joins, WHERE, table functions and aggregations drop; a
    table's (its tombstones) are kept."""
    if source.kind is not SourceKind.STREAM:
        return frame
    return frame.where(~F.col(TOMBSTONE if prefix is None else f"{prefix}__{TOMBSTONE}"))
