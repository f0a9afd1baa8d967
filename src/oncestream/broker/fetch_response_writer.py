"""Writes a framed response to a client connection, the record sections of a Fetch with sendfile.

A zero-copy Fetch (handlers/fetch.py reads with ``zero_copy=True``) answers with buffers from
protocol/fetch_response.py in which each record section is a :class:`FileRange` over a segment
file. On a plaintext connection the writer sends the encoded pieces around them through the
transport and each range with ``os.sendfile`` straight from the page cache to the socket, so the
record bytes never enter the process. asyncio's ``loop.sendfile`` is not used: uvloop (the broker's
loop) does not implement it (``AbstractEventLoop.sendfile`` raises NotImplementedError), and
asyncio's own falls back to read-and-write where it cannot.

How the two paths share one socket without reordering bytes: before a range is sent the
transport's write buffer must be empty (uvloop writes at once, so it nearly always is; otherwise
the buffer limits drop to zero and the writer drains until it is), then ``os.sendfile`` runs on a
duplicate of the socket's descriptor (the transport owns the original, and an event loop refuses a
writer callback on a descriptor a transport uses). When the socket is full the writer waits for it
to become writable on the duplicate, checking once a second whether the connection was aborted
meanwhile (idle timeout, shutdown): the duplicate would keep an aborted socket open otherwise.

A TLS connection reaches this writer as a plaintext socket pair (broker/tls_pump.py: a thread
per connection encrypts), so its ranges are sent with sendfile as well. A transport without a
socket (or a platform without sendfile) has its ranges read into bytes and written through the
transport. Every range is closed once it is sent or when the write fails, so no segment file
stays open past its response.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from typing import Any

from oncestream.errors import StorageError
from oncestream.log.file_range import FileRange

# How often a writer blocked on a full socket looks whether its connection was aborted.
_ABORT_CHECK_S = 1.0


def frame_bytes(buffers: Sequence[Any]) -> bytes:
    """The whole response as one bytes object, file ranges read in and closed: for callers that
    need the frame itself rather than a socket to send it to (the handler's tests, debugging)."""
    out = bytearray()
    for buffer in buffers:
        if isinstance(buffer, FileRange):
            out += buffer.read()
            buffer.close()
        else:
            out += buffer
    return bytes(out)


def sendfile_possible(writer: asyncio.StreamWriter) -> bool:
    """Whether ``writer``'s connection can take ranges by sendfile: plaintext, a real socket."""
    if not hasattr(os, "sendfile") or writer.get_extra_info("ssl_object") is not None:
        return False
    sock = writer.get_extra_info("socket")
    return sock is not None and sock.fileno() >= 0


class ResponseWriter:
    """Writes one connection's responses in order; ``on_progress`` is called whenever sendfile
    moved bytes (the idle timer counts them as activity). ``close`` when the connection ends."""

    def __init__(self, writer: asyncio.StreamWriter, on_progress: Callable[[], None]) -> None:
        self._writer = writer
        self._on_progress = on_progress
        self._zero_copy = sendfile_possible(writer)
        self._socket_fd: int | None = None  # our duplicate of the socket's descriptor

    async def write(self, buffers: Sequence[Any]) -> None:
        """Write ``buffers`` in order. Without ranges (every response but a zero-copy Fetch) they
        go to the transport at once; the caller drains the transport afterwards either way."""
        if not any(type(b) is FileRange for b in buffers):
            self._writer.writelines(buffers)
            return
        await self._write_with_ranges(buffers)

    async def _write_with_ranges(self, buffers: Sequence[Any]) -> None:
        pending: list[bytes | memoryview] = []
        try:
            for buffer in buffers:
                if not isinstance(buffer, FileRange):
                    pending.append(buffer)
                elif not self._zero_copy:
                    pending.append(buffer.read())
                    buffer.close()
                else:
                    if pending:
                        self._writer.writelines(pending)
                        pending = []
                    await self._transport_flushed()
                    await self._sendfile(buffer)
                    buffer.close()
            if pending:
                self._writer.writelines(pending)
        finally:
            for buffer in buffers:
                if isinstance(buffer, FileRange):
                    buffer.close()

    async def _transport_flushed(self) -> None:
        transport = self._writer.transport
        if transport.get_write_buffer_size() == 0:
            return
        low, high = transport.get_write_buffer_limits()
        transport.set_write_buffer_limits(high=0, low=0)  # drain() now waits until it is empty
        try:
            await self._writer.drain()
        finally:
            transport.set_write_buffer_limits(high=high, low=low)
        if transport.get_write_buffer_size():
            raise ConnectionResetError("the connection closed while a fetch response was written")

    async def _sendfile(self, chunk: FileRange) -> None:
        if chunk.fd is None:
            raise StorageError(f"the fetched range of {chunk.path} was closed before it was sent")
        socket_fd = self._socket_fd
        if socket_fd is None:
            socket_fd = self._socket_fd = os.dup(self._writer.get_extra_info("socket").fileno())
        position, remaining = chunk.position, chunk.size_bytes
        while remaining:
            try:
                sent = os.sendfile(socket_fd, chunk.fd, position, remaining)
            except BlockingIOError:
                await self._writable(socket_fd)
                continue
            if sent == 0:
                raise StorageError(f"{chunk.path} ended {remaining} bytes short of a fetched range")
            position += sent
            remaining -= sent
            self._on_progress()

    async def _writable(self, socket_fd: int) -> None:
        loop = asyncio.get_running_loop()
        transport = self._writer.transport
        while True:
            if transport.is_closing():
                raise ConnectionResetError("the connection was closed during a zero-copy fetch response")
            ready: asyncio.Future[None] = loop.create_future()
            loop.add_writer(socket_fd, _set_done, ready)
            try:
                await asyncio.wait([ready], timeout=_ABORT_CHECK_S)
            finally:
                loop.remove_writer(socket_fd)
            if ready.done():
                return

    def close(self) -> None:
        """Release the socket duplicate (the transport closes the socket itself)."""
        fd, self._socket_fd = self._socket_fd, None
        if fd is not None:
            os.close(fd)


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
