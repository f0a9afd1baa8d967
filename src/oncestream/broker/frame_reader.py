"""Reading a connection's request frames: large frames are received straight into their buffer.

Why not asyncio's StreamReader alone: its bytes take three copies in user space before a handler
sees them. The transport reads into a buffer of its own and hands a new ``bytes`` to
``data_received`` (one), the reader appends it to its ``bytearray`` (two, plus the copies of that
array as it grows and shrinks) and ``readexactly`` copies the frame out (three). A Produce request
of 1 MiB paid all three: ``memmove`` was a fifth of the broker's CPU on a 1 KiB produce benchmark
(``perf``, issue 27). Here the connection's protocol is an ``asyncio.BufferedProtocol`` (uvloop and
asyncio both read straight into the buffer it offers): while a ``readexactly`` of at least
``DIRECT_READ_MIN_BYTES`` waits, the socket is read into the frame's own ``bytearray``, which is
what the caller gets. Smaller reads (size prefixes, most requests other than Produce) go through
a small staging buffer into the StreamReader's buffer as before, so requests sent back to back
still arrive in one system call.

Everything else of StreamReader is kept: end of stream, errors, the pause of the transport when
unread bytes pass twice the limit, and the connection's idle tracker sees every byte that
arrives (a client trickling a frame in is active).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from oncestream.broker.connection_limits import IdleTracker

# The StreamReader's buffer limit: it stops reading the socket at twice this much unread data.
# Small on purpose: while a request is handled nobody waits in ``readexactly``, and whatever the
# transport reads ahead then goes through the staging copy; paused, the next frame stays in the
# kernel until its ``readexactly`` can take it in place (a pause and a resume per large frame, two
# cheap system calls, against copying up to 2 MiB twice). It also bounds what a connection holds
# that the memory pool has not accounted for.
READ_BUFFER_LIMIT_BYTES = 16 * 1024
# A frame at least this large is received straight into its own buffer. Below it the staging
# copy costs less than the extra system call of reading a frame on its own.
DIRECT_READ_MIN_BYTES = 64 * 1024
# What one read takes when no large frame is waiting: several small requests at once, and at most
# this much of a large frame's start (copied twice: into the reader's buffer, then the frame).
STAGING_BYTES = 64 * 1024


def staging_buffer() -> memoryview:
    """A staging buffer for the readers of one event loop. One per loop, not per connection: a
    transport hands ``buffer_updated`` the bytes it just read before it reads for any other
    connection, and the reader copies them out at once, so the connections of a loop can share it
    (as uvloop shares its own read buffer) and an idle connection costs no 64 KiB."""
    return memoryview(bytearray(STAGING_BYTES))


class FrameReader(asyncio.StreamReader):
    """A StreamReader fed through ``get_buffer``/``buffer_updated`` (see the module docstring);
    ``readexactly(n)`` for ``n >= DIRECT_READ_MIN_BYTES`` returns a read-only ``memoryview`` of the
    ``bytearray`` the socket was read into, not a copy.

    It relies on StreamReader's own state (``_buffer``, ``_eof``, ``_exception``, ``_limit``,
    ``_wakeup_waiter``, ``_wait_for_data``: the same in CPython 3.11 to 3.13), declared below for
    the type checker, which typeshed leaves out; tests/unit/test_broker_frame_reader.py runs it on
    both event loops."""

    _buffer: bytearray
    _eof: bool
    _exception: BaseException | None
    _limit: int
    if TYPE_CHECKING:
        def _wakeup_waiter(self) -> None: ...
        async def _wait_for_data(self, func_name: str) -> None: ...

    def __init__(self, idle: IdleTracker, clock_ms: Callable[[], float], loop: asyncio.AbstractEventLoop,
                 staging: memoryview) -> None:
        """``staging``: the loop's ``staging_buffer()``, shared by its connections."""
        super().__init__(limit=READ_BUFFER_LIMIT_BYTES, loop=loop)
        self._idle = idle
        self._clock_ms = clock_ms
        self._staging = staging
        self._target: bytearray | None = None  # the frame being received directly
        self._filled = 0  # bytes of the target already received

    def get_buffer(self, sizehint: int) -> memoryview:
        """Where the transport reads next: the rest of the frame being received, else the staging buffer."""
        if self._target is not None:
            return memoryview(self._target)[self._filled:]
        return self._staging

    def buffer_updated(self, nbytes: int) -> None:
        """``nbytes`` arrived in the buffer ``get_buffer`` gave out."""
        self._idle.activity(self._clock_ms())
        if self._target is not None:
            self._filled += nbytes
            if self._filled == len(self._target):
                self._target = None  # complete: what arrives next is the next frame's
                self._wakeup_waiter()
            return
        self.feed_data(self._staging[:nbytes])  # extends a bytearray: any buffer will do

    async def readexactly(self, n: int) -> bytes:
        """Read exactly ``n`` bytes (``asyncio.StreamReader.readexactly``'s contract); a large
        frame arrives straight into a ``bytearray``, returned as a read-only view of it."""
        if n < DIRECT_READ_MIN_BYTES or len(self._buffer) >= n or self._exception is not None or self._eof:
            return await super().readexactly(n)
        frame = bytearray(n)
        have = len(self._buffer)
        frame[:have] = self._buffer
        self._buffer.clear()
        self._target, self._filled = frame, have
        try:
            while self._target is frame:
                if self._exception is not None:
                    raise self._exception
                if self._eof:
                    raise asyncio.IncompleteReadError(bytes(frame[: self._filled]), n)
                await self._wait_for_data("readexactly")
        finally:
            self._target = None
        # Read-only as a bytes object is: the protocol codec (kio) refuses writable buffers, and
        # nothing may change a request while handlers hold slices of it.
        return memoryview(frame).toreadonly()  # type: ignore[return-value]  # a bytes-like frame


class FrameProtocol(asyncio.BufferedProtocol):
    """The connection's protocol: bytes go to a ``FrameReader`` through the buffered-protocol
    interface; everything else (the writer, its flow control, end of stream, connection loss) is
    an ``asyncio.StreamReaderProtocol``'s. Composed, not inherited: uvloop reads straight into
    ``get_buffer`` only for a protocol that is not an ``asyncio.Protocol``, and StreamReaderProtocol
    is one (it would then be given ``data_received`` copies instead)."""

    def __init__(self, reader: FrameReader,
                 connected: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
                 loop: asyncio.AbstractEventLoop) -> None:
        self._streams = asyncio.StreamReaderProtocol(reader, connected, loop=loop)
        self._frames = reader

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._streams.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._streams.connection_lost(exc)

    def eof_received(self) -> bool | None:
        return self._streams.eof_received()

    def pause_writing(self) -> None:
        self._streams.pause_writing()

    def resume_writing(self) -> None:
        self._streams.resume_writing()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._frames.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self._frames.buffer_updated(nbytes)
