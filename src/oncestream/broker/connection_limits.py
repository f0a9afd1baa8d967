"""Per-connection limits, sans-io: how many connections (``max.connections``,
``max.connections.per.ip`` with ``max.connections.per.ip.overrides``) and how long one may sit
idle (``connections.max.idle.ms``). The server feeds them times and addresses; they decide.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from oncestream.errors import InvalidConfigError

UNLIMITED = 2**31 - 1  # Kafka's default for both connection limits (Int.MaxValue)


class ConnectionAccountingError(RuntimeError):
    """A connection released that was never admitted: the server's bookkeeping is wrong."""


def parse_per_ip_overrides(text: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count`` pairs separated by commas (Kafka's
    format). Hosts are matched against the peer's IP address as the socket reports it."""
    overrides: dict[str, int] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, count_text = item.rpartition(":")
        if not sep or not host.strip():
            raise InvalidConfigError(f"max.connections.per.ip.overrides: {item!r} is not host:count")
        try:
            count = int(count_text)
        except ValueError:
            raise InvalidConfigError(f"max.connections.per.ip.overrides: {item!r} is not host:count") from None
        if count < 0:
            raise InvalidConfigError(f"max.connections.per.ip.overrides: {item!r} has a negative count")
        overrides[host.strip()] = count
    return overrides


class ConnectionQuotas:
    """Counts open connections, broker-wide and per peer IP, and admits or refuses new ones.

    Kafka closes a connection over the per-IP limit at accept; for ``max.connections`` it stops
    accepting until a slot frees. Here both close the new connection at once: a client retries
    with backoff either way, and a refused socket costs the broker nothing while it waits.
    """

    def __init__(
        self,
        max_connections: int = UNLIMITED,
        max_per_ip: int = UNLIMITED,
        per_ip_overrides: Mapping[str, int] | None = None,
    ) -> None:
        if max_connections < 1 or max_per_ip < 0:
            raise InvalidConfigError("max.connections must be >= 1 and max.connections.per.ip >= 0")
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.per_ip_overrides = dict(per_ip_overrides or {})
        self._per_ip: Counter[str] = Counter()
        self.total = 0

    def limit_for(self, ip: str) -> int:
        """The per-IP limit that applies to ``ip`` (its override, else ``max.connections.per.ip``)."""
        return self.per_ip_overrides.get(ip, self.max_per_ip)

    def count(self, ip: str) -> int:
        """Open connections from ``ip``."""
        return self._per_ip[ip]

    def try_admit(self, ip: str) -> str | None:
        """Count a new connection from ``ip``; None when admitted, else why it is refused (and
        nothing is counted)."""
        if self.total >= self.max_connections:
            return f"max.connections={self.max_connections} reached"
        limit = self.limit_for(ip)
        if self._per_ip[ip] >= limit:
            return f"max.connections.per.ip={limit} reached for {ip}"
        self._per_ip[ip] += 1
        self.total += 1
        return None

    def release(self, ip: str) -> None:
        """Forget an admitted connection from ``ip`` (it closed)."""
        if self._per_ip[ip] <= 0:
            raise ConnectionAccountingError(f"releasing a connection from {ip} that was never admitted")
        self._per_ip[ip] -= 1
        if not self._per_ip[ip]:
            del self._per_ip[ip]
        self.total -= 1


class IdleTracker:
    """When a connection last moved bytes, and whether it has now been idle too long.

    Idle means the broker waits for the client (for the next request's bytes, or for the client to
    take a response) and no byte moved for ``idle_ms``. While the broker itself works on a request
    (a long-poll fetch, a JoinGroup waiting out a rebalance) the clock does not run: that wait is
    bounded by the request's own timeouts, and a client waiting for its answer is not idle.
    Times are monotonic milliseconds.
    """

    def __init__(self, idle_ms: int, now_ms: float) -> None:
        if idle_ms < 1:
            raise InvalidConfigError(f"connections.max.idle.ms must be positive, not {idle_ms}")
        self.idle_ms = idle_ms
        self.last_activity_ms = now_ms
        self.busy = False

    def activity(self, now_ms: float) -> None:
        """Bytes moved in either direction."""
        self.last_activity_ms = max(self.last_activity_ms, now_ms)

    def start_request(self) -> None:
        """The broker starts working on a request: the idle clock stops."""
        self.busy = True

    def finish_request(self, now_ms: float) -> None:
        """The broker has its answer (or none is due): the idle clock starts again from now."""
        self.busy = False
        self.activity(now_ms)

    def deadline_ms(self) -> float | None:
        """When the connection becomes idle if nothing moves, None while a request is handled."""
        return None if self.busy else self.last_activity_ms + self.idle_ms

    def expired(self, now_ms: float) -> bool:
        """True when the connection has been idle for ``idle_ms``."""
        deadline = self.deadline_ms()
        return deadline is not None and now_ms >= deadline
