"""The durable store of client quotas: ``DATA_DIR/client-quotas.json``, replaced atomically
(``durable_files``), as the dynamic broker configs are. ``save`` runs on the disk threads."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from oncestream.broker.quotas.entities import ClientQuotaConfigs
from oncestream.durable_files import write_file_atomically

CLIENT_QUOTAS_FILE = "client-quotas.json"


def load_client_quotas(data_dir: Path) -> ClientQuotaConfigs:
    """The stored quotas (none before the first AlterClientQuotas)."""
    path = data_dir / CLIENT_QUOTAS_FILE
    if not path.exists():
        return ClientQuotaConfigs()
    return ClientQuotaConfigs.decode(path.read_bytes(), str(path))


def save_client_quotas(data_dir: Path, configs: ClientQuotaConfigs, fsync: Callable[[int], None] | None = None) -> None:
    """Write the quotas durably (tmp, fsync, rename, directory fsync)."""
    write_file_atomically(data_dir / CLIENT_QUOTAS_FILE, configs.encode(), fsync=fsync)


class FileClientQuotaStore:
    """The single broker's quota store (``client-quotas.json``); cluster mode installs
    broker/quotas/cluster_store.py ``PgClientQuotaStore`` in its place, with the same ``save``."""

    def __init__(self, data_dir: Path, fsync: Callable[[], Callable[[int], None] | None]) -> None:
        """``fsync`` gives the broker's fsync seam at the time of each save."""
        self.data_dir = data_dir
        self._fsync = fsync

    def save(self, configs: ClientQuotaConfigs) -> None:
        """Write ``configs`` durably (on the disk threads)."""
        save_client_quotas(self.data_dir, configs, fsync=self._fsync())


class ClientQuotaStore(Protocol):
    """Where AlterClientQuotas persists the whole new configs before installing them."""

    def save(self, configs: ClientQuotaConfigs) -> None: ...
