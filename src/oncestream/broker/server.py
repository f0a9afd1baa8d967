"""The asyncio server: accepts connections and moves frames between sockets and the dispatcher.

Each connection is served by its own task, which reads one frame, awaits its response and writes
it before reading the next: pipelined requests are therefore answered in order, and a slow or
dead client only ever stalls its own task. The size prefix is checked against
``socket.request.max.bytes`` before anything is allocated.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
import struct
from pathlib import Path

from oncestream.broker.cleaner import LogCleaner
from oncestream.broker.config import BrokerConfig
from oncestream.broker.connection_context import set_peer
from oncestream.broker.dispatch import CloseConnection, Dispatcher
from oncestream.broker.state import BrokerState

log = logging.getLogger("oncestream.broker")

_SIZE = struct.Struct(">i")
# api key + version + correlation id + client id length: nothing shorter is a request.
_MIN_FRAME_BYTES = 10


class BrokerServer:
    """Owns the listening socket, the connection tasks and the housekeeping timer."""

    def __init__(self, state: BrokerState) -> None:
        self.state = state
        self.dispatcher = Dispatcher(state)
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._stopping = asyncio.Event()

    async def start(self) -> None:
        cfg = self.state.config
        self._server = await asyncio.start_server(
            self._on_connection, cfg.host, cfg.port, limit=2**20, reuse_address=True
        )
        host, port = self._server.sockets[0].getsockname()[:2]
        if cfg.port == 0:  # advertise the port the OS picked
            self.state.config = dataclasses.replace(cfg, port=port)
        log.info("oncestream broker listening on %s:%s (data dir %s)", host, port, self.state.data_dir)

    async def serve_until_stopped(self) -> None:
        background = [
            asyncio.create_task(self._housekeeping()),
            asyncio.create_task(self.state.groups.run_timers()),
            asyncio.create_task(self.state.transactions.run_timers()),
            asyncio.create_task(LogCleaner.for_state(self.state).run()),
        ]
        await self._stopping.wait()
        for task in background:
            task.cancel()
        # Wait for a running clean to stop and tidy up before the logs are closed.
        await asyncio.gather(*background, return_exceptions=True)
        assert self._server is not None
        self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        self.state.close()
        log.info("oncestream broker stopped cleanly")

    def stop(self) -> None:
        self._stopping.set()

    async def _housekeeping(self) -> None:
        interval_s = self.state.config.retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                self.state.tick()
            except Exception:
                log.exception("housekeeping failed")

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        set_peer(peer)
        max_bytes = self.state.config.socket_request_max_bytes
        try:
            while True:
                size_prefix = await reader.readexactly(4)
                (size,) = _SIZE.unpack(size_prefix)
                if size < _MIN_FRAME_BYTES or size > max_bytes:
                    log.warning("closing %s: request size %d outside [%d, %d]", peer, size, _MIN_FRAME_BYTES, max_bytes)
                    break
                frame = await reader.readexactly(size)
                response = await self.dispatcher.handle_frame(frame)
                if response is None:
                    continue
                if isinstance(response, list):
                    writer.writelines(response)
                else:
                    writer.write(response)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client went away: nothing to log
        except CloseConnection as exc:
            log.warning("closing %s: %s", peer, exc)
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # a bug in a handler: keep serving everyone else
            tb = exc.__traceback__
            while tb is not None and tb.tb_next is not None:
                tb = tb.tb_next
            where = f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}" if tb else "?"
            log.error("closing %s: internal error %s: %s at %s", peer, type(exc).__name__, exc, where)
        finally:
            self._connections.discard(task)
            writer.close()


def run_broker(data_dir: Path, host: str, port: int, props: dict[str, str]) -> int:
    """Run a broker in the foreground until SIGTERM/SIGINT. Returns the process exit code."""
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # uvloop is a dependency, but the broker works without it
        pass
    config = BrokerConfig.from_properties(host, port, props)

    async def main() -> None:
        state = BrokerState(data_dir, config)
        server = BrokerServer(state)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, server.stop)
        await server.start()
        await server.serve_until_stopped()

    asyncio.run(main())
    return 0
