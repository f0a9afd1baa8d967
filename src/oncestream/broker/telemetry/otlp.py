"""OTLP ``MetricsData`` (opentelemetry-proto) as flat data points, and the Prometheus name of a
KIP-714 metric.

Names: a KIP-714 metric name (``org.apache.kafka.producer.node.request.latency.avg``) becomes the
Prometheus name with every character outside ``[a-zA-Z0-9_]`` replaced by ``_``
(``org_apache_kafka_producer_node_request_latency_avg``); the data point's attributes (``node_id``,
``topic``, ...) become labels with the same replacement.

Kinds: gauges and sums give one value per data point (a double or an int); histograms and
summaries give their sum and count (``_sum`` / ``_count``), which is what librdkafka's and
Kafka's clients do not send today but other OTLP senders may.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality, Metric, MetricsData, NumberDataPoint

from oncestream.errors import InvalidRequestError

_UNSAFE = re.compile(r"[^a-zA-Z0-9_]")


def prometheus_name(name: str) -> str:
    """A KIP-714 metric or attribute name as a Prometheus-safe one (module docstring)."""
    safe = _UNSAFE.sub("_", name)
    return "_" + safe if safe[:1].isdigit() else safe


@dataclass(frozen=True)
class DataPoint:
    """One received value: metric name (as sent), its attributes, the value, and whether it is a
    delta of a monotonic sum (to be added to the running total) rather than a current value."""

    name: str
    attributes: tuple[tuple[str, str], ...]
    value: float
    delta: bool


def _any_value(value: AnyValue) -> str:
    kind = value.WhichOneof("value")
    if kind is None:
        return ""
    if kind in ("array_value", "kvlist_value"):
        return str(getattr(value, kind)).replace("\n", " ")
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return str(getattr(value, kind))


def _attributes(items: list[KeyValue]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((kv.key, _any_value(kv.value)) for kv in items))


def _number(point: NumberDataPoint) -> float:
    return float(point.as_double) if point.WhichOneof("value") == "as_double" else float(point.as_int)


def decode(payload: bytes) -> tuple[dict[str, str], list[DataPoint]]:
    """The resource attributes of the (first) resource and every data point of ``payload``, an
    uncompressed OTLP MetricsData; INVALID_REQUEST when it does not parse."""
    data = MetricsData()
    try:
        data.ParseFromString(payload)
    except DecodeError as exc:
        raise InvalidRequestError(f"telemetry payload is not OTLP MetricsData: {exc}") from None
    resource: dict[str, str] = {}
    points: list[DataPoint] = []
    for resource_metrics in data.resource_metrics:
        resource.update(_attributes(list(resource_metrics.resource.attributes)))
        for scope in resource_metrics.scope_metrics:
            for metric in scope.metrics:
                points.extend(_points(metric))
    return resource, points


def _points(metric: Metric) -> list[DataPoint]:
    kind = metric.WhichOneof("data")
    name = metric.name
    if kind is None:
        return []
    body: Any = getattr(metric, kind)
    out: list[DataPoint] = []
    if kind == "gauge":
        out += [DataPoint(name, _attributes(list(p.attributes)), _number(p), False) for p in body.data_points]
    elif kind == "sum":
        delta = bool(body.is_monotonic) and body.aggregation_temporality == AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA
        out += [DataPoint(name, _attributes(list(p.attributes)), _number(p), delta) for p in body.data_points]
    elif kind in ("histogram", "exponential_histogram", "summary"):
        delta = getattr(body, "aggregation_temporality", 0) == AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA
        for p in body.data_points:
            attributes = _attributes(list(p.attributes))
            out.append(DataPoint(name + ".sum", attributes, float(p.sum), delta))
            out.append(DataPoint(name + ".count", attributes, float(p.count), delta))
    return out
