"""Turning the broker's metrics on: ``metrics.listen=HOST:PORT`` installs the Prometheus recorder
in the broker's state, registers the scrape-time collector and serves ``/metrics`` on the loop."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from oncestream.broker.flusher import GroupCommitFlusher
from oncestream.broker.group_service import GroupService
from oncestream.broker.metrics.collector import BrokerStateCollector, PoolView
from oncestream.broker.metrics.recorder import BrokerMetrics, PrometheusBrokerMetrics
from oncestream.broker.txn_service import TxnService
from oncestream.log.manager import LogManager
from oncestream.metrics.endpoint import MetricsEndpoint

LISTEN_CONFIG = "metrics.listen"


class MeteredState(Protocol):
    """The parts of BrokerState the metrics read and the one they replace (``metrics``)."""

    logs: LogManager
    transactions: TxnService
    groups: GroupService
    flusher: GroupCommitFlusher
    now_ms: Callable[[], int]
    metrics: BrokerMetrics


async def start_metrics(state: MeteredState, props: dict[str, str], pool: PoolView) -> MetricsEndpoint | None:
    """None without ``metrics.listen``; else the started endpoint (its bound port in ``port``)."""
    listen = props.get(LISTEN_CONFIG)
    if not listen:
        return None
    metrics = PrometheusBrokerMetrics()
    metrics.registry.register(BrokerStateCollector(
        state.logs, state.transactions.coordinator, state.groups.coordinator, pool, state.now_ms))
    endpoint = MetricsEndpoint.from_listen(metrics.registry, listen)
    await endpoint.start()
    state.metrics = metrics
    state.flusher.on_round_s = metrics.flush_round
    return endpoint
