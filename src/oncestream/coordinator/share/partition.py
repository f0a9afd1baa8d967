"""One share-partition (KIP-932): which records of one topic partition a share group has handed
out, to whom, how often, and which are done. Sans-io: the broker reads the log and passes the
batches it found; time is the caller's monotonic clock.

The window of in-flight records runs from the share-partition start offset (SPSO, every record
below it is done) to the end offset (SPEO, exclusive: the first offset never yet considered).
Every offset inside the window has one ``InFlightRecord`` whose state follows ``TRANSITIONS``:

    AVAILABLE    -> ACQUIRED (handed to a member, delivery count + 1, lock until now + lock)
                 -> ARCHIVED (no longer deliverable: a control record, an aborted record, a gap)
    ACQUIRED     -> ACKNOWLEDGED (ACCEPT)
                 -> ARCHIVED (REJECT, GAP, or RELEASE / lock expiry at the delivery count limit)
                 -> AVAILABLE (RELEASE, lock expiry, the member left: delivered again later)
    ACKNOWLEDGED, ARCHIVED: terminal

Records are tracked one offset each (Kafka keeps batches and splits them on demand; the window is
bounded by ``max_record_locks`` so one entry per offset stays small). Every change is remembered
until ``take_changes`` hands it to the persistence layer (records.py): an acquisition is
persisted as AVAILABLE with its new delivery count, so after a crash an acquired record is
delivered again and its count is kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum

from kio.schema.errors import ErrorCode


class RecordState(IntEnum):
    """A record's delivery state; the persisted numbers are Kafka's (0, 2, 4; 1 is in memory)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


TRANSITIONS: dict[RecordState, frozenset[RecordState]] = {
    RecordState.AVAILABLE: frozenset({RecordState.ACQUIRED, RecordState.ARCHIVED}),
    RecordState.ACQUIRED: frozenset({RecordState.AVAILABLE, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED}),
    RecordState.ACKNOWLEDGED: frozenset(),
    RecordState.ARCHIVED: frozenset(),
}
TERMINAL = frozenset({RecordState.ACKNOWLEDGED, RecordState.ARCHIVED})


class AckType(IntEnum):
    """ShareFetch/ShareAcknowledge acknowledge types."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


class IllegalTransitionError(RuntimeError):
    """A record was moved along an edge ``TRANSITIONS`` does not have: a bug, not input."""


@dataclass(frozen=True)
class SharePartitionConfig:
    """The broker's share-group settings that act on one partition (Kafka's names and defaults)."""

    record_lock_duration_ms: int = 30000  # group.share.record.lock.duration.ms
    delivery_count_limit: int = 5  # group.share.delivery.count.limit
    max_record_locks: int = 2000  # group.share.partition.max.record.locks


@dataclass(slots=True)
class InFlightRecord:
    state: RecordState
    delivery_count: int
    member_id: str | None = None
    lock_deadline_ms: int = 0


@dataclass(frozen=True, slots=True)
class LogSpan:
    """One batch of the log as the broker read it: offsets ``first_offset..last_offset``;
    ``deliverable`` False for a batch no consumer may see (a transaction marker, or an aborted
    transaction's batch under read_committed)."""

    first_offset: int
    last_offset: int
    deliverable: bool = True


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    """Records handed to a member (inclusive range) and their delivery count."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class StateBatch:
    """Persisted state of a run of offsets (Kafka's StateBatch: 0 available, 2 acked, 4 archived)."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class AckBatch:
    """One acknowledgement batch of a request: one type for all its offsets, or one per offset."""

    first_offset: int
    last_offset: int
    types: tuple[int, ...]


class SharePartition:
    """The in-flight records of one share group on one topic partition."""

    def __init__(self, config: SharePartitionConfig, start_offset: int) -> None:
        self.config = config
        self.start_offset = start_offset
        self.end_offset = start_offset
        self._records: dict[int, InFlightRecord] = {}
        self._changed: set[int] = set()
        self._start_changed = True

    # --- reading ------------------------------------------------------------------------------

    def record(self, offset: int) -> InFlightRecord | None:
        """The in-flight entry of ``offset`` (None outside the window)."""
        return self._records.get(offset)

    def in_flight(self) -> int:
        """How many offsets the window holds (bounded by ``max_record_locks`` for new records)."""
        return self.end_offset - self.start_offset

    def next_fetch_offset(self, now_ms: int) -> int:
        """Where the broker should start reading the log: the first AVAILABLE record, else the
        end offset."""
        self.expire_locks(now_ms)
        for offset in range(self.start_offset, self.end_offset):
            if self._records[offset].state == RecordState.AVAILABLE:
                return offset
        return self.end_offset

    def can_acquire(self, now_ms: int) -> bool:
        """Whether an acquisition could hand something out without new log records (a record is
        AVAILABLE again) or the window has room for new ones."""
        return self.next_fetch_offset(now_ms) < self.end_offset or self.in_flight() < self.config.max_record_locks

    def next_lock_deadline_ms(self) -> int | None:
        """The earliest acquisition-lock deadline, or None when nothing is acquired."""
        deadlines = [r.lock_deadline_ms for r in self._records.values() if r.state == RecordState.ACQUIRED]
        return min(deadlines) if deadlines else None

    def acquired_by(self, member_id: str) -> list[int]:
        """Offsets currently acquired by ``member_id``."""
        return [o for o, r in self._records.items() if r.state == RecordState.ACQUIRED and r.member_id == member_id]

    # --- changing -----------------------------------------------------------------------------

    def _move(self, offset: int, record: InFlightRecord, new_state: RecordState) -> None:
        if new_state not in TRANSITIONS[record.state]:
            raise IllegalTransitionError(f"offset {offset}: {record.state.name} -> {new_state.name}")
        record.state = new_state
        if new_state != RecordState.ACQUIRED:
            record.member_id = None
            record.lock_deadline_ms = 0
        self._changed.add(offset)

    def _give_back(self, offset: int, record: InFlightRecord) -> None:
        """RELEASE, lock expiry or member departure: deliverable again unless the delivery limit
        is reached (then archived, as Kafka's poison-record rule)."""
        if record.delivery_count >= self.config.delivery_count_limit:
            self._move(offset, record, RecordState.ARCHIVED)
        else:
            self._move(offset, record, RecordState.AVAILABLE)

    def _advance_start(self) -> None:
        start = self.start_offset
        while start < self.end_offset and self._records[start].state in TERMINAL:
            del self._records[start]
            self._changed.discard(start)
            start += 1
        if start != self.start_offset:
            self.start_offset = start
            self._start_changed = True

    def expire_locks(self, now_ms: int) -> list[int]:
        """Give back every record whose lock ran out; returns their offsets."""
        expired = [o for o, r in self._records.items()
                   if r.state == RecordState.ACQUIRED and r.lock_deadline_ms <= now_ms]
        for offset in expired:
            self._give_back(offset, self._records[offset])
        if expired:
            self._advance_start()
        return expired

    def acquire(self, member_id: str, spans: Iterable[LogSpan], max_records: int, now_ms: int) -> list[AcquiredRange]:
        """Hand ``member_id`` up to ``max_records`` records out of ``spans`` (batches of the log in
        offset order, as read from ``next_fetch_offset``): AVAILABLE records of the window first
        as they come, then new records past the end offset while the window has room.
        Undeliverable spans are archived."""
        self.expire_locks(now_ms)
        deadline = now_ms + self.config.record_lock_duration_ms
        acquired: list[tuple[int, int]] = []
        full = False
        for span in spans:
            if full or len(acquired) >= max_records:
                break
            for offset in range(max(span.first_offset, self.start_offset), span.last_offset + 1):
                if offset < self.end_offset:
                    record = self._records[offset]
                    if record.state != RecordState.AVAILABLE:
                        continue
                    if not span.deliverable:
                        self._move(offset, record, RecordState.ARCHIVED)
                        continue
                else:
                    if span.deliverable and (len(acquired) >= max_records
                                             or self.in_flight() >= self.config.max_record_locks):
                        full = True  # nothing past this offset may enter the window now
                        break
                    # Offsets the log no longer has between the end and this batch (compacted
                    # away) can never be delivered: they enter the window archived.
                    for missing in range(self.end_offset, offset):
                        self._records[missing] = InFlightRecord(RecordState.ARCHIVED, 0)
                        self._changed.add(missing)
                    record = InFlightRecord(RecordState.AVAILABLE, 0)
                    self._records[offset] = record
                    self.end_offset = offset + 1
                    if not span.deliverable:
                        self._move(offset, record, RecordState.ARCHIVED)
                        continue
                if len(acquired) >= max_records:
                    break
                self._move(offset, record, RecordState.ACQUIRED)
                record.member_id = member_id
                record.lock_deadline_ms = deadline
                record.delivery_count += 1
                acquired.append((offset, record.delivery_count))
        self._advance_start()
        return _ranges(acquired)

    def acknowledge(self, member_id: str, batches: Sequence[AckBatch], now_ms: int, *,
                    allow_renew: bool = False) -> ErrorCode:
        """Apply one request's acknowledgements for this partition, all or nothing: every offset
        must be ACQUIRED by ``member_id`` (INVALID_RECORD_STATE otherwise) and every type valid
        (INVALID_REQUEST); on an error nothing changes."""
        self.expire_locks(now_ms)
        allowed = {AckType.GAP, AckType.ACCEPT, AckType.RELEASE, AckType.REJECT}
        if allow_renew:
            allowed.add(AckType.RENEW)
        plan: list[tuple[int, int]] = []
        previous_last = -1
        for batch in batches:
            count = batch.last_offset - batch.first_offset + 1
            if count <= 0 or batch.first_offset <= previous_last or len(batch.types) not in (1, count):
                return ErrorCode.invalid_request
            if any(t not in allowed for t in batch.types):
                return ErrorCode.invalid_request
            previous_last = batch.last_offset
            for i, offset in enumerate(range(batch.first_offset, batch.last_offset + 1)):
                plan.append((offset, batch.types[0] if len(batch.types) == 1 else batch.types[i]))
        for offset, _ in plan:
            record = self._records.get(offset)
            if record is None or record.state != RecordState.ACQUIRED or record.member_id != member_id:
                return ErrorCode.invalid_record_state
        renew_deadline = now_ms + self.config.record_lock_duration_ms
        for offset, ack_type in plan:
            record = self._records[offset]
            if ack_type == AckType.ACCEPT:
                self._move(offset, record, RecordState.ACKNOWLEDGED)
            elif ack_type == AckType.RELEASE:
                self._give_back(offset, record)
            elif ack_type == AckType.RENEW:
                record.lock_deadline_ms = renew_deadline
            else:  # GAP, REJECT
                self._move(offset, record, RecordState.ARCHIVED)
        self._advance_start()
        return ErrorCode.none

    def release_member(self, member_id: str) -> list[int]:
        """Give back everything ``member_id`` holds (it left the group or closed its session)."""
        offsets = self.acquired_by(member_id)
        for offset in offsets:
            self._give_back(offset, self._records[offset])
        self._advance_start()
        return offsets

    def move_start(self, offset: int) -> None:
        """The log no longer has records below ``offset`` (retention, DeleteRecords) or an admin
        moved the start: everything below it is done."""
        if offset <= self.start_offset:
            return
        for o in range(self.start_offset, min(offset, self.end_offset)):
            self._records.pop(o, None)
            self._changed.discard(o)
        self.start_offset = offset
        self.end_offset = max(self.end_offset, offset)
        self._start_changed = True

    # --- persistence --------------------------------------------------------------------------

    def take_changes(self) -> tuple[int, list[StateBatch]] | None:
        """What changed since the last call, as Kafka's ShareUpdate carries it (start offset,
        state batches), or None if nothing did."""
        changed = sorted(o for o in self._changed if o in self._records)
        self._changed.clear()
        if not changed and not self._start_changed:
            return None
        self._start_changed = False
        return self.start_offset, self._batches(changed)

    def snapshot(self) -> tuple[int, list[StateBatch]]:
        """The whole persisted state (Kafka's ShareSnapshot)."""
        return self.start_offset, self._batches(range(self.start_offset, self.end_offset))

    def _batches(self, offsets: Iterable[int]) -> list[StateBatch]:
        out: list[StateBatch] = []
        for offset in offsets:
            record = self._records[offset]
            state = RecordState.AVAILABLE if record.state == RecordState.ACQUIRED else record.state
            last = out[-1] if out else None
            if (last is not None and last.last_offset + 1 == offset and last.delivery_state == state
                    and last.delivery_count == record.delivery_count):
                out[-1] = StateBatch(last.first_offset, offset, last.delivery_state, last.delivery_count)
            else:
                out.append(StateBatch(offset, offset, int(state), record.delivery_count))
        return out

    def apply_persisted(self, start_offset: int, batches: Iterable[StateBatch], *, replace: bool) -> None:
        """Replay one persisted record: a snapshot (``replace``) or an update over what is there.
        Nothing is acquired after a replay: acquired records were persisted AVAILABLE."""
        if replace:
            self._records.clear()
            self.start_offset = self.end_offset = start_offset
        elif start_offset >= 0:
            self.move_start(start_offset)
        for batch in batches:
            for offset in range(max(batch.first_offset, self.start_offset), batch.last_offset + 1):
                self._records[offset] = InFlightRecord(RecordState(batch.delivery_state), batch.delivery_count)
                for missing in range(self.end_offset, offset):
                    self._records.setdefault(missing, InFlightRecord(RecordState.AVAILABLE, 0))
                self.end_offset = max(self.end_offset, offset + 1)
        self._advance_start()
        self._changed.clear()
        self._start_changed = False


def _ranges(acquired: list[tuple[int, int]]) -> list[AcquiredRange]:
    out: list[AcquiredRange] = []
    for offset, count in acquired:
        last = out[-1] if out else None
        if last is not None and last.last_offset + 1 == offset and last.delivery_count == count:
            out[-1] = AcquiredRange(last.first_offset, offset, count)
        else:
            out.append(AcquiredRange(offset, offset, count))
    return out
