"""The SQL server's Prometheus metrics (``--config metrics.listen=HOST:PORT``, docs/metrics.md).

Read at scrape time, off the event loop (the persistent queries' status and progress are py4j
calls into Spark's JVM): the command topic's applied offset, the persistent queries per state
(every query of the metastore; those this node runs with Spark's status), each local query's
processed rows (summed over Spark's progress reports of micro-batches not seen before, so the
counter holds while Spark keeps only its recent reports) and how far it is behind its sources'
latest offsets. Counted when it happens: pull query latency.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any, Final

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

COMMAND_OFFSET: Final = "oncestream_sql_command_topic_offset"
PERSISTENT_QUERIES: Final = "oncestream_sql_persistent_queries"
PROCESSED_ROWS: Final = "oncestream_sql_query_processed_rows"
OFFSETS_BEHIND: Final = "oncestream_sql_query_offsets_behind_latest"
PULL_LATENCY: Final = "oncestream_sql_pull_query_latency_seconds"

PULL_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


def exposed_names() -> frozenset[str]:
    """Every sample name a scrape of the SQL server can show."""
    return frozenset({COMMAND_OFFSET, PERSISTENT_QUERIES, f"{PROCESSED_ROWS}_total", OFFSETS_BEHIND,
                      *(f"{PULL_LATENCY}{suffix}" for suffix in ("_bucket", "_count", "_sum"))})


class SqlServerMetrics:
    """One node's registry; ``pull_query_done`` is called by the query service."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._pull = Histogram(PULL_LATENCY, "Pull queries: statement received to result ready.",
                               buckets=PULL_BUCKETS_S, registry=self.registry)

    def pull_query_done(self, seconds: float) -> None:
        """One pull query answered (or failed) after ``seconds``."""
        self._pull.observe(seconds)

    def watch(self, node: Any, runtime: Any) -> None:
        """Read ``node`` (command runner, metastore) and ``runtime`` (SparkRuntime) at scrape time."""
        self.registry.register(SqlServerCollector(node, runtime))


class SqlServerCollector(Collector):
    """The scrape-time gauges and counters of one node."""

    def __init__(self, node: Any, runtime: Any) -> None:
        self._node = node
        self._runtime = runtime
        self._lock = threading.Lock()  # two scrapes at once must not count a batch twice
        self._rows: dict[str, float] = {}
        self._last_batch: dict[str, int] = {}

    def describe(self) -> list[GaugeMetricFamily]:
        """Nothing: the registry must not call ``collect`` at registration."""
        return []

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        yield GaugeMetricFamily(COMMAND_OFFSET, "Offset of the last command applied from the command topic.",
                                value=self._node.runner.last_applied_offset)
        query_ids = [q.query_id for q in self._node.metastore_snapshot().queries()]
        # Spark is asked only once it is up (get() would wait for, or start, a lazy Spark).
        spark = self._runtime.get() if self._runtime.state == "RUNNING" else None
        by_state: dict[str, int] = {}
        behind = GaugeMetricFamily(OFFSETS_BEHIND, "Records between a local query's last micro-batch end and its "
                                   "sources' latest offsets (the most of any partition).", labels=["query_id"])
        with self._lock:
            for query_id in query_ids:
                state = spark.status(query_id).state if spark is not None else "NOT_RUNNING"
                by_state[state] = by_state.get(state, 0) + 1
                if spark is None or state != "RUNNING":
                    continue
                progress = spark.progress(query_id)
                self._count_rows(query_id, progress)
                lag = _offsets_behind(progress)
                if lag is not None:
                    behind.add_metric([query_id], lag)
            rows = CounterMetricFamily(PROCESSED_ROWS, "Input rows of a query's micro-batches on this node.",
                                       labels=["query_id"])
            for query_id, count in sorted(self._rows.items()):
                rows.add_metric([query_id], count)
        queries = GaugeMetricFamily(PERSISTENT_QUERIES, "Persistent queries per state on this node.", labels=["state"])
        for state, count in sorted(by_state.items()):
            queries.add_metric([state], count)
        yield from (queries, rows, behind)

    def _count_rows(self, query_id: str, progress: list[Any]) -> None:
        last = self._last_batch.get(query_id, -1)
        for report in progress:
            batch_id = int(report["batchId"])
            if batch_id > last:
                self._rows[query_id] = self._rows.get(query_id, 0.0) + int(report["numInputRows"])
                last = batch_id
        self._last_batch[query_id] = last


def _offsets_behind(progress: list[Any]) -> float | None:
    if not progress:
        return None
    # Here, not at the top: spark.source imports PySpark, which the node loads only with Spark.
    from oncestream.spark.source import offsets_behind_latest

    found = [offsets_behind_latest(source) for source in progress[-1]["sources"]]
    known = [f["maxOffsetsBehindLatest"] for f in found if f is not None]
    return max(known) if known else None
