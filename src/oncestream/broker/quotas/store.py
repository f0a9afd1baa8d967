"""The durable store of client quotas: ``DATA_DIR/client-quotas.json``, replaced atomically
(``durable_files``), as the dynamic broker configs are. ``save`` runs on the disk threads."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

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
