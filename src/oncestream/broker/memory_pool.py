"""One broker-wide budget for request bytes being read or handled (``queued.max.request.bytes``).

Kafka's MemoryPool idea, sans-io: before a connection reads a request body it reserves the size
its prefix announced; the reservation is given back once the request's response is written, or
the connection dies. A frame that cannot get its reservation closes its own connection (the
client reconnects and retries), so the bytes held by requests stay bounded however many clients
send large requests at once, and the connections that did get memory keep being served.

Frames of at most ``ALWAYS_ADMITTED_BYTES`` (1 MiB) are always admitted and counted: ordinary
requests (heartbeats, metadata, small produces) must never be refused because a few large ones
hold the pool, and their total is bounded anyway by ``max.connections`` x 1 MiB.
"""

from __future__ import annotations

from oncestream.errors import InvalidConfigError

ALWAYS_ADMITTED_BYTES = 1024 * 1024
DEFAULT_QUEUED_MAX_REQUEST_BYTES = 256 * 1024 * 1024


class PoolAccountingError(RuntimeError):
    """A release that was never reserved: the server's bookkeeping is wrong (a bug, not input)."""


class RequestMemoryPool:
    """Reservations of request bytes against one capacity; ``capacity_bytes=-1`` is unbounded
    (Kafka's ``queued.max.request.bytes=-1``)."""

    def __init__(self, capacity_bytes: int) -> None:
        if capacity_bytes < -1 or capacity_bytes == 0:
            raise InvalidConfigError(f"queued.max.request.bytes must be -1 or positive, not {capacity_bytes}")
        self.capacity_bytes = capacity_bytes
        self.reserved_bytes = 0
        self.refused_count = 0  # reservations refused, for logs and tests

    @property
    def bounded(self) -> bool:
        """False for ``-1``: every reservation succeeds (only counted)."""
        return self.capacity_bytes >= 0

    @property
    def available_bytes(self) -> int:
        """Bytes a large frame may still reserve (never negative, even when small frames went over)."""
        if not self.bounded:
            return 2**63 - 1
        return max(0, self.capacity_bytes - self.reserved_bytes)

    def try_reserve(self, size_bytes: int) -> bool:
        """Reserve ``size_bytes`` for one frame; False (nothing reserved) when it does not fit."""
        if size_bytes < 0:
            raise PoolAccountingError(f"cannot reserve a negative size ({size_bytes})")
        if self.bounded and size_bytes > ALWAYS_ADMITTED_BYTES and size_bytes > self.available_bytes:
            self.refused_count += 1
            return False
        self.reserved_bytes += size_bytes
        return True

    def release(self, size_bytes: int) -> None:
        """Give back a reservation made by ``try_reserve``."""
        if size_bytes < 0 or size_bytes > self.reserved_bytes:
            raise PoolAccountingError(
                f"releasing {size_bytes} bytes with only {self.reserved_bytes} reserved"
            )
        self.reserved_bytes -= size_bytes
