"""What the parts of one SQL-server node share: its settings, the command runner (whose lock
guards the metastore it applies commands to), the metastore, the Kafka admin client and whether
the node is shutting down. ``node.Node`` builds one and hands it to each part (statements,
local statements, queries, placement)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from oncestream.client import Admin
from oncestream.sql.errors import SERVER_SHUTTING_DOWN, NotReadyError
from oncestream.sql.language.catalog import SourceInfo
from oncestream.sql.server.command_runner import CommandRunner
from oncestream.sql.server.metastore import Metastore


@dataclass
class NodeSettings:
    """What one node needs (``server_main`` builds it from the command line)."""

    service_id: str
    bootstrap_servers: str
    client_properties: dict[str, str] = field(default_factory=dict)   # security.protocol, sasl.*, ssl.*
    properties: dict[str, str] = field(default_factory=dict)          # every --config (SHOW PROPERTIES)
    command_timeout_ms: int = 60_000
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 1_000
    replication_factor: int = 1
    state_dir: str | None = None      # materialized tables for pull queries live under it
    instance_id: str | None = None    # group.instance.id in the query-assignment group (node_identity)

    @property
    def client_conf(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap_servers, **self.client_properties}


@dataclass
class NodeContext:
    """The node's shared state. The runner thread applies commands to ``metastore`` under
    ``runner.lock``; everyone else reads it through ``snapshot`` / ``source`` / ``sources``."""

    settings: NodeSettings
    runner: CommandRunner
    metastore: Metastore
    admin: Admin
    terminating: bool = False

    def snapshot(self) -> Metastore:
        """A copy of the metastore as the runner last left it."""
        with self.runner.lock:
            return self.metastore.copy()

    def source(self, name: str) -> SourceInfo | None:
        with self.runner.lock:
            return self.metastore.source(name)

    def sources(self) -> dict[str, SourceInfo]:
        with self.runner.lock:
            return self.metastore.source_map()

    def check_ready(self) -> None:
        """Refuse requests while the command topic is replayed or the node shuts down (503)."""
        if self.terminating:
            raise NotReadyError("The server is shutting down", error_code=SERVER_SHUTTING_DOWN)
        if not self.runner.replayed and self.runner.degraded_reason is None:
            raise NotReadyError("KSQL is not yet ready to serve requests: the command topic is still being replayed")
