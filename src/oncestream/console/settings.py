"""The console's settings: where the cluster is, how to reach it, who may log in, where to listen."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLIENT_ID = "oncestream-console"
DEFAULT_LISTEN_HOST = "127.0.0.1"
DEFAULT_LISTEN_PORT = 8480
# A console session lasts a working day; after that the user logs in again.
DEFAULT_SESSION_MAX_AGE_S = 8 * 3600


@dataclass(frozen=True)
class ConsoleSettings:
    """Everything ``create_app`` and ``serve`` need.

    ``client_config`` holds the Kafka client properties of ``--command-config`` (librdkafka
    names: ``security.protocol``, ``sasl.*``, ``ssl.*``): they are used by this process only and
    never sent to a browser. ``users_file`` is the SQL server's users file format
    (``oncestream sql-users add``). Sessions live in this process's memory: a restart logs
    every user out, which is the safe default for an admin tool."""

    bootstrap_servers: str
    users_file: Path
    sql_server_url: str | None = None
    client_config: Mapping[str, str] = field(default_factory=dict)
    listen_host: str = DEFAULT_LISTEN_HOST
    listen_port: int = DEFAULT_LISTEN_PORT
    session_max_age_s: int = DEFAULT_SESSION_MAX_AGE_S
    # An https:// listener: PEM certificate chain and key (None: plain HTTP).
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    # The brokers' Prometheus /metrics URLs (``--metrics-url``): throughput on the Overview page.
    metrics_urls: tuple[str, ...] = ()

    def client_conf(self, **extra: Any) -> dict[str, Any]:
        """Client properties for our Admin/Consumer/Producer: the file's (security) properties
        first, then what the console itself needs."""
        return {"client.id": CLIENT_ID, **self.client_config, "bootstrap.servers": self.bootstrap_servers, **extra}
