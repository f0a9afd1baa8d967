"""The asyncio server: accepts connections and moves frames between sockets and the dispatcher.

Each connection is served by its own task, which reads one frame, awaits its response and writes
it before reading the next, except that up to five Produce requests of a connection are handled
at once (broker/produce_pipelining.py: appended in arrival order, answered in arrival order) in
cluster mode and, on a single broker, once a Produce of the connection waited for an fsync round:
pipelined requests are therefore answered in order, and a slow or dead client only ever stalls
its own task. Framed responses go out through a ``ResponseWriter``
(broker/fetch_response_writer.py), which sends a Fetch's record sections with sendfile. The size prefix is checked against
``socket.request.max.bytes`` before anything is allocated.

Limits one client cannot exceed (the decisions live in sans-io classes; this module applies them):
``max.connections`` / ``max.connections.per.ip`` close a connection at accept
(``ConnectionQuotas``); ``connections.max.idle.ms`` closes one that moved no byte for that long,
also in the middle of a frame (``IdleTracker``, checked by one timer per connection); and the
body of a frame is read only once its announced size is reserved from the broker-wide
``queued.max.request.bytes`` pool (``RequestMemoryPool``), released when its response is written.

Listeners (``broker/listeners.py``): one asyncio server per plaintext listener; an SSL/SASL_SSL
listener (its SSL context from ``broker/tls.py``) is a ``TlsListener`` (``broker/tls_pump.py``):
each connection's TLS runs on its own thread and the loop serves a plaintext socket pair, so the
loop never encrypts and a Fetch is sent with sendfile on every listener. Every connection starts
a ``ConnectionSession`` naming its listener and security protocol; over TLS its principal comes
from the client certificate, which arrives with the peer address in a ``ConnectionOrigin``. A
failed TLS handshake (a plaintext client on a TLS port, a missing or untrusted client
certificate) never reaches a connection task: its thread closes that socket and the broker keeps
serving everyone else. Connection limits count a TLS connection once its handshake is done.

Shutdown (SIGTERM/SIGINT, ``BrokerServer.stop``), in the order Kafka's follows: stop accepting,
close every client connection (its transport aborted, its task cancelled: a client in a long poll
or with an open transaction is cut off, as Kafka's SocketServer shutdown does), cancel the
background loops (cleaner, group and transaction timers, housekeeping) and await them, then close
the broker state (disk threads joined, logs flushed and closed, the clean-shutdown marker
written). A phase that has not ended after a quarter of ``oncestream.shutdown.timeout.ms`` is
logged with the stacks of what it waits for, and what it waits for is cancelled again (a loop that
lost its cancellation gets another); the whole stop is bounded by ``process_shutdown``: at the
bound, or on a second signal, the process exits at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import os
import socket
import struct
import sys
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from oncestream.broker.cleaner import LogCleaner
from oncestream.broker.config import BrokerConfig
from oncestream.broker.connection_context import current_session, start_session
from oncestream.broker.connection_limits import ConnectionQuotas, IdleTracker
from oncestream.broker.dispatch import CloseConnection, Dispatcher
from oncestream.broker.fetch_response_writer import ResponseWriter
from oncestream.broker.frame_reader import FrameProtocol, FrameReader, staging_buffer
from oncestream.broker.listeners import Listener
from oncestream.broker.memory_pool import RequestMemoryPool
from oncestream.broker.metrics.recorder import RequestTiming, current_timing
from oncestream.broker.metrics.serving import start_metrics
from oncestream.broker.produce_pipelining import PipelinedResult, ProducePipeline, Response
from oncestream.broker.quotas.enforcement import produce_recorded_at_read, take_channel_mute_s
from oncestream.broker.sasl.exchange import close_delay_s, peek_exchange
from oncestream.broker.seams import BackgroundLoop, BrokerSeams
from oncestream.broker.state import BrokerState
from oncestream.broker.tls import server_ssl_context
from oncestream.broker.tls_pump import TLS_SWITCH_INTERVAL_S, ConnectionOrigin, TlsListener, bind_listening_sockets
from oncestream.metrics.endpoint import MetricsEndpoint
from oncestream.process_shutdown import ShutdownBound, install_stop_signals
from oncestream.protocol.api_keys import PRODUCE

log = logging.getLogger("oncestream.broker")

_SIZE = struct.Struct(">i")
_API_KEY = struct.Struct(">h")
# api key + version + correlation id + client id length: nothing shorter is a request.
_MIN_FRAME_BYTES = 10
# asyncio's own default: a client that connects to a TLS port and never finishes the handshake.
_TLS_HANDSHAKE_TIMEOUT_S = 60.0


def _pipelines(frame: bytes) -> bool:
    """Whether a frame is a Produce request of an authenticated connection (only those are
    pipelined: a frame of a SASL exchange in raw-token mode has no request header)."""
    if len(frame) < 2 or _API_KEY.unpack_from(frame)[0] != PRODUCE or not current_session().authenticated:
        return False
    exchange = peek_exchange()
    return exchange is None or exchange.state != "authenticate"


class ServerStateError(RuntimeError):
    """The server was used out of order (e.g. served before it was started): a bug, not input."""


class _IdleWatch:
    """One timer per connection: at the tracker's deadline it closes the connection if nothing
    moved. While a response is being drained, a shrinking write buffer counts as bytes out."""

    def __init__(self, idle: IdleTracker, writer: asyncio.StreamWriter, peer: object,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.idle = idle
        self.writer = writer
        self.peer = peer
        self.loop = loop
        self.draining = False
        self._buffered_bytes = -1
        self._handle: asyncio.TimerHandle | None = None
        self._schedule()

    def now_ms(self) -> float:
        return self.loop.time() * 1000

    def _schedule(self) -> None:
        deadline_ms = self.idle.deadline_ms()
        if deadline_ms is None:  # a request is being handled: look again one idle period later
            deadline_ms = self.now_ms() + self.idle.idle_ms
        self._handle = self.loop.call_at(deadline_ms / 1000, self._check)

    def _check(self) -> None:
        now_ms = self.now_ms()
        if self.draining:
            buffered = self.writer.transport.get_write_buffer_size()
            if buffered != self._buffered_bytes:
                self._buffered_bytes = buffered
                self.idle.activity(now_ms)
        if self.idle.expired(now_ms):
            log.info("closing %s: idle for connections.max.idle.ms=%d", self.peer, self.idle.idle_ms)
            # abort, not close: a client that stopped reading would keep close() waiting forever.
            self.writer.transport.abort()
            return
        self._schedule()

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class BrokerServer:
    """Owns the listening socket, the connection tasks, the connection limits and the
    housekeeping timer.

    ``background`` adds loops to the broker's own (cleaner, coordinator timers, housekeeping):
    each is started with the broker and cancelled and awaited on shutdown like them.
    ``stuck_report_s`` is how long a shutdown phase may wait before what it waits for is logged
    (with stacks) and cancelled again."""

    def __init__(self, state: BrokerState, *, ready_file: Path | None = None,
                 background: Sequence[BackgroundLoop] = (), stuck_report_s: float = 5.0,
                 defer_ready: bool = False, on_stopping: Callable[[], Awaitable[None]] | None = None) -> None:
        """``defer_ready``: ``start`` does not write the ready file; the caller calls
        ``announce_ready`` once it is (a cluster broker: after it registered). ``on_stopping`` runs
        first thing when a stop begins, before connections close (a cluster broker deregisters)."""
        self.state = state
        self.dispatcher = Dispatcher(state)
        self.ready_file = ready_file
        self.defer_ready = defer_ready
        self.on_stopping = on_stopping
        self._bound: list[Listener] = []
        self.background = tuple(background)
        self.stuck_report_s = stuck_report_s
        self._servers: list[asyncio.base_events.Server] = []  # PLAINTEXT and SASL_PLAINTEXT listeners
        self._tls_listeners: list[TlsListener] = []  # SSL and SASL_SSL (broker/tls_pump.py)
        # Connections between their TLS handshake and their connection task (a few microseconds).
        self._attaching: set[asyncio.Task[object]] = set()
        # Connection tasks and their writers: a shutdown aborts the transports, so a task that
        # lost its cancellation still ends (its next read fails).
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self._stopping = asyncio.Event()
        cfg = state.config
        self.quotas = ConnectionQuotas(
            cfg.max_connections, cfg.max_connections_per_ip, cfg.max_connections_per_ip_overrides
        )
        self.memory_pool = RequestMemoryPool(cfg.queued_max_request_bytes)
        self.metrics_endpoint: MetricsEndpoint | None = None  # metrics.listen (broker/metrics)

    async def start(self) -> None:
        """Bind every listener (SSL contexts are built first, so a bad store fails the start
        before any port is taken), then write the ready file if one was asked for."""
        cfg = self.state.config
        loop = asyncio.get_running_loop()
        listeners = cfg.all_listeners
        contexts = {
            listener.name: server_ssl_context(cfg.raw, listener.name) if listener.uses_tls else None
            for listener in listeners
        }

        staging = staging_buffer()  # this loop's, shared by its connections (broker/frame_reader.py)

        def now_ms() -> float:
            return loop.time() * 1000  # monotonic: a wall-clock step must not close connections

        def factory_for(listener: Listener, origin: ConnectionOrigin | None = None,
                        ) -> Callable[[], FrameProtocol]:
            def protocol_factory() -> FrameProtocol:
                # asyncio.start_server's factory, with a reader that receives large frames in
                # place and feeds the idle tracker (broker/frame_reader.py).
                idle = IdleTracker(cfg.connections_max_idle_ms, now_ms())
                reader = FrameReader(idle, now_ms, loop, staging)

                def connected(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> Awaitable[None]:
                    return self._on_connection(r, w, idle, listener, origin)

                return FrameProtocol(reader, connected, loop=loop)

            return protocol_factory

        def attach_tls(listener: Listener, pair_end: socket.socket, origin: ConnectionOrigin) -> None:
            """A TLS connection whose handshake succeeded: serve the pump's socket pair end."""
            if self._stopping.is_set():
                pair_end.close()
                return
            task = loop.create_task(loop.connect_accepted_socket(factory_for(listener, origin), pair_end))
            self._attaching.add(task)
            task.add_done_callback(self._attached)

        # A handshake is not yet a connection the idle timer watches: bound it as well. The same
        # bound caps how long a closed connection's last response may take to reach its client.
        handshake_timeout_s = min(_TLS_HANDSHAKE_TIMEOUT_S, cfg.connections_max_idle_ms / 1000)
        bound: list[Listener] = []
        for listener in listeners:
            tls = contexts[listener.name]
            if tls is None:
                server = await loop.create_server(
                    factory_for(listener), listener.host or None, listener.port, reuse_address=True)
                self._servers.append(server)
                sockets = list(server.sockets)
            else:  # TLS runs on a thread per connection; the loop serves plaintext socket pairs
                sockets = bind_listening_sockets(listener.host or None, listener.port)
                self._tls_listeners.append(TlsListener(
                    sockets, tls, loop, handshake_timeout_s=handshake_timeout_s, linger_s=handshake_timeout_s,
                    deliver=functools.partial(attach_tls, listener), byte_pump=self.state.tls_byte_pump))
            port = sockets[0].getsockname()[1]
            bound.append(dataclasses.replace(listener, port=port))  # port 0: the one the OS picked
            log.info("oncestream broker listening on %s://%s:%s (advertised %s:%s, %s)",
                     listener.name, listener.host, port, *bound[-1].advertised,
                     f"data dir {self.state.data_dir}" if self.state.cluster is None else
                     f"cluster node {self.state.cluster.node_id}")
        self.metrics_endpoint = await start_metrics(self.state, cfg.raw, self.memory_pool)
        if self.metrics_endpoint is not None:  # KIP-714: what clients push shows on the same /metrics
            self.metrics_endpoint.registry.register(self.state.telemetry.received)
        # Handlers advertise the bound ports from here on (listeners and the default host:port).
        self.state.config = dataclasses.replace(cfg, listeners=tuple(bound), port=bound[0].port)
        self._bound = bound
        if not self.defer_ready:
            self.announce_ready()

    def announce_ready(self) -> None:
        """Write the ready file (if one was asked for) naming the bound listeners."""
        if self.ready_file is not None:
            self._write_ready_file(self._bound)

    def _write_ready_file(self, bound: list[Listener]) -> None:
        """``{"listeners": {NAME: {"host", "port", "security_protocol"}}}``, written whole (temp
        file, rename) once every listener is bound: a reader never sees a partial file."""
        if self.ready_file is None:
            return
        body: dict[str, object] = {"listeners": {
            item.name: {"host": item.host, "port": item.port, "security_protocol": item.security_protocol}
            for item in bound
        }}
        if self.metrics_endpoint is not None:
            body["metrics"] = {"host": self.metrics_endpoint.host, "port": self.metrics_endpoint.port}
        temp = self.ready_file.with_name(self.ready_file.name + ".tmp")
        temp.write_text(json.dumps(body))
        os.replace(temp, self.ready_file)

    async def serve_until_stopped(self) -> None:
        if not self._bound:
            raise ServerStateError("serve_until_stopped() before start()")
        background = [
            asyncio.create_task(self._housekeeping()),
            asyncio.create_task(self.state.groups.run_timers()),
            asyncio.create_task(self.state.transactions.run_timers()),
            asyncio.create_task(self.state.shares.run_timers()),
            asyncio.create_task(LogCleaner.for_state(self.state).run()),
            *([asyncio.create_task(self.state.remote.run())] if self.state.remote is not None else []),
            *(asyncio.create_task(_awaited(loop())) for loop in self.background),
        ]
        await self._stopping.wait()
        if self.on_stopping is not None:
            try:
                await self.on_stopping()
            except Exception:
                log.exception("shutdown: the stopping hook failed")
        log.info("oncestream broker stopping: closing %d client connection(s)", len(self._connections))
        for server in self._servers:
            server.close()  # no new connection from here on
        for tls_listener in self._tls_listeners:
            tls_listener.close()  # also cuts the handshakes in progress
        await self._end_all(self._attaching, "TLS connections being attached")
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.close()
        await self._end_all(self._connections, "client connections", close=self._abort_connection)
        # A running clean stops and tidies up before the logs are closed.
        await self._end_all(background, "background loops")
        self.state.close()
        log.info("oncestream broker stopped cleanly")

    def _attached(self, task: asyncio.Task[object]) -> None:
        self._attaching.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("serving a TLS connection failed: %s", task.exception())

    def _abort_connection(self, task: asyncio.Task[None]) -> None:
        writer = self._connections.get(task)
        if writer is not None:
            writer.transport.abort()  # abort, not close: a client that stopped reading cannot hold it

    async def _end_all(self, tasks: Collection[asyncio.Task[Any]], what: str,
                       close: Callable[[asyncio.Task[None]], None] | None = None) -> None:
        """Cancel ``tasks`` (``close`` each first) and wait until all have ended. Those still
        running after ``stuck_report_s`` are logged with their stacks and cancelled again; the
        process bound (``process_shutdown``) ends a wait that still does not finish."""
        pending = set(tasks)
        for task in pending:
            if close is not None:
                close(task)
            task.cancel()
        while pending:
            _done, pending = await asyncio.wait(pending, timeout=self.stuck_report_s)
            for task in pending:
                log.warning("shutdown: one of the %s still runs %.1f s after its cancellation; "
                            "cancelling it again. %s", what, self.stuck_report_s, _stack_of(task))
                if close is not None:
                    close(task)
                task.cancel()

    def stop(self) -> None:
        """Ask ``serve_until_stopped`` to shut the broker down."""
        self._stopping.set()

    @property
    def open_connections(self) -> int:
        """Connections being served now (those refused at accept never count)."""
        return len(self._connections)

    async def _housekeeping(self) -> None:
        interval_s = self.state.config.retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                self.state.tick()
            except Exception:
                log.exception("housekeeping failed")

    async def _handle_pipelined(self, frame: bytes, read_s: float, metrics_on: bool,
                                read_throttle_ms: int) -> PipelinedResult:
        """One pipelined request, in its own task: its own request timing and KIP-219 mute (the
        task runs in a copy of the connection's context, so neither leaks into another request).
        ``read_throttle_ms``: what recording its bytes at read gave (answered, not recorded again)."""
        timing = RequestTiming() if metrics_on else None
        current_timing.set(timing)
        produce_recorded_at_read(read_throttle_ms)
        response = await self.dispatcher.handle_frame(frame)
        return PipelinedResult(response, take_channel_mute_s(), read_s, timing)

    @staticmethod
    async def _write_response(response: Response, writer: asyncio.StreamWriter, responses: ResponseWriter,
                              watch: _IdleWatch, idle: IdleTracker) -> None:
        """Write one response (None: nothing is due) and wait until the socket took it."""
        if response is None:
            return
        if isinstance(response, list):  # framed buffers; a zero-copy Fetch's hold file ranges
            await responses.write(response)
        else:
            writer.write(response)
        watch.draining = True
        await writer.drain()
        watch.draining = False
        idle.activity(watch.now_ms())

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, idle: IdleTracker,
        listener: Listener, origin: ConnectionOrigin | None,
    ) -> None:
        """Serve one connection; ``origin`` says where a TLS connection came from (its transport
        is the pump's socket pair), None on a plaintext listener (the transport knows)."""
        if origin is None:
            origin = ConnectionOrigin(writer.get_extra_info("peername"))
        peer = origin.peer
        ip = str(peer[0]) if isinstance(peer, tuple) and peer else str(peer)
        refusal = self.quotas.try_admit(ip)
        if refusal is not None:
            log.info("refusing connection from %s: %s", peer, refusal)
            writer.transport.abort()
            return
        task = asyncio.current_task()
        if task is not None:  # always set for a coroutine the protocol runs as a task
            self._connections[task] = writer
        peer_certificate = origin.tls.peer_certificate if origin.tls is not None else None
        # The principal builder names the client (broker/principal.py): on SSL the default one
        # maps the certificate; on SASL_SSL only SASL does, once it completes (as in Kafka).
        session = start_session(peer, listener_name=listener.name, security_protocol=listener.security_protocol,
                                principal_builder=self.state.principal_builder, peer_certificate=peer_certificate)
        if peer_certificate and listener.security_protocol == "SSL":  # only mutual TLS is worth a line
            log.info("%s on listener %s: client certificate principal %s", peer, listener.name, session.principal)
        watch = _IdleWatch(idle, writer, peer, asyncio.get_running_loop())
        responses = ResponseWriter(writer, lambda: idle.activity(watch.now_ms()))
        max_bytes = self.state.config.socket_request_max_bytes
        metrics = self.state.metrics
        timing = RequestTiming() if metrics.enabled else None
        current_timing.set(timing)  # this connection task's own context
        metrics.connection_opened(listener.name)
        pool = self.memory_pool
        reserved_bytes = 0  # this connection's share of the pool; given back on every exit path
        muted_until_s = 0.0  # KIP-219 mute of a pipelined Produce's response (monotonic seconds)

        async def write_pipelined(result: PipelinedResult) -> None:
            nonlocal muted_until_s
            await self._write_response(result.response, writer, responses, watch, idle)
            if isinstance(result.timing, RequestTiming):
                result.timing.throttle_ms = result.mute_s * 1000 if result.mute_s is not None else 0.0
                metrics.request_done(result.timing, result.read_s, time.perf_counter())
            if result.mute_s is not None:
                muted_until_s = max(muted_until_s, time.monotonic() + result.mute_s)

        # A connection's Produce requests are handled concurrently and answered in order
        # (broker/produce_pipelining.py): in cluster mode they join one upload; on a single
        # broker once a Produce of the connection waited for an fsync round (flush.messages=1),
        # so the next request appends while the one before waits and one round covers both.
        # Otherwise a single broker's Produce is done when it is appended and is handled in
        # the connection's task: a pipelined request costs ~10-30 us more CPU (its task, turn
        # and header parse), which small requests without an fsync to wait for would only pay.
        pipeline = ProducePipeline(write_pipelined, pool.release, on_idle=lambda: idle.finish_request(watch.now_ms()))
        cluster = self.state.cluster is not None
        try:
            while True:
                if muted_until_s > time.monotonic():
                    await asyncio.sleep(muted_until_s - time.monotonic())
                size_prefix = await reader.readexactly(4)
                (size,) = _SIZE.unpack(size_prefix)
                if size < _MIN_FRAME_BYTES or size > max_bytes:
                    log.warning("closing %s: request size %d outside [%d, %d]", peer, size, _MIN_FRAME_BYTES, max_bytes,
                                extra={"event": "connection_closed", "error": "INVALID_REQUEST_SIZE"})
                    break
                if not pool.try_reserve(size):
                    log.warning(
                        "closing %s: a %d-byte request does not fit queued.max.request.bytes=%d (%d reserved)",
                        peer, size, pool.capacity_bytes, pool.reserved_bytes,
                    )
                    break
                reserved_bytes = size
                frame = await reader.readexactly(size)
                read_s = time.perf_counter()
                if _pipelines(frame) and (cluster or pipeline.busy or session.produce_waited_for_disk):
                    # KIP-219 with requests in flight: the bytes count as the frame is read,
                    # so the one that crosses producer_byte_rate is the last read before the
                    # mute (broker/quotas/enforcement.py).
                    read_throttle_ms = self.dispatcher.record_produce_read(frame)
                    idle.start_request()
                    reserved_bytes = 0  # the pipeline gives the frame's bytes back once answered
                    await pipeline.submit(
                        self._handle_pipelined(frame, read_s, metrics.enabled, read_throttle_ms), size)
                    if read_throttle_ms > 0:
                        # Throttled: nothing more is read until its answer is written (the
                        # requests before it are answered first, in order) and the mute that
                        # answer sets (write_pipelined) has passed, as Kafka mutes a channel.
                        await pipeline.wait_idle()
                    continue
                await pipeline.wait_idle()  # any other request: every earlier answer first
                idle.start_request()
                try:
                    response = await self.dispatcher.handle_frame(frame)
                finally:
                    idle.finish_request(watch.now_ms())
                await self._write_response(response, writer, responses, watch, idle)
                # Taken here (the mute itself waits until the pool is given back, below): the
                # request's ThrottleTimeMs is the time its channel stays muted.
                mute_s = take_channel_mute_s()
                if timing is not None:
                    timing.throttle_ms = mute_s * 1000 if mute_s is not None else 0.0
                    metrics.request_done(timing, read_s, time.perf_counter())
                sasl_close_s = close_delay_s()
                if sasl_close_s is not None:  # a failed SASL authentication: answered, then closed
                    # A refused mechanism counts too: Kafka's is an AuthenticationException as well.
                    metrics.failed_authentication(listener.name)
                    await asyncio.sleep(sasl_close_s)
                    break
                # The frame is not deleted here: freeing the only large block at the top of the heap
                # makes glibc trim it, and the next frame grows it again (brk plus fresh page faults
                # on every request: twice the broker's system time, ~30% less produce throughput).
                # It is replaced when the next frame arrives, as before the pool existed.
                pool.release(reserved_bytes)
                reserved_bytes = 0
                if mute_s is not None:  # KIP-219: answered at once, then nothing read until the throttle ends
                    idle.start_request()  # the broker's choice: a muted client is not idle
                    try:
                        await asyncio.sleep(mute_s)
                    finally:
                        idle.finish_request(watch.now_ms())
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client went away, or sat idle and was closed (logged by the watch)
        except CloseConnection as exc:
            log.warning("closing %s: %s", peer, exc, extra={"event": "connection_closed", "reason": str(exc)})
        except Exception as exc:  # noqa: BLE001  # a bug in a handler: keep serving everyone else
            tb = exc.__traceback__
            while tb is not None and tb.tb_next is not None:
                tb = tb.tb_next
            where = f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}" if tb else "?"
            log.error("closing %s: internal error %s: %s at %s", peer, type(exc).__name__, exc, where)
        finally:
            await pipeline.close()
            metrics.connection_closed(listener.name)
            watch.cancel()
            responses.close()
            if reserved_bytes:
                pool.release(reserved_bytes)
            if task is not None:
                self._connections.pop(task, None)
            self.quotas.release(ip)
            writer.close()


def run_broker(data_dir: Path, host: str, port: int, props: dict[str, str], *,
               ready_file: Path | None = None, seams: BrokerSeams | None = None) -> int:
    """Run a broker in the foreground until SIGTERM/SIGINT. Returns the process exit code.

    ``host:port`` is the single PLAINTEXT listener used when ``props`` has no ``listeners``;
    ``ready_file`` receives the bound listeners once all are listening (see ``BrokerServer``);
    ``seams`` are injected interfaces (broker/seams.py; none: the shipped ones), among them
    extra background loops and the disk threads' ``fdatasync``.

    The stop that SIGTERM/SIGINT starts is bounded by ``oncestream.shutdown.timeout.ms``
    (``process_shutdown``): past it, or on a second signal, the process exits at once."""
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # uvloop is a dependency, but the broker works without it
        pass
    config = BrokerConfig.from_properties(host, port, props)
    if any(listener.uses_tls for listener in config.all_listeners):
        sys.setswitchinterval(TLS_SWITCH_INTERVAL_S)  # TLS pump threads win the GIL back sooner
    bound = ShutdownBound(config.shutdown_timeout_ms, "oncestream broker")
    for listener in config.all_listeners:  # a bad SSL store fails before the data dir is opened
        if listener.uses_tls:
            server_ssl_context(config.raw, listener.name)

    async def main() -> None:
        seams_used = seams or BrokerSeams()
        state = BrokerState(data_dir, config, fdatasync=seams_used.fdatasync, seams=seams_used)
        server = BrokerServer(state, ready_file=ready_file, background=seams_used.background_loops,
                              stuck_report_s=bound.bound_ms / 4000)
        install_stop_signals(asyncio.get_running_loop(), bound, server.stop)
        await server.start()
        await server.serve_until_stopped()

    asyncio.run(main())
    bound.finished()
    return 0


async def _awaited(awaitable: Awaitable[None]) -> None:
    await awaitable


def _stack_of(task: asyncio.Task[None]) -> str:
    """Where ``task`` waits, down its chain of awaited coroutines (``Task.print_stack`` shows
    only the outermost frame of a suspended coroutine)."""
    lines = [f"task {task.get_name()}:"]
    coro: object = task.get_coro()
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            lines.append(f'  File "{frame.f_code.co_filename}", line {frame.f_lineno}, in {frame.f_code.co_name}')
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return "\n".join(lines)
