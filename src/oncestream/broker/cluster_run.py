"""Run a broker of a cluster in the foreground: ``oncestream broker --metadata-store ... --object-store ...``.

Start-up, in order (docs/cluster.md): check the configuration, probe the object store (PUT, GET,
DELETE of a probe key) and PostgreSQL (a connection and ``SELECT 1``): a store that cannot be
used ends the start with ``ClusterStartError`` before any port is bound.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from oncestream.broker.cluster_settings import (
    ClusterSettings,
    ClusterStartError,
    open_and_probe_object_store,
    probe_metadata_store,
)
from oncestream.broker.config import BrokerConfig
from oncestream.broker.seams import BrokerSeams

log = logging.getLogger("oncestream.broker")


def run_cluster_broker(settings: ClusterSettings, host: str, port: int, props: dict[str, str], *,
                       ready_file: Path | None = None, seams: BrokerSeams | None = None) -> int:
    """Run a cluster broker until SIGTERM/SIGINT; the process exit code. ClusterStartError when
    a store cannot be used at start, InvalidConfigError for a bad configuration."""
    BrokerConfig.from_properties(host, port, props)  # a bad property fails before any store is touched
    seams_used = seams or BrokerSeams()
    if seams_used.object_store is None:
        open_and_probe_object_store(settings.object_store_uri, os.environ, settings.node_id)
    asyncio.run(probe_metadata_store(settings.metadata_store_url, settings.connect_timeout_ms))
    raise ClusterStartError("cluster mode: both stores answer, but serving from them is not built yet")
