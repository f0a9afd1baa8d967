"""Schema-registry Avro for DataFrames read or written with ``format("oncestream")``:
``from_avro`` / ``to_avro``, in the manner of Spark's and Databricks' functions of those names,
with the schema taken from (and registered in) a Schema Registry, and Confluent's framing
(magic byte 0, 4-byte big-endian schema id, Avro binary body).

    from oncestream.spark.registry_formats import from_avro, to_avro
    df = spark.readStream.format("oncestream").option("subscribe", "orders").load()
    orders = df.select(from_avro(df.value, "http://registry:8081", "orders-value").alias("order"))
    out = orders.select(to_avro(orders.order, "http://registry:8081", "big-orders-value").alias("value"))

``from_avro`` reads each record with its writer's schema (fetched by the record's id, cached)
resolved into the subject's latest schema (Avro schema resolution: added fields take their
defaults, int widens to long...), and gives a column of the latest schema's Spark type; a record
that is not framed, names an id the registry does not know or does not decode is null. ``to_avro``
writes a struct column with ``schema`` (registered under ``subject``; the subject's latest
schema if not given) and frames it with the schema's id.

Avro types in Spark: boolean BooleanType, int IntegerType, long LongType, float FloatType,
double DoubleType, string/enum StringType, bytes/fixed BinaryType, decimal DecimalType, date
DateType, timestamp-millis/-micros TimestampType, array ArrayType, map MapType(String, ...),
record StructType, ``["null", T]`` T (nullable).

The codecs run in Python UDFs (fastavro): no Spark package jar is needed.
"""

from __future__ import annotations

import io
import json
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from oncestream.spark.schema_registry_client import FramingError, RegistryClient, frame, unframe


def _load(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text      # a bare primitive name


def spark_type_of_avro(schema: Any, named: dict[str, Any] | None = None) -> T.DataType:
    """The Spark type holding values of an Avro schema (parsed JSON)."""
    named = {} if named is None else named
    if isinstance(schema, list):
        rest = [s for s in schema if s != "null"]
        if len(rest) != 1:
            raise FramingError(f"Avro union {json.dumps(schema)} has no Spark type here: only [null, T]")
        return spark_type_of_avro(rest[0], named)
    if isinstance(schema, str):
        simple: dict[str, T.DataType] = {
            "boolean": T.BooleanType(), "int": T.IntegerType(), "long": T.LongType(), "float": T.FloatType(),
            "double": T.DoubleType(), "string": T.StringType(), "bytes": T.BinaryType()}
        if schema in simple:
            return simple[schema]
        found = named.get(schema) or next((v for k, v in named.items() if k.rpartition(".")[2] == schema), None)
        if found is None:
            raise FramingError(f"Avro type {schema!r} is not known")
        return spark_type_of_avro(found, named)
    kind, logical = schema.get("type"), schema.get("logicalType")
    if logical == "decimal":
        return T.DecimalType(int(schema.get("precision", 10)), int(schema.get("scale", 0)))
    if logical == "date":
        return T.DateType()
    if logical in ("timestamp-millis", "timestamp-micros"):
        return T.TimestampType()
    if kind in ("record", "enum", "fixed"):
        named[f"{schema.get('namespace')}.{schema['name']}" if schema.get("namespace") else str(schema["name"])] = schema
    if kind == "record":
        return T.StructType([T.StructField(str(f["name"]), spark_type_of_avro(f["type"], named)) for f in schema["fields"]])
    if kind == "array":
        return T.ArrayType(spark_type_of_avro(schema["items"], named))
    if kind == "map":
        return T.MapType(T.StringType(), spark_type_of_avro(schema["values"], named))
    if kind == "enum":
        return T.StringType()
    if kind == "fixed":
        return T.BinaryType()
    return spark_type_of_avro(kind, named)


class _Codec:
    """Picklable per-column state: the client and the schemas parsed so far (per worker)."""

    def __init__(self, client: RegistryClient, reader_text: str | None) -> None:
        self.client = client
        self.reader_text = reader_text
        self._parsed: dict[int, Any] = {}
        self._reader: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"client": self.client, "reader_text": self.reader_text}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["client"], state["reader_text"])  # type: ignore[misc]

    def parsed(self, schema_id: int) -> Any:
        import fastavro

        found = self._parsed.get(schema_id)
        if found is None:
            found = fastavro.parse_schema(_load(self.client.by_id(schema_id).schema))
            self._parsed[schema_id] = found
        return found

    def reader(self) -> Any:
        import fastavro

        if self._reader is None and self.reader_text is not None:
            self._reader = fastavro.parse_schema(_load(self.reader_text))
        return self._reader

    def decode(self, data: bytes) -> Any:
        import fastavro

        schema_id, body = unframe(data)
        return fastavro.schemaless_reader(io.BytesIO(body), self.parsed(schema_id), self.reader())

    def encode(self, schema_id: int, datum: Any) -> bytes:
        import fastavro

        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, self.parsed(schema_id), datum)
        return frame(schema_id, buf.getvalue())


def _client(registry_url: str, user_info: str | None) -> RegistryClient:
    return RegistryClient(registry_url, user_info=user_info)


def from_avro(data: Column, registry_url: str, subject: str, *, user_info: str | None = None) -> Column:
    """The framed Avro records of binary column ``data`` as values of ``subject``'s latest schema
    (null for a record that cannot be read). ``user_info``: ``user:password`` (basic auth)."""
    client = _client(registry_url, user_info)
    latest = client.latest(subject)
    if latest is None:
        raise FramingError(f"Subject '{subject}' does not exist in the Schema Registry at {registry_url}")
    codec = _Codec(client, latest.schema)
    result = spark_type_of_avro(_load(latest.schema))

    def decode(raw: Any) -> Any:
        if raw is None:
            return None
        try:
            return codec.decode(bytes(raw))
        except Exception:  # noqa: BLE001 - an unreadable record is null, whatever fastavro raised
            return None

    decode.__annotations__ = {}
    return F.udf(decode, result)(data)


def plain_value(value: Any) -> Any:
    """A value a Python UDF got from Spark as plain Python: Rows (nested) as dicts, bytearray as bytes."""
    if hasattr(value, "asDict"):
        return {k: plain_value(v) for k, v in value.asDict().items()}
    if isinstance(value, list):
        return [plain_value(v) for v in value]
    if isinstance(value, dict):
        return {k: plain_value(v) for k, v in value.items()}
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def to_avro(value: Column, registry_url: str, subject: str, schema: str | None = None, *,
            user_info: str | None = None) -> Column:
    """Framed Avro records of ``value`` (a struct, or a primitive for a primitive schema) written
    with ``schema``, registered under ``subject`` (default: the subject's latest schema)."""
    client = _client(registry_url, user_info)
    if schema is not None:
        schema_id = client.register(subject, "AVRO", schema)
    else:
        latest = client.latest(subject)
        if latest is None:
            raise FramingError(f"Subject '{subject}' does not exist in the Schema Registry at {registry_url}: "
                               "pass the schema to register")
        schema_id = latest.schema_id
    codec = _Codec(client, None)

    def encode(row: Any) -> Any:
        return None if row is None else codec.encode(schema_id, plain_value(row))

    encode.__annotations__ = {}
    return F.udf(encode, T.BinaryType())(value)
