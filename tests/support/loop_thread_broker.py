"""A broker (``BrokerState`` + ``BrokerServer``) served on its own event-loop thread in this
process: tests drive it over real sockets and reach its state through ``on_loop``."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import TypeVar

from oncestream.broker.server import BrokerServer
from oncestream.broker.state import BrokerState
from tests.support.wire import WireConnection

T = TypeVar("T")
WAIT_S = 30.0  # a bound on a hang only


class LoopThreadBroker:
    """Serves ``state`` on a private loop thread from construction until ``stop``."""

    def __init__(self, state: BrokerState) -> None:
        self.state = state
        self.server = BrokerServer(state)
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="broker-loop", daemon=True)
        self._thread.start()
        if not self._started.wait(WAIT_S):
            raise RuntimeError("broker did not start")

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._main())
        self._loop.close()

    async def _main(self) -> None:
        await self.server.start()
        self._started.set()
        await self.server.serve_until_stopped()

    @property
    def port(self) -> int:
        return self.state.config.port

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def connect(self) -> WireConnection:
        return WireConnection("127.0.0.1", self.port)

    def on_loop(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the broker's loop (its logs belong to it) and return its result."""
        async def call() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(WAIT_S)

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self.server.stop)
        self._thread.join(WAIT_S)
