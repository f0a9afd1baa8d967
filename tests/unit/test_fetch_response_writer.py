"""Zero-copy Fetch: file ranges sent with sendfile carry the bytes a copying read returns, in order
with the encoded pieces around them, also when retention deletes the segment mid-send."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import uvloop

from oncestream.broker.fetch_response_writer import ResponseWriter
from oncestream.log.config import LogConfig
from oncestream.log.file_range import FileRange
from oncestream.log.partition_log import PartitionLog
from tests.unit._batches import make_batch

BATCH_VALUE_BYTES = 256 * 1024
WAIT_S = 30.0

LOOPS: dict[str, Callable[[Coroutine[Any, Any, None]], None]] = {"uvloop": uvloop.run, "asyncio": asyncio.run}


def filled_log(tmp_path: Path, batches: int) -> PartitionLog:
    """One big batch per segment (old timestamps: retention.ms deletes all but the active one)."""
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=BATCH_VALUE_BYTES, retention_ms=1000), 0)
    for i in range(batches):
        log.append(make_batch(4, value_size=BATCH_VALUE_BYTES // 4, timestamp_ms=1_000 + i), 1_000 + i)
    log.flush()
    return log


def file_exists(path: str) -> bool:
    return os.path.exists(path)


def test_a_zero_copy_read_holds_the_bytes_a_copying_read_returns(tmp_path: Path) -> None:
    log = filled_log(tmp_path, 3)
    copied = log.read(0, 10 * BATCH_VALUE_BYTES)
    ranges = log.read(0, 10 * BATCH_VALUE_BYTES, zero_copy=True)
    assert ranges.chunks == []
    assert ranges.file_chunks is not None
    assert all(isinstance(chunk, FileRange) for chunk in ranges.file_chunks)
    assert sum(len(chunk) for chunk in ranges.file_chunks) == copied.size_bytes == ranges.size_bytes
    assert b"".join(c.read() for c in ranges.file_chunks if isinstance(c, FileRange)) == b"".join(copied.chunks)
    log.close()


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_a_segment_deleted_by_retention_mid_send_is_sent_whole(tmp_path: Path, loop_name: str) -> None:
    log = filled_log(tmp_path, 6)
    copied = log.read(0, 10 * BATCH_VALUE_BYTES).chunks
    ranges = log.read(0, 10 * BATCH_VALUE_BYTES, zero_copy=True).file_chunks
    assert ranges is not None
    assert len(ranges) >= 5  # one range per segment
    paths = [chunk.path for chunk in ranges if isinstance(chunk, FileRange)]
    # Encoded pieces between the ranges, larger than the socket buffers: the transport buffers
    # them, and the next range must wait until they are out (bytes stay in order).
    between = [bytes([65 + i]) * 100_000 for i in range(len(ranges))]
    buffers: list[object] = [b"HEAD"]
    expected = b"HEAD"
    for chunk, copy, piece in zip(ranges, copied, between, strict=True):
        buffers += [chunk, piece]
        expected += copy + piece
    received = bytearray()

    async def scenario() -> None:
        send_done = asyncio.Event()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 * 1024)
            responses = ResponseWriter(writer, lambda: None)
            try:
                await responses.write([*buffers, b"TAIL"])
                await writer.drain()
            finally:
                responses.close()
                send_done.set()
                writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        client.setblocking(False)
        loop = asyncio.get_running_loop()
        await asyncio.wait_for(loop.sock_connect(client, ("127.0.0.1", port)), WAIT_S)
        # Read a first part only: the rest of the six segments cannot fit in the socket buffers.
        while len(received) < BATCH_VALUE_BYTES // 2:
            received.extend(await asyncio.wait_for(loop.sock_recv(client, 65536), WAIT_S))
        assert not send_done.is_set()
        deleted = log.apply_retention(10**12)
        assert deleted >= 5
        assert not any(file_exists(path) for path in paths[:deleted])
        while True:
            data = await asyncio.wait_for(loop.sock_recv(client, 65536), WAIT_S)
            if not data:
                break
            received.extend(data)
        client.close()
        await asyncio.wait_for(send_done.wait(), WAIT_S)
        server.close()
        await server.wait_closed()

    LOOPS[loop_name](scenario())
    assert bytes(received) == expected + b"TAIL"
    assert all(chunk.fd is None for chunk in ranges if isinstance(chunk, FileRange))  # closed once sent
    log.close()


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_a_send_blocked_on_a_client_that_stopped_reading_ends_when_the_connection_is_aborted(
    tmp_path: Path, loop_name: str
) -> None:
    """What the idle timeout and shutdown do (transport.abort()): the writer's own duplicate of
    the socket must not keep the send, or the socket, alive."""
    log = filled_log(tmp_path, 6)
    ranges = log.read(0, 10 * BATCH_VALUE_BYTES, zero_copy=True).file_chunks
    assert ranges is not None
    outcome: list[BaseException | None] = []

    async def scenario() -> None:
        blocked = asyncio.Event()
        ended = asyncio.Event()
        server_writers: list[asyncio.StreamWriter] = []

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            server_writers.append(writer)
            writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 * 1024)
            responses = ResponseWriter(writer, blocked.set)  # progress: the send has started
            try:
                await responses.write(ranges)
                outcome.append(None)
            except ConnectionError as exc:
                outcome.append(exc)
            finally:
                responses.close()
                ended.set()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        client.setblocking(False)
        loop = asyncio.get_running_loop()
        await asyncio.wait_for(loop.sock_connect(client, ("127.0.0.1", port)), WAIT_S)
        await asyncio.wait_for(blocked.wait(), WAIT_S)
        # The client reads nothing, so the 1.5 MB cannot all go out: abort the server side.
        server_writers[0].transport.abort()
        await asyncio.wait_for(ended.wait(), WAIT_S)
        deadline = loop.time() + WAIT_S
        # The peer sees the connection end (reset or EOF) once the writer let its duplicate go.
        while loop.time() < deadline:
            try:
                data = await asyncio.wait_for(loop.sock_recv(client, 1 << 20), WAIT_S)
            except ConnectionResetError:
                break
            if not data:
                break
        client.close()
        server.close()
        await server.wait_closed()

    LOOPS[loop_name](scenario())
    assert len(outcome) == 1
    assert isinstance(outcome[0], ConnectionError)
    assert all(chunk.fd is None for chunk in ranges if isinstance(chunk, FileRange))
    log.close()
