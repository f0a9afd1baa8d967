"""The broker's KIP-714 parts together (BrokerState.telemetry): the client instances, the
received values, and the lock that orders ClientMetrics config changes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path

from oncestream.broker.telemetry import subscriptions
from oncestream.broker.telemetry.exported import ReceivedClientMetrics
from oncestream.broker.telemetry.manager import DEFAULT_MAX_BYTES, MAX_BYTES_CONFIG, ClientMetricsManager


class ClientTelemetry:
    """Client instances (``manager``), what they pushed (``received``), one config change at a time."""

    def __init__(self, data_dir: Path, props: Mapping[str, str], mono_ms: Callable[[], int]) -> None:
        self.manager = ClientMetricsManager(subscriptions.load(data_dir), mono_ms,
                                            max_bytes=int(props.get(MAX_BYTES_CONFIG, DEFAULT_MAX_BYTES)))
        self.received = ReceivedClientMetrics(mono_ms)
        self.config_lock = asyncio.Lock()
        # Where config changes persist (cluster mode: PostgreSQL, broker/cluster_security.py).
        self.config_store: subscriptions.ClientMetricsStore = subscriptions.FileClientMetricsStore(data_dir)
