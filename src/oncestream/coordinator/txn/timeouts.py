"""Transaction timeouts and transactional-id expiry on the monotonic clock.

:class:`TxnTimers` remembers, per transactional id, the monotonic time at which its Ongoing
transaction started and at which it last changed state, and says which ids are due: an Ongoing
transaction past its timeout is to be fenced and aborted (KIP-939 two-phase-commit transactions
never time out), an id idle in Empty/Complete* for transactional.id.expiration.ms is to expire.
Monotonic times are never persisted; after a restart :meth:`TxnTimers.reset` derives them once
from the persisted wall-clock timestamps, the age clamped to ``[0, timeout]`` so a wall step
while the broker was down cannot stretch a timeout. The coordinator prepares the writes.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from oncestream.coordinator.txn.metadata import TransactionMetadata
from oncestream.coordinator.txn.state import EXPIRATION_ALLOWED, TxnState


class TimerAction(enum.Enum):
    """What a due transactional id needs: fence-and-abort its transaction, or expire the id."""

    FENCE = "fence"
    EXPIRE = "expire"


class TxnTimers:
    """Monotonic start / last-update times per transactional id; see the module docstring."""

    def __init__(self) -> None:
        self._ongoing_since_mono: dict[str, int] = {}
        self._updated_mono: dict[str, int] = {}

    def reset(
        self, txns: Mapping[str, TransactionMetadata], now_ms: int, mono_ms: int, expiration_ms: int
    ) -> None:
        """Forget every time and derive each id's from its persisted wall timestamps (a load)."""
        self._ongoing_since_mono.clear()
        self._updated_mono.clear()
        for tid, meta in txns.items():
            s = meta.current
            # One wall-clock reading turns each persisted age into a monotonic time; the clamp
            # keeps an overdue transaction overdue and a "future" timestamp (the wall clock
            # stepped back) from granting more than one whole timeout.
            updated_age_ms = min(max(now_ms - s.last_update_timestamp_ms, 0), expiration_ms)
            self._updated_mono[tid] = mono_ms - updated_age_ms
            if s.state is TxnState.ONGOING:
                started_age_ms = min(max(now_ms - s.start_timestamp_ms, 0), s.timeout_ms + 1)
                self._ongoing_since_mono[tid] = mono_ms - started_age_ms

    def forget(self, transactional_id: str) -> None:
        """The id expired: drop its times."""
        self._updated_mono.pop(transactional_id, None)
        self._ongoing_since_mono.pop(transactional_id, None)

    def on_transition(self, transactional_id: str, was_ongoing: bool, is_ongoing: bool, mono_ms: int) -> None:
        """A transition of the id became durable at ``mono_ms``: it was updated then, and its
        transaction started then if it just became Ongoing (or has none if it left Ongoing)."""
        self._updated_mono[transactional_id] = mono_ms
        if not is_ongoing:
            self._ongoing_since_mono.pop(transactional_id, None)
        elif not was_ongoing:
            self._ongoing_since_mono[transactional_id] = mono_ms

    def due(
        self, txns: Mapping[str, TransactionMetadata], mono_ms: int, expiration_ms: int
    ) -> list[tuple[TransactionMetadata, TimerAction]]:
        """Ids with no transition in flight that are due at ``mono_ms``, in transactional-id
        order. An id with no time noted yet starts counting now."""
        expire_before_mono = mono_ms - expiration_ms
        result: list[tuple[TransactionMetadata, TimerAction]] = []
        for tid in sorted(txns):
            meta = txns[tid]
            if meta.pending is not None:
                continue
            s = meta.current
            if s.state is TxnState.ONGOING:
                started_mono = self._ongoing_since_mono.setdefault(tid, mono_ms)
                if not s.is_exempt_from_timeout and started_mono + s.timeout_ms < mono_ms:
                    result.append((meta, TimerAction.FENCE))
            elif s.state in EXPIRATION_ALLOWED and self._updated_mono.setdefault(tid, mono_ms) <= expire_before_mono:
                result.append((meta, TimerAction.EXPIRE))
        return result
