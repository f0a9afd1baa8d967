"""TLS off the event loop: a thread per TLS connection owns its socket and its SSL object.

A TLS listener's socket is accepted on the event loop (a non-blocking ``accept`` is cheap); the
accepted TCP socket goes at once to a ``TlsPump`` thread, which runs the handshake, then moves
bytes between the TLS socket and one end of a ``socket.socketpair()``: records read from the
client are decrypted into the pair, plaintext the broker writes into the pair is encrypted to the
client. The event loop serves the pair's other end exactly as a plaintext connection, so it never
calls into ``ssl`` for a TLS connection, and a zero-copy Fetch ``sendfile``s its record bytes
into the pair (the thread then encrypts them). ``SSL_read`` and ``SSL_write`` of one connection
run only on its own thread, never concurrently (OpenSSL does not allow that on one SSL object).
CPython releases the GIL inside those calls and inside every socket call, so encryption runs
beside the loop on the other core. Why a thread that owns the whole byte path and not just the
cipher: docs/benchmarks.md, "TLS off the event loop".

What the connection handler learns of TLS comes in a ``ConnectionOrigin`` (peer address, verified
client certificate, SNI name, cipher and version), handed over with the pair's end once the
handshake succeeded: a failed or timed-out handshake never reaches the event loop.

Closing: when the broker closes its end, the thread writes out what the broker wrote before
(at most ``linger_s`` long, a client that stopped reading must not hold the thread) and closes the
TLS connection; when the client closes or the TLS connection fails, the thread hands the broker
what was decrypted before, shuts the pair's write side (the broker reads end-of-stream) and closes
once the broker has closed its end. Whatever ends the thread (also a bug) closes both sockets,
so the broker sees the connection end.

Who moves the bytes once the handshake is done: a ``BytePump``. The shipped one is the C pump
(``oncestream._native.tls_pump``, see its source): the same rules as the Python ``_Pump`` below,
but the thread releases the GIL once for the whole connection instead of once per TLS record and
socket call, so the event loop never waits to hand the GIL over to a pump thread, and it hands
the broker whole Kafka frames (a 1 MiB request arrives as hundreds of TLS records, each of which
would wake the loop and resume the connection's ``readexactly``). It drives the
SSL object of the very ``ssl.SSLObject`` that ran the handshake, so the handshake, the context's
settings and the ``ConnectionOrigin`` are Python's on both paths. ``default_byte_pump()`` uses it
when the extension is built and its guards accept this Python (CPython's private ``_SSLSocket``
layout known, the same libssl loaded) and ``ONCESTREAM_NATIVE`` is not ``0``; otherwise, and for
any SSL object the C code refuses, the Python pump runs. A listener may be given either
(``TlsListener(byte_pump=...)``, ``BrokerSeams.tls_byte_pump``).

What a TLS connection costs beyond a plaintext one: a thread, a socket pair and a 256 KiB
scratch buffer (pages are touched only as far as data fills them; the C pump's buffers grow to
what is pending, at most 2 MiB each way). Connection limits count a
connection once its handshake is done, as before; connections still in their handshake are bounded
only by the handshake timeout (asyncio's transports were not bounded otherwise either).
"""

from __future__ import annotations

import _ssl
import asyncio
import collections
import functools
import logging
import os
import selectors
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

try:
    from oncestream._native import tls_pump as _native
except ImportError:  # not built (no compiler or no OpenSSL headers): the Python pump moves the bytes
    _native = None  # type: ignore[assignment]

log = logging.getLogger("oncestream.broker.tls")

# Bytes taken from a socket per call: from the client, every record that has arrived; from the
# pair, 256 KiB is one SSL_write of 16 records (the GIL is released for all of them).
_PLAIN_CHUNK_BYTES = 256 * 1024
_TLS_CHUNK_BYTES = 64 * 1024  # a handshake flight
# Decrypted bytes the broker has not taken yet: past this the thread stops reading the client
# (the kernel's buffers then push back on it, as on a plaintext connection).
_PENDING_PLAIN_HIGH_BYTES = 1024 * 1024
# Kernel buffers of the socket pair: a zero-copy Fetch sendfiles into it, a larger buffer means
# fewer wake-ups of the thread per response.
_PAIR_BUFFER_BYTES = 1024 * 1024
# The interpreter's GIL switch interval in a broker with a TLS listener (CPython's default: 5 ms).
# A pump thread gives the GIL up in every socket and SSL call and must win it back from an event
# loop that runs Python for milliseconds at a time; at 5 ms each such wait delayed a produce
# request's bytes so much that TLS produce ran at about half its old pace, at 0.5 ms it was
# back above it (docs/benchmarks.md, "TLS off the event loop").
TLS_SWITCH_INTERVAL_S = 0.0005
# A pump waiting on neither socket looks again after this long (and whether it was aborted).
_NOTHING_AWAITED_S = 1.0
_LISTEN_BACKLOG = 100  # asyncio's create_server default

# SNI names by TLS socket, written by the context's servername callback during the handshake
# (on the pump's thread) and read by the same thread after it.
_server_names: weakref.WeakKeyDictionary[object, str] = weakref.WeakKeyDictionary()


def _record_server_name(ssl_socket: object, server_name: str | None, _context: ssl.SSLContext) -> None:
    if server_name is not None:
        _server_names[ssl_socket] = server_name


@dataclass(frozen=True)
class TlsIdentity:
    """What the TLS handshake established about one client connection."""

    # getpeercert() of the client's certificate: decoded only when it was verified, which the
    # context's verify mode guarantees for every certificate a client managed to present.
    peer_certificate: Mapping[str, Any] | None
    server_name: str | None  # SNI, when the client sent one
    cipher: str | None
    version: str | None  # "TLSv1.3", ...


@dataclass(frozen=True)
class ConnectionOrigin:
    """How a connection reached the broker: the client's address and, over TLS, its identity.
    Passed to the connection handler explicitly (a TLS connection's transport is a socket pair
    and knows neither)."""

    peer: object  # (host, port, ...) as ``getpeername()`` gives it
    tls: TlsIdentity | None = None


class BytePump(Protocol):
    """Moves one established TLS connection's bytes until the connection ends (``run``, on the
    connection's thread); ``abort`` (any thread) asks it to end, then the TCP socket is shut down."""

    def run(self) -> object: ...

    def abort(self) -> None: ...


# Builds the pump of one connection: (its TLS state after the handshake, the client's TCP socket,
# our end of the broker's socket pair, linger_s); both sockets are non-blocking.
BytePumpFactory = Callable[["TlsState", socket.socket, socket.socket, float], BytePump]

# Hands a pair's end and its origin to the event loop; False: it cannot (the loop has closed).
Deliver = Callable[[socket.socket, ConnectionOrigin], bool]
# What the listener does with an established connection, on the event loop.
OnConnection = Callable[[socket.socket, ConnectionOrigin], None]


class TlsPump:
    """One TLS connection's thread: handshake, then the byte pump between the TLS socket and the
    broker's socket pair. ``deliver(pair_end, origin)`` is called (on this thread) once the
    handshake succeeded; it hands ``pair_end`` to the event loop, or returns False."""

    def __init__(self, raw: socket.socket, peer: object, context: ssl.SSLContext, *,
                 handshake_timeout_s: float, linger_s: float, deliver: Deliver,
                 on_exit: Callable[[TlsPump], None] = lambda _pump: None,
                 byte_pump: BytePumpFactory | None = None) -> None:
        self.raw = raw
        self.peer = peer
        self._context = context
        self._handshake_timeout_s = handshake_timeout_s
        self._linger_s = linger_s
        self._deliver = deliver
        self._on_exit = on_exit
        self._byte_pump = byte_pump or default_byte_pump()
        self._mover: BytePump | None = None
        self._ours: socket.socket | None = None  # our end of the pair, once made
        self._closing = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"tls-pump {peer}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def abort(self) -> None:
        """Cut the connection from another thread (shutdown): the thread's next socket call
        fails and it ends, closing both sockets.

        Both sockets are shut, not only the TCP one: a pump that was mid-transfer when the flag
        was set may read the TCP socket's end-of-stream itself, take it for the client's close and
        then wait on the pair alone (for the broker to close); the pair's hang-up wakes that wait."""
        self._closing.set()
        mover = self._mover
        if mover is not None:
            mover.abort()
        for sock in (self.raw, self._ours):
            if sock is None:
                continue
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed

    def _run(self) -> None:
        try:
            tls = self._handshake()
            if tls is None:
                return
            ours, theirs = socket.socketpair()
            self._ours = ours  # abort() shuts it too; the finally below closes it
            for end in (ours, theirs):
                end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _PAIR_BUFFER_BYTES)
                end.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _PAIR_BUFFER_BYTES)
            try:
                delivered = self._deliver(theirs, ConnectionOrigin(self.peer, _identity_of(tls.obj)))
            except Exception:
                theirs.close()
                raise
            if not delivered:
                theirs.close()
                return
            self.raw.setblocking(False)
            ours.setblocking(False)
            self._mover = self._byte_pump(tls, self.raw, ours, self._linger_s)
            if not self._closing.is_set():  # else abort() ran before the mover existed
                self._mover.run()
        except Exception:  # a bug here must still close the connection (finally) and not pass unseen
            log.exception("TLS connection of %s failed", self.peer)
        finally:
            if self._ours is not None:
                self._ours.close()
            self.raw.close()
            self._on_exit(self)

    def _handshake(self) -> TlsState | None:
        """The server handshake over the blocking socket, bounded by the handshake timeout."""
        tls = TlsState(self._context)
        deadline_s = time.monotonic() + self._handshake_timeout_s
        try:
            while True:
                try:
                    tls.obj.do_handshake()
                    done = True
                except ssl.SSLWantReadError:
                    done = False
                pending = tls.outgoing.read()
                if pending:  # the server's flight (or an alert on failure: sent before it raises)
                    self.raw.settimeout(max(deadline_s - time.monotonic(), 0.001))
                    self.raw.sendall(pending)
                if done:
                    break
                self.raw.settimeout(max(deadline_s - time.monotonic(), 0.001))
                data = self.raw.recv(_TLS_CHUNK_BYTES)
                if not data:
                    raise ConnectionResetError("the client closed during the TLS handshake")
                tls.incoming.write(data)
        except (OSError, ValueError) as exc:  # ssl.SSLError, timeouts and resets are OSErrors
            # A plaintext client on a TLS port, an untrusted or missing client certificate: this
            # socket closes, the broker serves everyone else (asyncio logged these at debug too).
            if isinstance(exc, ssl.SSLError):
                _send_what_is_left(tls, self.raw)  # the alert tells the client why
            log.debug("TLS handshake with %s failed: %s", self.peer, exc)
            return None
        if self._closing.is_set():
            return None
        return tls


@dataclass
class TlsState:
    """One connection's SSL object and its memory BIOs (ciphertext in from the client, out to it)."""

    obj: ssl.SSLObject
    incoming: ssl.MemoryBIO
    outgoing: ssl.MemoryBIO

    def __init__(self, context: ssl.SSLContext) -> None:
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = context.wrap_bio(self.incoming, self.outgoing, server_side=True)


def _send_what_is_left(tls: TlsState, raw: socket.socket) -> None:
    """Best effort, never blocking: what the SSL object still has for the client (an alert)."""
    pending = tls.outgoing.read()
    if pending:
        try:
            raw.setblocking(False)
            raw.send(pending)
        except OSError:
            pass


def _identity_of(tls: ssl.SSLObject) -> TlsIdentity:
    cipher = tls.cipher()
    return TlsIdentity(peer_certificate=tls.getpeercert() or None, server_name=_server_names.pop(tls, None),
                       cipher=cipher[0] if cipher else None, version=tls.version())


class _Pump:
    """The byte pump of one established TLS connection (non-blocking sockets, one selector).

    Ciphertext moves between the TCP socket and the SSL object's memory BIOs in large reads and
    writes (one ``recv`` takes every record that has arrived; OpenSSL then decrypts them from
    memory without a system call per record); plaintext moves between the SSL object and the
    broker's socket pair. Each round tries every transfer that may make progress until none does,
    then waits for what the blocked ones wait for."""

    def __init__(self, tls: TlsState, raw: socket.socket, ours: socket.socket, linger_s: float) -> None:
        self.tls = tls
        self.raw = raw
        self.ours = ours
        self.linger_s = linger_s
        self.closing = threading.Event()
        self.scratch = bytearray(_PLAIN_CHUNK_BYTES)  # one recv's bytes, from either socket
        self.to_plain = bytearray()  # decrypted, not yet written into the pair
        self.to_raw = _Outbox()  # encrypted, not yet sent to the client
        self.client_open = True  # the client may still send
        self.broker_open = True  # the broker may still write into the pair
        self.pair_shut = False  # our write side of the pair is shut (the broker read end-of-stream)
        # What each socket may be ready for: cleared when a call would block, set again when the
        # selector reports it, so a round makes no system call that is known to fail (each
        # one releases and retakes the GIL, which the event loop thread is competing for).
        self.raw_ready = self.ours_ready = selectors.EVENT_READ | selectors.EVENT_WRITE

    def abort(self) -> None:
        """End at the next wake-up (the caller's shutdown of the TCP socket wakes it)."""
        self.closing.set()

    def run(self) -> None:
        selector = _Interest()
        try:
            linger_until_s: float | None = None
            while not self.closing.is_set():
                raw_events, ours_events = self._transfer()
                if not self.broker_open and not self.to_raw:
                    self._close_notify()
                    return  # the broker closed and everything it wrote went out
                if not self.client_open and not self.to_plain:
                    if not self.pair_shut:
                        self.ours.shutdown(socket.SHUT_WR)  # the broker reads end-of-stream
                        self.pair_shut = True
                    if not self.broker_open:
                        return
                    raw_events = 0  # nothing more goes to the client: wait for the broker to close
                    ours_events = selectors.EVENT_READ
                timeout_s = None
                if not self.broker_open:  # flushing to a client that may have stopped reading
                    now_s = time.monotonic()
                    linger_until_s = linger_until_s or now_s + self.linger_s
                    if now_s >= linger_until_s:
                        return
                    timeout_s = linger_until_s - now_s
                selector.set(self.raw, raw_events)
                selector.set(self.ours, ours_events)
                for sock, events in selector.wait(timeout_s):
                    if sock is self.raw:
                        self.raw_ready |= events
                    else:
                        self.ours_ready |= events
        finally:
            selector.close()

    def _client_gone(self) -> None:
        self.client_open = False
        self.to_raw.clear()

    def _transfer(self) -> tuple[int, int]:
        """Move bytes until nothing moves; returns the events each socket waits for."""
        tls = self.tls
        view = memoryview(self.scratch)
        while True:
            progress = False
            raw_events = ours_events = 0
            if self.client_open and not tls.incoming.eof and len(self.to_plain) < _PENDING_PLAIN_HIGH_BYTES:
                if not self.raw_ready & selectors.EVENT_READ:
                    raw_events |= selectors.EVENT_READ
                else:
                    try:
                        size = self.raw.recv_into(view, _PLAIN_CHUNK_BYTES)
                    except BlockingIOError:
                        self.raw_ready &= ~selectors.EVENT_READ
                        raw_events |= selectors.EVENT_READ
                    except OSError:  # reset: what already arrived is still decrypted below
                        tls.incoming.write_eof()
                        progress = True
                    else:
                        if size:
                            tls.incoming.write(view[:size])
                        else:
                            tls.incoming.write_eof()
                        progress = True
            # Every record that has arrived is decrypted before the broker is handed any: one
            # wake-up of the event loop per batch, not per record.
            while self.client_open and tls.incoming.pending and len(self.to_plain) < _PENDING_PLAIN_HIGH_BYTES:
                try:
                    size = tls.obj.read(_PLAIN_CHUNK_BYTES, view)  # type: ignore[assignment]  # int with a buffer
                except ssl.SSLWantReadError:
                    break  # a partial record: the rest is still on its way
                except (ssl.SSLError, ValueError):  # EOF without close_notify, a bad record, an alert
                    self.client_open = False
                    break
                if not size:  # close_notify
                    self.client_open = False
                    break
                self.to_plain += view[:size]
                progress = True
            if self.client_open and tls.incoming.eof and not tls.incoming.pending:
                self.client_open = False  # the TCP stream ended (at a record boundary)
            if self.to_plain:
                if not self.ours_ready & selectors.EVENT_WRITE:
                    ours_events |= selectors.EVENT_WRITE
                else:
                    try:
                        sent = self.ours.send(self.to_plain)
                    except BlockingIOError:
                        self.ours_ready &= ~selectors.EVENT_WRITE
                        ours_events |= selectors.EVENT_WRITE
                    except OSError:  # the broker closed its end: nothing more goes to it
                        self.to_plain.clear()
                        self.broker_open = False
                    else:
                        del self.to_plain[:sent]
                        progress = True
            if self.broker_open and self.to_raw.size_bytes < _PENDING_PLAIN_HIGH_BYTES:
                if not self.ours_ready & selectors.EVENT_READ:
                    ours_events |= selectors.EVENT_READ
                else:
                    try:
                        size = self.ours.recv_into(view, _PLAIN_CHUNK_BYTES)
                    except BlockingIOError:
                        self.ours_ready &= ~selectors.EVENT_READ
                        ours_events |= selectors.EVENT_READ
                    except OSError:
                        self.broker_open = False
                    else:
                        if not size:
                            self.broker_open = False
                        elif self.client_open:
                            tls.obj.write(view[:size])  # into memory: never blocks
                            progress = True
                        # else: the client is gone and what the broker writes has nowhere to go
            if tls.outgoing.pending:  # written records, and what reads produced (key updates)
                if self.client_open:
                    self.to_raw.append(tls.outgoing.read())
                else:
                    tls.outgoing.read()
            if self.to_raw:
                if not self.raw_ready & selectors.EVENT_WRITE:
                    raw_events |= selectors.EVENT_WRITE
                else:
                    try:
                        sent = self.raw.send(self.to_raw.head())
                    except BlockingIOError:
                        self.raw_ready &= ~selectors.EVENT_WRITE
                        raw_events |= selectors.EVENT_WRITE
                    except OSError:  # the client is gone
                        self._client_gone()
                    else:
                        self.to_raw.consume(sent)
                        progress = True
            if not progress:
                return raw_events, ours_events

    def _close_notify(self) -> None:
        """Send close_notify if the socket takes it now; the peer's is not awaited (Kafka does not)."""
        try:
            self.tls.obj.unwrap()
        except (ssl.SSLError, ValueError):
            pass  # SSLWantReadError: our close_notify is written, the peer's not awaited
        if self.client_open:
            _send_what_is_left(self.tls, self.raw)


def python_byte_pump(tls: TlsState, raw: socket.socket, ours: socket.socket, linger_s: float) -> BytePump:
    """The pure-Python pump (``_Pump``): every SSL and socket call releases and retakes the GIL."""
    return _Pump(tls, raw, ours, linger_s)


def native_byte_pump(module: ModuleType | None) -> BytePumpFactory | None:
    """The C pump of ``module`` (``oncestream._native.tls_pump``; None when it is not built), or
    None when it cannot drive this Python's SSL objects (its guards: docs in its source). A
    connection whose SSL object the C code refuses after all gets the Python pump."""
    ssl_module_path = getattr(_ssl, "__file__", None)  # None: _ssl built into the interpreter
    if module is None or ssl_module_path is None or not module.openssl_shared_with(ssl_module_path):
        return None

    def make(tls: TlsState, raw: socket.socket, ours: socket.socket, linger_s: float) -> BytePump:
        try:
            pump: BytePump = module.Pump(tls.obj._sslobj, raw.fileno(), ours.fileno(), linger_s)  # type: ignore[attr-defined]
        except module.UnknownLayout as exc:
            log.warning("the C pump refused a TLS connection's SSL object (%s); the Python pump moves its "
                        "bytes", exc)
            return _Pump(tls, raw, ours, linger_s)
        return pump

    return make


@functools.cache
def default_byte_pump() -> BytePumpFactory:
    """The C pump when built and usable here and ``ONCESTREAM_NATIVE`` is not ``0``, else the
    Python pump (said once in the log)."""
    native = native_byte_pump(_native) if os.environ.get("ONCESTREAM_NATIVE", "1") != "0" else None
    if native is None:
        log.info("TLS connections move their bytes in Python (the C pump oncestream._native.tls_pump is "
                 "not built, not usable with this Python, or ONCESTREAM_NATIVE=0)")
        return python_byte_pump
    return native


class _Outbox:
    """Bytes waiting for a socket, kept as the chunks they came in (no copy into one buffer, no
    move of the rest after a partial send)."""

    def __init__(self) -> None:
        self._chunks: collections.deque[memoryview] = collections.deque()
        self.size_bytes = 0

    def __bool__(self) -> bool:
        return self.size_bytes > 0

    def append(self, chunk: bytes) -> None:
        self._chunks.append(memoryview(chunk))
        self.size_bytes += len(chunk)

    def head(self) -> memoryview:
        """The first chunk: what the next send offers."""
        return self._chunks[0]

    def consume(self, sent_bytes: int) -> None:
        """``sent_bytes`` of the first chunk went out."""
        first = self._chunks[0]
        if sent_bytes == len(first):
            self._chunks.popleft()
        else:
            self._chunks[0] = first[sent_bytes:]
        self.size_bytes -= sent_bytes

    def clear(self) -> None:
        self._chunks.clear()
        self.size_bytes = 0


class _Interest:
    """A selector that changes a socket's registration only when what it waits for changes (one
    epoll_ctl less per wake-up); a socket waited on for nothing is unregistered (a selector
    refuses an empty mask)."""

    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self._events: dict[socket.socket, int] = {}

    def set(self, sock: socket.socket, events: int) -> None:
        current = self._events.get(sock, 0)
        if events == current:
            return
        if not current:
            self._selector.register(sock, events)
        elif not events:
            self._selector.unregister(sock)
        else:
            self._selector.modify(sock, events)
        self._events[sock] = events

    def wait(self, timeout_s: float | None) -> list[tuple[socket.socket, int]]:
        """The sockets that became ready, with what for."""
        if timeout_s is None and not any(self._events.values()):
            timeout_s = _NOTHING_AWAITED_S  # not a state the pump reaches; never sleep forever in it
        return [(key.fileobj, events) for key, events in self._selector.select(timeout_s)]  # type: ignore[misc]

    def close(self) -> None:
        self._selector.close()


class TlsListener:
    """The listening sockets of one TLS listener, accepted on the event loop; each connection
    gets a ``TlsPump`` thread. ``deliver`` runs on the event loop with the pair's end and the
    connection's origin once its handshake succeeded. ``byte_pump``: who moves the bytes after
    the handshake (None: ``default_byte_pump()``)."""

    def __init__(self, sockets: list[socket.socket], context: ssl.SSLContext, loop: asyncio.AbstractEventLoop, *,
                 handshake_timeout_s: float, linger_s: float, deliver: OnConnection,
                 byte_pump: BytePumpFactory | None = None) -> None:
        self.sockets = sockets
        self._byte_pump = byte_pump or default_byte_pump()
        self._context = context
        if context.sni_callback is None:  # the SNI name reaches the handler through TlsIdentity
            context.sni_callback = _record_server_name
        self._handshake_timeout_s = handshake_timeout_s
        self._linger_s = linger_s
        self._deliver = deliver
        self._loop = loop
        self._pumps: set[TlsPump] = set()
        self._lock = threading.Lock()  # _pumps changes on the loop and on the pump threads
        self._closed = False
        for sock in sockets:
            loop.add_reader(sock.fileno(), self._accept, sock)

    def _accept(self, listening: socket.socket) -> None:
        for _ in range(_LISTEN_BACKLOG):  # asyncio's bound on accepts per wake-up
            try:
                raw, peer = listening.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE and the like: the next wake-up tries again
                log.warning("accepting a TLS connection failed: %s", exc)
                return
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pump = TlsPump(raw, peer, self._context, handshake_timeout_s=self._handshake_timeout_s,
                           linger_s=self._linger_s, deliver=self._to_loop, on_exit=self._forget,
                           byte_pump=self._byte_pump)
            with self._lock:
                self._pumps.add(pump)
            pump.start()

    def _to_loop(self, theirs: socket.socket, origin: ConnectionOrigin) -> bool:
        try:
            self._loop.call_soon_threadsafe(self._deliver, theirs, origin)
        except RuntimeError:  # the loop has closed: the broker is gone
            return False
        return True

    def _forget(self, pump: TlsPump) -> None:
        with self._lock:
            self._pumps.discard(pump)

    @property
    def pump_count(self) -> int:
        """TLS connections whose thread still runs (in their handshake or pumping)."""
        with self._lock:
            return len(self._pumps)

    def close(self) -> None:
        """Stop accepting and cut every connection still in its handshake or pumping (their
        threads end on their own; the broker closes its ends of the pairs itself)."""
        if self._closed:
            return
        self._closed = True
        for sock in self.sockets:
            self._loop.remove_reader(sock.fileno())
            sock.close()
        with self._lock:
            pumps = list(self._pumps)
        for pump in pumps:
            pump.abort()


def bind_listening_sockets(host: str | None, port: int) -> list[socket.socket]:
    """Non-blocking listening sockets for ``host:port`` (every address of ``host``; all of them
    when None), as ``loop.create_server`` binds them: SO_REUSEADDR, IPv6 sockets IPv6-only."""
    infos = socket.getaddrinfo(host, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _name, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(_LISTEN_BACKLOG)
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets
