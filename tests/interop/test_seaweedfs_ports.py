"""A SeaweedFS test server whose chosen port another socket took before ``weed`` bound it starts
on fresh ports (the CI run of 12f45b5 lost a whole pass to "Port allocation failed": the ports
are free when chosen, and an outgoing connection's ephemeral port can take one before weed binds)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from oncestream.seaweedfs_process import HOST, SeaweedServer

pytestmark = pytest.mark.interop


def test_a_port_taken_before_the_first_start_is_chosen_again(tmp_path: Path) -> None:
    server = SeaweedServer(tmp_path)
    taken_port = server.ports["master"]
    squatter = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        squatter.bind((HOST, taken_port))
        squatter.listen()
        server.start()
        try:
            assert server.ports["master"] != taken_port
            assert list(tmp_path.glob("weed.attempt1.log")), "the first attempt's log is kept"
        finally:
            server.kill()
    finally:
        squatter.close()
