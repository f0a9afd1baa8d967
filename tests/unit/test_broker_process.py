"""oncestream.broker_process, the one helper that runs a broker as a child process: readiness by
TCP connect with a cap, failures reported with the tail of the child's output, restarts on the
same port, and an exit nobody asked for told apart from our own stop/kill. Driven with tiny
Python children standing in for a broker, plus one real ``oncestream broker``."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from oncestream.broker_process import (
    BrokerExitedEarly,
    BrokerStartError,
    ManagedBroker,
    OnceStreamBroker,
    free_tcp_port,
    port_accepts_connections,
)
from tests.support.narrow import present

# Listens on the port given as argv[1] until killed (SIGTERM exits 0, as a broker's clean stop).
LISTENER = """
import signal, socket, sys
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
sock = socket.socket()
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("127.0.0.1", int(sys.argv[1])))
sock.listen()
print("listening", flush=True)
while True:
    sock.accept()[0].close()
"""


class _Child(ManagedBroker):
    name = "child"

    def __init__(self, code: str, log_dir: Path | None = None, port: int | None = None, **kwargs) -> None:
        super().__init__(log_dir, port, **kwargs)
        self.code = code

    def command(self) -> list[str]:
        return [sys.executable, "-c", self.code, str(self.port)]


def test_start_waits_for_the_port_and_restart_keeps_it(tmp_path) -> None:
    child = _Child(LISTENER, log_file=tmp_path / "child.log")
    with child:
        port = child.port
        assert port_accepts_connections(child.host, port)
        child.restart(crash=True)
        assert child.port == port
        assert child.is_alive()
        assert child.kill_count == 1
        assert child.exited_on_its_own() is None
        assert child.stop() == 0
    log = (tmp_path / "child.log").read_text()
    assert log.count("=== start #") == 2
    assert log.splitlines().count("listening") == 2


def test_child_that_exits_at_startup_fails_with_its_output(tmp_path) -> None:
    code = "import sys; sys.stderr.write('bad config: boom-marker'); sys.exit(3)"
    child = _Child(code, log_dir=tmp_path, port=free_tcp_port())
    with pytest.raises(BrokerExitedEarly, match="exited with code 3") as info:
        child.start()
    assert "boom-marker" in str(info.value)
    assert child.start_count == 1, "a fixed port is not retried elsewhere"


def test_first_start_on_a_picked_port_retries_on_fresh_ports(tmp_path) -> None:
    child = _Child("import sys; sys.exit(1)", log_dir=tmp_path)
    with pytest.raises(BrokerExitedEarly):
        child.start()
    assert child.start_count == 3


def test_spawned_children_are_waited_for_after_all_started_and_a_taken_port_moves(tmp_path) -> None:
    """``spawn`` then ``wait_ready``, as a cluster starts its brokers side by side: the second
    child's picked port is taken before it binds, so it exits early and ``wait_ready`` spawns it
    again on a fresh port."""
    first = _Child(LISTENER, log_dir=tmp_path / "first")
    second = _Child(LISTENER, log_dir=tmp_path / "second")
    with socket.socket() as squatter:
        squatter.bind((second.host, second.port))  # bound, not listening: a connect there is refused
        taken = second.port
        try:
            first.spawn()
            second.spawn()
            assert first.wait_ready() is first
            assert second.wait_ready() is second
            assert (first.start_count, second.start_count) == (1, 2)
            assert second.port != taken
            assert port_accepts_connections(first.host, first.port)
            assert port_accepts_connections(second.host, second.port)
        finally:
            first.kill()
            second.kill()


def test_child_that_never_listens_hits_the_readiness_cap(tmp_path) -> None:
    code = "import sys, time; sys.stderr.write('still-warming-up'); sys.stderr.flush(); time.sleep(600)"
    child = _Child(code, log_dir=tmp_path, port=free_tcp_port(), ready_timeout_s=0.2)
    with pytest.raises(BrokerStartError, match="did not accept connections") as info:
        child.start()
    assert not isinstance(info.value, BrokerExitedEarly)
    assert not child.is_alive(), "a child that missed the cap is killed, not left behind"


def test_exit_on_its_own_is_told_apart_from_our_kill(tmp_path) -> None:
    child = _Child(LISTENER, log_dir=tmp_path).start()
    present(child.process, "child process").kill()  # not through the helper: as if the broker crashed by itself
    present(child.process, "child process").wait()
    assert child.exited_on_its_own() == -9
    child.restart()
    child.kill()
    assert child.exited_on_its_own() is None


def test_oncestream_broker_restarts_on_its_port_with_its_data(tmp_path) -> None:
    broker = OnceStreamBroker(tmp_path / "data", config={"num.partitions": "2"})
    try:
        broker.start()
        assert (tmp_path / "data" / ".lock").exists()
        port = broker.port
        broker.restart(crash=True)
        assert broker.port == port
        assert port_accepts_connections(broker.host, port)
        assert broker.stop() == 0
    finally:
        broker.kill()
    assert len(list((tmp_path / "logs").glob("oncestream-*.stderr.log"))) == 2
