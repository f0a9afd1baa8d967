"""pytest fixtures of a real S3 server (SeaweedFS's ``weed mini``, oncestream/seaweedfs_process.py).

Fixtures: ``seaweedfs`` (one server for the whole session; tests use their own key prefixes and
must leave it running) and ``seaweedfs_factory`` (servers of a module's own, for tests that stop
or kill them). The names tests import from here are re-exported from the shipped module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from oncestream.seaweedfs_process import (
    ACCESS_KEY_ID,
    DEFAULT_BUCKET,
    GRPC_PORT_OFFSET,
    HOST,
    READY_TIMEOUT_S,
    REGION,
    SECRET_ACCESS_KEY,
    STOP_TIMEOUT_S,
    SeaweedServer,
    clean_environ,
    free_port_pairs,
    weed_executable,
)

__all__ = [
    "ACCESS_KEY_ID",
    "DEFAULT_BUCKET",
    "GRPC_PORT_OFFSET",
    "HOST",
    "READY_TIMEOUT_S",
    "REGION",
    "SECRET_ACCESS_KEY",
    "STOP_TIMEOUT_S",
    "SeaweedServer",
    "clean_environ",
    "free_port_pairs",
    "seaweedfs",
    "seaweedfs_factory",
    "weed_executable",
]


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedServer]:
    """One SeaweedFS for the whole session (start-up takes seconds). Tests write under their own key
    prefixes and leave the server running; tests that stop it use ``seaweedfs_factory``."""
    server = SeaweedServer(tmp_path_factory.mktemp("seaweedfs"))
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture(scope="module")
def seaweedfs_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., SeaweedServer]]:
    """Start SeaweedFS servers of the module's own (to stop, kill and restart); all killed at the end."""
    started: list[SeaweedServer] = []

    def start(bucket: str = DEFAULT_BUCKET) -> SeaweedServer:
        server = SeaweedServer(tmp_path_factory.mktemp("seaweedfs"), bucket=bucket)
        started.append(server)
        return server.start()

    try:
        yield start
    finally:
        for server in started:
            server.kill()
