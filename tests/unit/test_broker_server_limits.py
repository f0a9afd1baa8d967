"""The server applies its limits on every path: the pool reservation of a frame and the
connection's quota slot are given back whether the request was answered, the client vanished
mid-frame, the frame was refused, a handler failed, or the connection sat idle. In-process broker
(asyncio), real sockets on port 0."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from oncestream.broker.config import BrokerConfig
from oncestream.broker.server import BrokerServer, ServerStateError
from oncestream.broker.state import BrokerState
from tests.support.narrow import of_type
from tests.support.wire import api_versions_v3_body, frame, request_header

API_VERSIONS = 18
WAIT_CAP_S = 30.0  # a cap on waiting for the broker to notice a close, never a speed claim


def _api_versions_frame(correlation_id: int) -> bytes:
    return frame(request_header(API_VERSIONS, 3, correlation_id, flexible=True) + api_versions_v3_body())


async def _until(condition: Callable[[], bool]) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_CAP_S
    while not condition():
        assert loop.time() < deadline, "the broker never noticed"
        await asyncio.sleep(0.01)


def _run(tmp_path: Path, props: dict[str, str],
         scenario: Callable[[BrokerServer, int], Awaitable[None]]) -> BrokerServer:
    state = BrokerState(tmp_path / "data", BrokerConfig.from_properties("127.0.0.1", 0, props))
    server = BrokerServer(state)

    async def main() -> None:
        await server.start()
        try:
            await scenario(server, state.config.port)
            await _until(lambda: server.open_connections == 0)
        finally:
            server.stop()
            await server.serve_until_stopped()

    asyncio.run(main())
    return server


def _all_released(server: BrokerServer) -> None:
    assert server.memory_pool.reserved_bytes == 0
    assert server.quotas.total == 0


def test_answered_requests_give_their_reservation_back(tmp_path: Path) -> None:
    seen: list[int] = []

    async def scenario(server: BrokerServer, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for correlation_id in (1, 2):
            writer.write(_api_versions_frame(correlation_id))
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            await reader.readexactly(size)
            seen.append(server.memory_pool.reserved_bytes)
        writer.close()

    _all_released(_run(tmp_path, {}, scenario))
    assert seen == [0, 0], "released once the response is written, not at close"


def test_a_client_gone_in_the_middle_of_a_frame_gives_it_back(tmp_path: Path) -> None:
    held: list[int] = []

    async def scenario(server: BrokerServer, port: int) -> None:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(struct.pack(">i", 5000) + b"\x00" * 100)
        await _until(lambda: server.memory_pool.reserved_bytes == 5000)
        held.append(server.quotas.total)
        writer.close()

    _all_released(_run(tmp_path, {}, scenario))
    assert held == [1]


def test_refused_and_failing_requests_give_it_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario(server: BrokerServer, port: int) -> None:
        # An unknown api key: the dispatcher closes the connection.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(frame(b"\x00\x63\x00\x00\x00\x00\x00\x01\xff\xff"))
        assert await reader.read() == b""
        writer.close()

        async def broken_handler(frame_bytes: bytes) -> bytes:
            raise ValueError("a bug in a handler")

        monkeypatch.setattr(server.dispatcher, "handle_frame", broken_handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_api_versions_frame(1))
        assert await reader.read() == b""
        writer.close()

    _all_released(_run(tmp_path, {}, scenario))


def test_an_idle_connection_mid_frame_is_closed_and_gives_it_back(tmp_path: Path) -> None:
    async def scenario(server: BrokerServer, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(struct.pack(">i", 5000) + b"\x00" * 100)
        assert await reader.read() == b"", "closed by the broker"
        writer.close()

    _all_released(_run(tmp_path, {"connections.max.idle.ms": "200"}, scenario))


def test_a_connection_refused_at_accept_is_not_counted(tmp_path: Path) -> None:
    async def scenario(server: BrokerServer, port: int) -> None:
        first_reader, first_writer = await asyncio.open_connection("127.0.0.1", port)
        first_writer.write(_api_versions_frame(1))
        await first_reader.readexactly(4)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await reader.read() == b""
        writer.close()
        assert server.quotas.total == 1
        first_writer.close()

    _all_released(_run(tmp_path, {"max.connections": "1"}, scenario))


def test_serving_before_start_is_a_typed_error(tmp_path: Path) -> None:
    state = BrokerState(tmp_path / "data", BrokerConfig.from_properties("127.0.0.1", 0, {}))
    try:
        with pytest.raises(ServerStateError):
            asyncio.run(BrokerServer(state).serve_until_stopped())
    finally:
        state.close()


def test_a_request_the_broker_is_still_working_on_is_not_idle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long-poll fetch or a JoinGroup waiting out a rebalance keeps the client waiting for the
    broker: the idle clock stops while the broker works on a request."""
    answered: list[bytes] = []

    async def scenario(server: BrokerServer, port: int) -> None:
        release = asyncio.Event()

        async def slow_handler(frame_bytes: bytes) -> bytes:
            await release.wait()
            return frame(b"\x00\x00\x00\x01")

        monkeypatch.setattr(server.dispatcher, "handle_frame", slow_handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_api_versions_frame(1))
        await asyncio.sleep(3 * 0.2)  # three idle periods pass while the request is handled
        release.set()
        answered.append(await reader.readexactly(8))
        writer.close()

    _all_released(_run(tmp_path, {"connections.max.idle.ms": "200"}, scenario))
    assert answered == [frame(b"\x00\x00\x00\x01")]


def test_a_client_that_never_reads_its_response_is_closed_when_idle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No byte out for connections.max.idle.ms while the broker waits to write is idle too."""

    async def scenario(server: BrokerServer, port: int) -> None:
        async def huge_response(frame_bytes: bytes) -> bytes:
            return frame(b"\x00" * (64 * 1024 * 1024))  # far more than the socket buffers hold

        monkeypatch.setattr(server.dispatcher, "handle_frame", huge_response)
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        of_type(writer.transport, asyncio.Transport).pause_reading()  # a deaf client
        writer.write(_api_versions_frame(1))
        await _until(lambda: server.memory_pool.reserved_bytes > 0)
        await _until(lambda: server.open_connections == 0)
        writer.close()

    _all_released(_run(tmp_path, {"connections.max.idle.ms": "300"}, scenario))
