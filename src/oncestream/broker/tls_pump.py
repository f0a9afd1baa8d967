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
"""

from __future__ import annotations

import asyncio
import logging
import selectors
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("oncestream.broker.tls")

# Bytes taken from a socket per call: the TLS socket yields at most one record (16 KiB) per read;
# from the pair, 256 KiB is one SSL_write of 16 records (the GIL is released for all of them).
_PLAIN_CHUNK_BYTES = 256 * 1024
_TLS_CHUNK_BYTES = 64 * 1024
# Decrypted bytes the broker has not taken yet: past this the thread stops reading the client
# (the kernel's buffers then push back on it, as on a plaintext connection).
_PENDING_PLAIN_HIGH_BYTES = 1024 * 1024
# Kernel buffers of the socket pair: a zero-copy Fetch sendfiles into it, a larger buffer means
# fewer wake-ups of the thread per response.
_PAIR_BUFFER_BYTES = 1024 * 1024
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
                 on_exit: Callable[[TlsPump], None] = lambda _pump: None) -> None:
        self.raw = raw
        self.peer = peer
        self._context = context
        self._handshake_timeout_s = handshake_timeout_s
        self._linger_s = linger_s
        self._deliver = deliver
        self._on_exit = on_exit
        self._closing = threading.Event()
        self._sock: socket.socket = raw  # the TLS socket once wrapped (it takes over raw's descriptor)
        self.thread = threading.Thread(target=self._run, name=f"tls-pump {peer}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def abort(self) -> None:
        """Cut the connection from another thread (shutdown): the thread's next socket call
        fails and it ends, closing both sockets."""
        self._closing.set()
        try:
            # socket.socket's own shutdown: SSLSocket.shutdown would drop the SSL object under the
            # pump thread's feet; the descriptor's shutdown just makes its calls fail.
            socket.socket.shutdown(self._sock, socket.SHUT_RDWR)
        except OSError:
            pass  # already closed

    def _run(self) -> None:
        tls: ssl.SSLSocket | None = None
        ours: socket.socket | None = None
        try:
            tls = self._handshake()
            if tls is None:
                return
            ours, theirs = socket.socketpair()
            for end in (ours, theirs):
                end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _PAIR_BUFFER_BYTES)
                end.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _PAIR_BUFFER_BYTES)
            try:
                delivered = self._deliver(theirs, ConnectionOrigin(self.peer, _identity_of(tls)))
            except Exception:
                theirs.close()
                raise
            if not delivered:
                theirs.close()
                return
            tls.setblocking(False)
            ours.setblocking(False)
            _Pump(tls, ours, self._linger_s, self._closing).run()
        except Exception:  # a bug here must still close the connection (finally) and not pass unseen
            log.exception("TLS connection of %s failed", self.peer)
        finally:
            for sock in (ours, tls, self.raw):
                if sock is not None:
                    sock.close()
            self._on_exit(self)

    def _handshake(self) -> ssl.SSLSocket | None:
        try:
            tls = self._context.wrap_socket(self.raw, server_side=True, do_handshake_on_connect=False)
        except OSError as exc:
            log.debug("TLS connection of %s lost before its handshake: %s", self.peer, exc)
            return None
        self._sock = tls
        try:
            tls.settimeout(self._handshake_timeout_s)
            tls.do_handshake()
        except (OSError, ValueError) as exc:  # ssl.SSLError, timeouts and resets are OSErrors
            # A plaintext client on a TLS port, an untrusted or missing client certificate: this
            # socket closes, the broker serves everyone else (asyncio logged these at debug too).
            log.debug("TLS handshake with %s failed: %s", self.peer, exc)
            tls.close()
            return None
        if self._closing.is_set():
            tls.close()
            return None
        return tls


def _identity_of(tls: ssl.SSLSocket) -> TlsIdentity:
    cipher = tls.cipher()
    return TlsIdentity(peer_certificate=tls.getpeercert() or None, server_name=_server_names.pop(tls, None),
                       cipher=cipher[0] if cipher else None, version=tls.version())


class _Pump:
    """The byte pump of one established TLS connection (non-blocking sockets, one selector).

    Each round tries every transfer that may make progress until none does, then waits for what
    the blocked ones wait for: an SSL read can need the socket writable and an SSL write readable
    (TLS 1.3 key updates), and decrypted bytes can sit inside the SSL object with the socket
    empty, so readiness alone would not say when to read."""

    def __init__(self, tls: ssl.SSLSocket, ours: socket.socket, linger_s: float,
                 closing: threading.Event) -> None:
        self.tls = tls
        self.ours = ours
        self.linger_s = linger_s
        self.closing = closing
        self.to_plain = bytearray()  # decrypted, not yet written into the pair
        self.to_tls: bytes | None = None  # taken from the pair, SSL_write not yet done (retried as is)
        self.client_open = True  # the client may still send
        self.broker_open = True  # the broker may still write into the pair
        self.pair_shut = False  # our write side of the pair is shut (the broker read end-of-stream)

    def run(self) -> None:
        selector = _Interest()
        try:
            linger_until_s: float | None = None
            while not self.closing.is_set():
                tls_events, ours_events = self._transfer()
                if not self.broker_open and self.to_tls is None:
                    _close_notify(self.tls)
                    return  # the broker closed and everything it wrote went out
                if not self.client_open and not self.to_plain:
                    if not self.pair_shut:
                        self.ours.shutdown(socket.SHUT_WR)  # the broker reads end-of-stream
                        self.pair_shut = True
                    if not self.broker_open:
                        return
                    tls_events = 0  # nothing more goes to the client: wait for the broker to close
                    ours_events = selectors.EVENT_READ
                timeout_s = None
                if not self.broker_open:  # flushing to a client that may have stopped reading
                    now_s = time.monotonic()
                    linger_until_s = linger_until_s or now_s + self.linger_s
                    if now_s >= linger_until_s:
                        return
                    timeout_s = linger_until_s - now_s
                selector.set(self.tls, tls_events)
                selector.set(self.ours, ours_events)
                selector.wait(timeout_s)
        finally:
            selector.close()

    def _transfer(self) -> tuple[int, int]:
        """Move bytes until nothing moves; returns the events each socket waits for."""
        while True:
            progress = False
            tls_events = ours_events = 0
            if self.client_open and len(self.to_plain) < _PENDING_PLAIN_HIGH_BYTES:
                try:
                    data = self.tls.recv(_TLS_CHUNK_BYTES)
                except ssl.SSLWantReadError:
                    tls_events |= selectors.EVENT_READ
                except ssl.SSLWantWriteError:
                    tls_events |= selectors.EVENT_WRITE
                except OSError:  # reset, a bad record, an alert: the client is gone
                    self.client_open = False
                    self.to_tls = None
                else:
                    if data:
                        self.to_plain += data
                        progress = True
                    else:  # close_notify or a bare TCP close
                        self.client_open = False
            if self.to_plain:
                try:
                    sent = self.ours.send(self.to_plain)
                except BlockingIOError:
                    ours_events |= selectors.EVENT_WRITE
                except OSError:  # the broker closed its end: nothing more goes to it
                    self.to_plain.clear()
                    self.broker_open = False
                else:
                    del self.to_plain[:sent]
                    progress = True
            if self.broker_open and self.to_tls is None:
                try:
                    chunk = self.ours.recv(_PLAIN_CHUNK_BYTES)
                except BlockingIOError:
                    ours_events |= selectors.EVENT_READ
                except OSError:
                    self.broker_open = False
                else:
                    if chunk:
                        self.to_tls = chunk
                        progress = True
                    else:
                        self.broker_open = False
            if self.to_tls is not None and self.client_open:
                try:
                    sent = self.tls.send(self.to_tls)
                except ssl.SSLWantWriteError:
                    tls_events |= selectors.EVENT_WRITE
                except ssl.SSLWantReadError:
                    tls_events |= selectors.EVENT_READ
                except OSError:  # the client is gone: what the broker writes has nowhere to go
                    self.client_open = False
                    self.to_tls = None
                else:
                    self.to_tls = self.to_tls[sent:] or None
                    progress = True
            elif not self.client_open:
                self.to_tls = None
            if not progress:
                return tls_events, ours_events


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

    def wait(self, timeout_s: float | None) -> None:
        if timeout_s is None and not any(self._events.values()):
            timeout_s = _NOTHING_AWAITED_S  # not a state the pump reaches; never sleep forever in it
        self._selector.select(timeout_s)

    def close(self) -> None:
        self._selector.close()


def _close_notify(tls: ssl.SSLSocket) -> None:
    """Send close_notify if the socket takes it now; the peer's is not awaited (Kafka does not)."""
    try:
        tls.unwrap()
    except (OSError, ValueError):
        pass


class TlsListener:
    """The listening sockets of one TLS listener, accepted on the event loop; each connection
    gets a ``TlsPump`` thread. ``deliver`` runs on the event loop with the pair's end and the
    connection's origin once its handshake succeeded."""

    def __init__(self, sockets: list[socket.socket], context: ssl.SSLContext, loop: asyncio.AbstractEventLoop, *,
                 handshake_timeout_s: float, linger_s: float, deliver: OnConnection) -> None:
        self.sockets = sockets
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
                           linger_s=self._linger_s, deliver=self._to_loop, on_exit=self._forget)
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
