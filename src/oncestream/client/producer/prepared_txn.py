"""KIP-939 ``PreparedTxnState``: the identity of a prepared transaction, stored by the application
in its external system (a database row written in the same local transaction as its own data), and
handed to ``Producer.complete_transaction`` after a restart to decide commit (it matches the
transaction the broker kept) or abort (it does not).

``str(state)`` is ``"<producerId>:<epoch>"``; the empty state (no prepared transaction) is ``""``.
"""

from __future__ import annotations

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


class PreparedTxnState:
    """(producer id, epoch) of a prepared transaction; immutable, comparable, serializable."""

    __slots__ = ("_epoch", "_producer_id")

    def __init__(self, producer_id: int = NO_PRODUCER_ID, epoch: int = NO_PRODUCER_EPOCH) -> None:
        if (producer_id == NO_PRODUCER_ID) != (epoch == NO_PRODUCER_EPOCH):
            raise ValueError("producer id and epoch are both set or both -1")
        if producer_id != NO_PRODUCER_ID and (producer_id < 0 or not 0 <= epoch <= 32767):
            raise ValueError(f"invalid producer id/epoch {producer_id}:{epoch}")
        self._producer_id = int(producer_id)
        self._epoch = int(epoch)

    @classmethod
    def from_string(cls, serialized: str | None) -> PreparedTxnState:
        """Parse ``"<producerId>:<epoch>"``; empty or None gives the empty state."""
        if serialized is None or serialized == "":
            return cls()
        parts = serialized.split(":")
        if len(parts) != 2:
            raise ValueError(f"invalid serialized transaction state {serialized!r}")
        try:
            producer_id, epoch = int(parts[0]), int(parts[1])
        except ValueError:
            raise ValueError(f"invalid serialized transaction state {serialized!r}") from None
        if producer_id < 0 or epoch < 0:
            raise ValueError(f"invalid producer id and epoch {serialized!r}: both must be >= 0")
        return cls(producer_id, epoch)

    @property
    def producer_id(self) -> int:
        """Producer id of the prepared transaction (-1 for the empty state)."""
        return self._producer_id

    @property
    def epoch(self) -> int:
        """Producer epoch of the prepared transaction (-1 for the empty state)."""
        return self._epoch

    def has_transaction(self) -> bool:
        """False for the empty state."""
        return self._producer_id != NO_PRODUCER_ID

    def __str__(self) -> str:
        return f"{self._producer_id}:{self._epoch}" if self.has_transaction() else ""

    def __repr__(self) -> str:
        return f"PreparedTxnState({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PreparedTxnState):
            return NotImplemented
        return (self._producer_id, self._epoch) == (other._producer_id, other._epoch)

    def __hash__(self) -> int:
        return hash((self._producer_id, self._epoch))

    def __bool__(self) -> bool:
        return self.has_transaction()
