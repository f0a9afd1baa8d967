"""Received client metrics on the broker's ``/metrics``: the latest value of every data point per
client instance (running totals for delta sums), labelled client_id, client_instance_id,
client_software_name, client_software_version and the point's own attributes; an instance that
stopped pushing for its expiry time (max(3 x push interval, 60 s)) disappears."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from oncestream.broker.telemetry.otlp import DataPoint, prometheus_name

CLIENT_LABELS = ("client_id", "client_instance_id", "client_software_name", "client_software_version")


@dataclass
class _InstanceValues:
    labels: dict[str, str]
    expiry_ms: int
    last_push_ms: int
    values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)


class ReceivedClientMetrics(Collector):
    """The values clients pushed, kept per instance; a prometheus-client collector over them."""

    def __init__(self, now_ms: Callable[[], int]) -> None:
        self._now_ms = now_ms
        self._instances: dict[str, _InstanceValues] = {}

    def record(self, labels: dict[str, str], points: list[DataPoint], expiry_ms: int) -> None:
        """One accepted push of the instance ``labels['client_instance_id']``."""
        key = labels["client_instance_id"]
        entry = self._instances.get(key)
        if entry is None:
            entry = self._instances[key] = _InstanceValues(dict(labels), expiry_ms, 0)
        entry.labels, entry.expiry_ms, entry.last_push_ms = dict(labels), expiry_ms, self._now_ms()
        for point in points:
            point_key = (point.name, point.attributes)
            entry.values[point_key] = entry.values.get(point_key, 0.0) + point.value if point.delta else point.value

    def expire(self) -> None:
        now = self._now_ms()
        for key in [k for k, e in self._instances.items() if now - e.last_push_ms > e.expiry_ms]:
            del self._instances[key]

    def instance_ids(self) -> list[str]:
        return sorted(self._instances)

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # the names are whatever clients send: nothing to check at registration

    def collect(self) -> Iterator[GaugeMetricFamily]:
        self.expire()
        families: dict[str, GaugeMetricFamily] = {}
        for entry in self._instances.values():
            for (name, attributes), value in sorted(entry.values.items()):
                prom = prometheus_name(name)
                family = families.get(prom)
                if family is None:
                    family = families[prom] = GaugeMetricFamily(prom, f"KIP-714 client metric {name}")
                labels = {prometheus_name(k): v for k, v in attributes}
                labels.update(entry.labels)  # the client's identity wins over a same-named attribute
                family.add_sample(prom, labels, value)
        yield from families.values()
