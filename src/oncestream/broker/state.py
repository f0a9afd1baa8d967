"""Everything a request handler may touch: logs, id allocation, notifier, flusher, identity.

Handlers receive a ``BrokerState`` and never reach for files, sockets or the clock themselves:
``now_ms()`` is the one place wall-clock time enters, and it is passed on into the sans-io core.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from oncestream.broker.config import BrokerConfig
from oncestream.broker.flusher import GroupCommitFlusher
from oncestream.broker.group_service import GroupService
from oncestream.broker.txn_service import TxnService
from oncestream.broker.notify import AppendNotifier
from oncestream.coordinator.producer_ids import ProducerIdManager
from oncestream.log.config import LogConfig
from oncestream.log.manager import LogManager


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def _load_cluster_id(data_dir: Path) -> str:
    """A cluster id created once per data directory (Kafka keeps it in meta.properties)."""
    path = data_dir / "meta.properties"
    if path.exists():
        for line in path.read_text().splitlines():
            if line.startswith("cluster.id="):
                return line.split("=", 1)[1].strip()
    cluster_id = uuid.uuid4().hex[:22]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"version=1\ncluster.id={cluster_id}\n")
    tmp.replace(path)
    return cluster_id


class BrokerState:
    """The broker's shared state; built once at start-up, closed once at shutdown."""

    def __init__(self, data_dir: Path, config: BrokerConfig, clock_ms=wall_clock_ms) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir = data_dir
        self.config = config
        self.now_ms = clock_ms
        self.cluster_id = _load_cluster_id(data_dir)
        self.log_config = LogConfig.from_broker_configs(config.raw)
        self.logs = LogManager.open(data_dir / "logs", self.log_config, self.now_ms())
        self.producer_ids = ProducerIdManager(data_dir)
        self.notifier = AppendNotifier()
        self.flusher = GroupCommitFlusher()
        self.groups = GroupService(self.logs, config.raw, self.now_ms)
        self.transactions = TxnService(
            self.logs, self.groups, config.raw, self.now_ms, self.producer_ids.next_id
        )

    def tick(self) -> None:
        """Periodic housekeeping: retention, producer-id expiry."""
        self.logs.tick(self.now_ms())

    def close(self) -> None:
        self.logs.close()
