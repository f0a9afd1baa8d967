"""Throughput on the Overview page, from the brokers' own metrics where the console is told them.

A broker's Prometheus ``/metrics`` (``metrics.listen``, docs/metrics.md) is served on an address of
its own that the cluster's metadata does not name, so the operator gives the console the URLs
(``--metrics-url``, once per broker). Each look at the page scrapes them and turns the growth of
Kafka's BrokerTopicMetrics counters (bytes in, messages in, bytes out; summed over topics) since
the previous look into rates per second (``OffsetRates``: nothing is sampled in the background).
The exposition text is read by prometheus-client's own parser, the library the broker writes it
with; a broker that cannot be scraped is shown with its error, the others still count.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from oncestream.console.rates import OffsetRates

SCRAPE_TIMEOUT_S = 5.0
# Kafka's BrokerTopicMetrics counters as the broker exports them (broker/metrics/names.py), per topic.
COUNTERS = {
    "bytes_in": "kafka_server_brokertopicmetrics_bytesin_total",
    "messages_in": "kafka_server_brokertopicmetrics_messagesin_total",
    "bytes_out": "kafka_server_brokertopicmetrics_bytesout_total",
}


@dataclass(frozen=True)
class BrokerThroughput:
    """One metrics URL's rates per second (None until a second look, or on ``error``)."""

    url: str
    bytes_in_per_s: float | None = None
    messages_in_per_s: float | None = None
    bytes_out_per_s: float | None = None
    error: str | None = None


def counter_totals(exposition: str) -> dict[str, int]:
    """The BrokerTopicMetrics counters of one scrape, each summed over its topics."""
    wanted = {name: key for key, name in COUNTERS.items()}
    totals = dict.fromkeys(COUNTERS, 0)
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            key = wanted.get(sample.name)
            if key is not None:
                totals[key] += int(sample.value)
    return totals


def _scrape(url: str) -> str:
    response = httpx.get(url, timeout=SCRAPE_TIMEOUT_S)
    response.raise_for_status()
    return response.text


class ThroughputSampler:
    """The rates of every configured metrics URL since the previous ``sample``."""

    def __init__(self, urls: Sequence[str], clock_s: Callable[[], float],
                 fetch: Callable[[str], str] = _scrape) -> None:
        self.urls = list(urls)
        self._fetch = fetch
        self._rates = OffsetRates(clock_s)

    async def sample(self) -> list[BrokerThroughput]:
        """Scrape every URL (concurrently, off the event loop) and answer its rates."""
        return list(await asyncio.gather(*(asyncio.to_thread(self._one, url) for url in self.urls)))

    def _one(self, url: str) -> BrokerThroughput:
        try:
            totals = counter_totals(self._fetch(url))
        except (httpx.HTTPError, ValueError) as exc:  # unreachable, refused, or not an exposition
            return BrokerThroughput(url, error=str(exc) or type(exc).__name__)
        rates = {key: self._rates.observe(f"{url} {key}", total) for key, total in totals.items()}
        return BrokerThroughput(url, bytes_in_per_s=rates["bytes_in"], messages_in_per_s=rates["messages_in"],
                                bytes_out_per_s=rates["bytes_out"])


def total_of(rows: Sequence[BrokerThroughput], field_name: str) -> float | None:
    """The cluster's rate: the sum over brokers with a rate (None when none has one yet)."""
    values = [getattr(row, field_name) for row in rows if getattr(row, field_name) is not None]
    return sum(values) if values else None
