"""The connection reader (broker/frame_reader.py) gives back exactly the bytes sent, in order,
whatever the frame sizes and however the sender cuts them; large frames arrive in place (a
read-only view of the buffer the socket was read into); end of stream mid-frame is an
IncompleteReadError; every arrival counts as activity. Real socket pairs, on asyncio's own loop
and on uvloop (the broker's), which take the buffered-protocol path by different code."""

from __future__ import annotations

import asyncio
import functools
import random
import socket
import struct
from collections.abc import Awaitable, Callable

import pytest
import uvloop

from oncestream.broker.connection_limits import IdleTracker
from oncestream.broker.frame_reader import (
    DIRECT_READ_MIN_BYTES,
    STAGING_BYTES,
    FrameProtocol,
    FrameReader,
    staging_buffer,
)

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
WAIT_CAP_S = 30.0  # a cap on a test that would otherwise hang, never a speed claim


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _run_on(loop_name: str, main: Callable[[], Awaitable[None]]) -> None:
    """Run ``main()`` to its end on a fresh event loop of kind ``loop_name``."""
    loop = LOOPS[loop_name]()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


async def _attach(reader: FrameReader) -> socket.socket:
    """Serve one end of a socket pair with ``reader``, attached as the server attaches a
    connection; the other end (non-blocking) is the client's socket."""
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    connected = asyncio.Event()

    async def on_connection(_r: asyncio.StreamReader, _w: asyncio.StreamWriter) -> None:
        connected.set()

    await loop.connect_accepted_socket(functools.partial(FrameProtocol, reader, on_connection, loop), ours)
    await asyncio.wait_for(connected.wait(), WAIT_CAP_S)
    return theirs


def _serve(loop_name: str, scenario: Callable[[FrameReader, socket.socket, IdleTracker], Awaitable[None]]) -> None:
    """Run ``scenario`` with a FrameReader serving one connection and that connection's client socket."""

    async def main() -> None:
        clock = [0.0]
        idle = IdleTracker(60_000, 0.0)
        reader = FrameReader(idle, lambda: clock.__setitem__(0, clock[0] + 1) or clock[0],
                             asyncio.get_running_loop(), staging_buffer())
        client = await _attach(reader)
        try:
            await asyncio.wait_for(scenario(reader, client, idle), WAIT_CAP_S)
        finally:
            client.close()

    _run_on(loop_name, main)


async def _send_in_pieces(sock: socket.socket, data: bytes, rng: random.Random) -> None:
    loop = asyncio.get_running_loop()
    view = memoryview(data)
    while view:
        piece = rng.choice((1, 3, 4, 7, 100, 4096, 65_000, 300_000))
        await loop.sock_sendall(sock, view[:piece])
        view = view[piece:]
        if rng.random() < 0.3:
            await asyncio.sleep(0)


async def _read_frame(reader: FrameReader) -> bytes | memoryview:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return await reader.readexactly(size)


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
@pytest.mark.parametrize("seed", range(4))
def test_frames_of_every_size_come_back_exactly_and_in_order(loop_name: str, seed: int) -> None:
    rng = random.Random(seed)
    sizes = [rng.choice((10, 200, STAGING_BYTES - 3, DIRECT_READ_MIN_BYTES - 1, DIRECT_READ_MIN_BYTES,
                         DIRECT_READ_MIN_BYTES + 1, 300_000, 1_048_576, 3_000_000)) for _ in range(25)]
    payloads = [rng.randbytes(size) for size in sizes]
    stream = b"".join(_frame(p) for p in payloads)

    async def scenario(reader: FrameReader, client: socket.socket, _idle: IdleTracker) -> None:
        sender = asyncio.create_task(_send_in_pieces(client, stream, rng))
        for expected in payloads:
            got = await _read_frame(reader)
            assert bytes(got) == expected
            if rng.random() < 0.5:
                await asyncio.sleep(0.001)  # a handler at work: the transport reads ahead meanwhile
        await sender

    _serve(loop_name, scenario)


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_a_large_frame_arrives_in_place_and_read_only(loop_name: str) -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB

    async def scenario(reader: FrameReader, client: socket.socket, _idle: IdleTracker) -> None:
        sender = asyncio.create_task(asyncio.get_running_loop().sock_sendall(client, _frame(payload)))
        got = await _read_frame(reader)
        await sender
        assert isinstance(got, memoryview)
        assert got.readonly
        assert isinstance(got.obj, bytearray)  # the buffer the socket was read into
        assert len(got.obj) == len(payload)
        assert got == payload
        with pytest.raises(TypeError):
            got[0] = 1  # read-only: nothing may change a request being handled

    _serve(loop_name, scenario)


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_end_of_stream_in_a_large_frame_is_an_incomplete_read(loop_name: str) -> None:
    payload = b"x" * (DIRECT_READ_MIN_BYTES * 3)

    async def scenario(reader: FrameReader, client: socket.socket, _idle: IdleTracker) -> None:
        sent = _frame(payload)[: 4 + DIRECT_READ_MIN_BYTES * 2]
        await asyncio.get_running_loop().sock_sendall(client, sent)
        client.shutdown(socket.SHUT_WR)
        with pytest.raises(asyncio.IncompleteReadError) as caught:
            await _read_frame(reader)
        assert caught.value.partial == payload[: DIRECT_READ_MIN_BYTES * 2]
        assert caught.value.expected == len(payload)

    _serve(loop_name, scenario)


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_bytes_arriving_in_a_large_frame_count_as_activity(loop_name: str) -> None:
    payload = b"y" * (DIRECT_READ_MIN_BYTES * 4)

    async def scenario(reader: FrameReader, client: socket.socket, idle: IdleTracker) -> None:
        loop = asyncio.get_running_loop()
        data = _frame(payload)
        read = asyncio.create_task(_read_frame(reader))
        await loop.sock_sendall(client, data[: 4 + DIRECT_READ_MIN_BYTES])
        await asyncio.sleep(0.1)  # the first part arrives (no reader waits on anything else)
        seen = idle.last_activity_ms
        assert seen > 0
        await loop.sock_sendall(client, data[4 + DIRECT_READ_MIN_BYTES:])
        assert bytes(await read) == payload
        assert idle.last_activity_ms > seen  # the frame's later bytes moved the clock on

    _serve(loop_name, scenario)


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_read_ahead_stops_while_nobody_reads(loop_name: str) -> None:
    """While a request is handled the transport reads ahead only a bounded amount; the rest of the
    next frames waits in the kernel (to be read in place), and nothing is lost."""
    payloads = [bytes([i]) * 1_048_576 for i in range(4)]

    async def scenario(reader: FrameReader, client: socket.socket, _idle: IdleTracker) -> None:
        sender = asyncio.create_task(asyncio.get_running_loop().sock_sendall(
            client, b"".join(_frame(p) for p in payloads)))
        await asyncio.sleep(0.2)  # nobody reads: the transport must pause
        assert len(reader._buffer) <= 2 * reader._limit + STAGING_BYTES  # the bound itself
        for expected in payloads:
            assert bytes(await _read_frame(reader)) == expected
        await sender

    _serve(loop_name, scenario)


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_connections_sharing_the_loops_staging_buffer_keep_their_own_bytes(loop_name: str) -> None:
    """Every connection of a loop reads through one staging buffer: interleaved arrivals on
    several connections never mix their bytes."""
    rng = random.Random(7)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        staging = staging_buffer()
        readers, clients = [], []
        for _ in range(3):
            reader = FrameReader(IdleTracker(60_000, 0.0), lambda: 1.0, loop, staging)
            readers.append(reader)
            clients.append(await _attach(reader))
        payloads = [[rng.randbytes(rng.choice((5, 900, 20_000, 70_000, 200_000))) for _ in range(30)] for _ in clients]
        senders = [asyncio.create_task(_send_in_pieces(client, b"".join(_frame(p) for p in mine), rng))
                   for client, mine in zip(clients, payloads, strict=True)]

        async def read_all(reader: FrameReader, mine: list[bytes]) -> None:
            for expected in mine:
                assert bytes(await _read_frame(reader)) == expected

        try:
            await asyncio.wait_for(asyncio.gather(
                *senders, *(read_all(r, mine) for r, mine in zip(readers, payloads, strict=True))), WAIT_CAP_S)
        finally:
            for client in clients:
                client.close()

    _run_on(loop_name, main)
