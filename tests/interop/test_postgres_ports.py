"""A throwaway PostgreSQL whose chosen port another socket took before the server bound it starts
on a fresh port (as SeaweedFS's, tests/interop/test_seaweedfs_ports.py: ports are free when
chosen, not held until the server binds them)."""

from __future__ import annotations

import socket

import pytest

from oncestream.postgres_process import HOST, PostgresServer

pytestmark = pytest.mark.interop


def test_a_port_taken_before_the_first_start_is_chosen_again() -> None:
    server = PostgresServer()  # its own directory outside pytest's (the server runs as postgres)
    taken_port = server.port
    squatter = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        squatter.bind((HOST, taken_port))
        squatter.listen()
        server.start()
        try:
            assert server.port != taken_port
            assert "could not bind" in (server.base_dir / "server.log").read_text()
        finally:
            server.kill()
            server.remove()
    finally:
        squatter.close()
