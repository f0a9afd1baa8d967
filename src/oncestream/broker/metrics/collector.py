"""Gauges read from the broker's state at scrape time (prometheus-client custom collector):
nothing of this is counted on the hot path.

Per partition: log size, start and end offsets, high watermark and LSO lag (high watermark - last
stable offset: how far read_committed readers are held back by open transactions). The transaction
coordinator's open, prepared (KIP-939) and completing transactions and the oldest one's age, plus
the partitions' hanging transactions (an open transaction in a partition whose producer wrote
nothing for longer than ``transaction.max.timeout.ms``: Kafka's kafka-transactions.sh find-hanging
rule). Groups per state and protocol, each group's state, committed offset and lag (high watermark - committed) per
group and partition. The request memory pool's use.

A scrape runs on the event loop (metrics/endpoint.py), so it reads one consistent moment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from oncestream.broker.metrics import names
from oncestream.coordinator.group.coordinator import GroupCoordinator
from oncestream.coordinator.txn.coordinator import TransactionCoordinator
from oncestream.errors import OnceStreamError
from oncestream.log.manager import LogManager


class PoolView(Protocol):
    """What the collector reads of the request memory pool (broker/memory_pool.py)."""

    @property
    def reserved_bytes(self) -> int: ...

    @property
    def available_bytes(self) -> int: ...


class BrokerStateCollector(Collector):
    """Yields the state-derived gauges of one broker on every scrape."""

    def __init__(self, logs: LogManager, transactions: TransactionCoordinator, groups: GroupCoordinator,
                 pool: PoolView, now_ms: Callable[[], int]) -> None:
        """``now_ms`` is the wall clock (transaction start times and producer timestamps are)."""
        self._logs = logs
        self._transactions = transactions
        self._groups = groups
        self._pool = pool
        self._now_ms = now_ms

    def describe(self) -> list[GaugeMetricFamily]:
        """Nothing: the registry must not call ``collect`` at registration (no state yet)."""
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now_ms = self._now_ms()
        yield from self._log_gauges(now_ms)
        yield from self._transaction_gauges(now_ms)
        yield from self._group_gauges()
        yield from self._pool_gauges()

    def _log_gauges(self, now_ms: int) -> Iterator[GaugeMetricFamily]:
        labels = ["topic", "partition"]
        size = GaugeMetricFamily(names.LOG_SIZE, "Bytes of the partition's log.", labels=labels)
        start = GaugeMetricFamily(names.LOG_START, "The partition's log start offset.", labels=labels)
        end = GaugeMetricFamily(names.LOG_END, "The partition's log end offset.", labels=labels)
        hw = GaugeMetricFamily(names.HIGH_WATERMARK, "The partition's high watermark.", labels=labels)
        lso_lag = GaugeMetricFamily(names.LSO_LAG, "High watermark - last stable offset.", labels=labels)
        hanging = 0
        max_timeout_ms = self._transactions.transaction_max_timeout_ms
        for (topic, partition), plog in self._logs.logs().items():
            if plog.closed:
                continue
            key = [topic, str(partition)]
            try:
                high_watermark = plog.high_watermark
                lso = plog.last_stable_offset
            except OnceStreamError:  # offline (a failed disk): no numbers to show
                continue
            size.add_metric(key, plog.size_bytes)
            start.add_metric(key, plog.log_start_offset)
            end.add_metric(key, plog.log_end_offset)
            hw.add_metric(key, high_watermark)
            lso_lag.add_metric(key, high_watermark - lso)
            if lso < high_watermark:  # an open transaction: is its producer silent for too long?
                hanging += sum(
                    1 for p in plog.producer_states()
                    if p.current_txn_start_offset >= 0 and now_ms - p.last_timestamp_ms > max_timeout_ms
                )
        yield from (size, start, end, hw, lso_lag)
        yield GaugeMetricFamily(names.TXN_HANGING, "Open transactions in partitions whose producer wrote nothing "
                                "for longer than transaction.max.timeout.ms.", value=hanging)

    def _transaction_gauges(self, now_ms: int) -> Iterator[GaugeMetricFamily]:
        if not self._transactions.loaded:
            return
        counts = self._transactions.transaction_counts(now_ms)
        yield GaugeMetricFamily(names.TXN_OPEN, "Ongoing transactions.", value=counts.open)
        yield GaugeMetricFamily(names.TXN_PREPARED, "Ongoing KIP-939 two-phase-commit transactions.",
                                value=counts.prepared)
        yield GaugeMetricFamily(names.TXN_COMPLETING, "Transactions writing their markers.", value=counts.completing)
        yield GaugeMetricFamily(names.TXN_OLDEST_AGE, "Age of the oldest ongoing transaction.",
                                value=counts.oldest_age_ms / 1000)

    def _group_gauges(self) -> Iterator[GaugeMetricFamily]:
        listed = self._groups.list_groups().groups
        by_state: dict[tuple[str, str], int] = {}
        offset = GaugeMetricFamily(names.GROUP_OFFSET, "The group's committed offset.",
                                   labels=["consumergroup", "topic", "partition"])
        lag = GaugeMetricFamily(names.GROUP_LAG, "High watermark - the group's committed offset.",
                                labels=["consumergroup", "topic", "partition"])
        group_states = GaugeMetricFamily(names.GROUP_STATE, "1 for the state each group is in.",
                                  labels=["consumergroup", "protocol", "state"])
        logs = self._logs.logs()
        for group in listed:
            protocol = self._groups.group_type(group.group_id)
            key = (protocol, group.state.lower())
            by_state[key] = by_state.get(key, 0) + 1
            group_states.add_metric([group.group_id, *key], 1)
            for tp, committed in self._groups.committed_offsets(group.group_id).items():
                plog = logs.get((tp.topic, tp.partition))
                labels = [group.group_id, tp.topic, str(tp.partition)]
                offset.add_metric(labels, committed.offset)
                if plog is not None and not plog.closed:
                    lag.add_metric(labels, max(0, plog.high_watermark - committed.offset))
        count = GaugeMetricFamily(names.GROUP_COUNT, "Groups per protocol and state.", labels=["protocol", "state"])
        for (protocol, state), n in sorted(by_state.items()):
            count.add_metric([protocol, state], n)
        yield from (count, group_states, offset, lag)

    def _pool_gauges(self) -> Iterator[GaugeMetricFamily]:
        available = min(self._pool.available_bytes, 2**53)  # unbounded pool: a finite number
        yield GaugeMetricFamily(names.MEMORY_POOL_AVAILABLE, "Request bytes the pool may still reserve.",
                                value=available)
        yield GaugeMetricFamily(names.MEMORY_POOL_USED, "Request bytes reserved now.", value=self._pool.reserved_bytes)
