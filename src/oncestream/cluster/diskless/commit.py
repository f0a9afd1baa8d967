"""The commit of an uploaded produce object: offsets, idempotence and producer state in one transaction.

Sequence for one object (KIP-1163's commit, PostgreSQL as the batch coordinator):

1. ``record_uploading`` (its own small transaction, BEFORE the PUT): the object row in state
   'uploading', so an upload whose commit never happens is found and collected (``object_gc``).
2. The PUT (``append_pipeline``).
3. ``commit_uploaded`` (one transaction): the object row is locked and must still be 'uploading'
   (the garbage collector may have given up on a slow upload; a commit whose first attempt did
   commit finds it 'live'); the touched partitions are locked in (topic_id, partition) order; each
   request's batches are checked against the stored producer state with the single broker's rules
   (``log/producer_state``: ``find_duplicate``, ``check_batch``, ``apply_batch``); accepted batches
   get offsets from the high watermark and a row each; producer state, high watermarks and the
   object's state ('live', or 'deleting' when no batch of it was kept) are written; readers are
   notified on ``oncestream_appends``. The transaction's ``idle_in_transaction_session_timeout``
   (the broker's session timeout) bounds how long a broker paused inside it keeps the partitions
   locked: PostgreSQL ends the session and rolls it back, and the resumed broker runs the commit
   again (``MetadataStore.run`` retries SQLSTATE 25P03), where its batches are duplicates or not
   in sequence any more if the producer retried them through another broker meanwhile.

A transactional request is first verified (KIP-890 part 1, ``_verify_transaction``) against the
transaction coordinator's stored state of its transactional id, share-locked in this transaction.

Per-request errors (OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH, UNKNOWN_PRODUCER_ID,
INVALID_TXN_STATE, UNKNOWN_TOPIC_OR_PARTITION for a deleted topic, INVALID_RECORD for a duplicate
mixed with new batches) are answered for that request only: its batches get no row and leave no
state, and the other requests of the object commit. A retried batch equal to one of the producer's
last five on that partition is answered with its FIRST offsets and gets no row (its bytes in this
object become garbage).

Retrying: ``commit_uploaded`` is run by ``MetadataStore.run``, whole, after a retriable failure.
When the connection is lost after COMMIT was sent, ``read_back_commit`` decides: object 'uploading'
means nothing committed (run again); 'live' means it committed, and the answers are rebuilt from
the batch rows (a request with no row there, a duplicate or a refusal, is answered
REQUEST_TIMED_OUT: retriable, and its retry is answered exactly); 'deleting' or gone likewise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from oncestream.cluster.diskless.partition_rows import (
    BatchRow,
    Conn,
    LockedPartition,
    ProducerKey,
    TopicPartitionKey,
    insert_batches,
    load_producers,
    lock_partitions,
    notify_appends,
    store_high_watermarks,
    store_producers,
)
from oncestream.cluster.diskless.produce_object import PlacedAppend, PlacedBatch
from oncestream.cluster.leases.txn_state import stored_transaction
from oncestream.coordinator.txn.metadata import TxnSnapshot
from oncestream.coordinator.txn.verify import verify_snapshot
from oncestream.errors import InvalidRecordError, OnceStreamError
from oncestream.log.producer_state import BatchMetadata, ProducerEntry, apply_batch, check_batch
from oncestream.topic_partition import TopicPartition

DEFAULT_DELETE_GRACE_MS = 300_000


class ObjectNotUploadingError(OnceStreamError):
    """The object's row is no longer 'uploading' when its commit runs: the garbage collector gave
    up on it (an upload slower than its timeout) or an earlier attempt of this commit already
    committed it. Nothing was committed by this attempt (KAFKA_STORAGE_ERROR, retriable)."""

    code = ErrorCode.kafka_storage_error


@dataclass(frozen=True, slots=True)
class AppendOutcome:
    """The answer to one request's data for one partition (a ProduceResponse partition entry)."""

    error: ErrorCode = ErrorCode.none
    error_message: str | None = None
    base_offset: int = -1
    last_offset: int = -1
    log_start_offset: int = -1
    log_append_time_ms: int = -1  # -1 unless message.timestamp.type=LogAppendTime
    duplicate: bool = False

    @classmethod
    def failed(cls, error: ErrorCode, message: str | None) -> AppendOutcome:
        return cls(error=error, error_message=message)


async def record_uploading(conn: Conn, object_key: str, size_bytes: int, broker_id: int) -> None:
    """Record the object as 'uploading' (run as its own transaction before the PUT)."""
    await conn.execute(
        "INSERT INTO objects (object_key, state, size_bytes, created_by) VALUES (%s, 'uploading', %s, %s)",
        (object_key, size_bytes, broker_id),
    )


@dataclass(slots=True)
class _Staged:
    """One request's effect, applied to the partition only if all of its batches pass."""

    rows: list[tuple[PlacedBatch, int, int]]  # batch, base offset, last offset
    duplicates: list[BatchMetadata]
    producers: dict[int, ProducerEntry]
    next_offset: int


def _stage(append: PlacedAppend, partition: LockedPartition, key: TopicPartitionKey,
           producers: dict[ProducerKey, ProducerEntry]) -> _Staged:
    """Check one request's batches in order against the producer state (as
    ``ProducerAppend.check`` does for the single broker's log); raises the producer-state errors."""
    staged = _Staged([], [], {}, partition.high_watermark)
    for placed in append.batches:
        header = placed.header
        last_offset = staged.next_offset + header.last_offset_delta
        if header.has_producer_id:
            pid = header.producer_id
            committed = producers.get((*key, pid))
            if committed is not None and pid not in staged.producers:
                # Like Kafka, only what is already committed can be duplicated.
                duplicate = committed.find_duplicate(header.producer_epoch, header.base_sequence, header.last_sequence)
                if duplicate is not None:
                    staged.duplicates.append(duplicate)
                    continue
            entry = staged.producers.get(pid)
            if entry is None and committed is not None:
                entry = committed.copy()
            check_batch(entry, header)
            staged.producers[pid] = apply_batch(
                entry, header, staged.next_offset, last_offset, placed.max_timestamp_ms, append.append_time_ms)
        staged.rows.append((placed, staged.next_offset, last_offset))
        staged.next_offset = last_offset + 1
    if staged.duplicates and staged.rows:
        raise InvalidRecordError("a retried (duplicate) batch cannot be mixed with new batches")
    return staged


async def _verify_transaction(conn: Conn, append: PlacedAppend,
                              stored: dict[str, TxnSnapshot | None]) -> AppendOutcome | None:
    """KIP-890 part 1 for a transactional request: its partition must be in the producer's ongoing
    transaction with the same producer id and epoch, as the transaction coordinator stored it.
    The stored row is share-locked until this commit ends (``stored_transaction``), so the
    coordinator cannot move the transaction on (PrepareCommit/PrepareAbort, which precede the
    markers) between this check and the batches' commit: a verified batch always lies before its
    transaction's marker. None when it may be committed."""
    txn = append.txn
    transactional = [placed.header for placed in append.batches if placed.header.is_transactional]
    if not transactional or txn is None:
        # No transactional id: the Produce handler refuses a transactional batch without one
        # (INVALID_TXN_STATE), so only the library's own callers get here.
        return None
    if txn.transactional_id not in stored:
        stored[txn.transactional_id] = await stored_transaction(conn, txn.transactional_id, txn.state_partitions)
    tp = TopicPartition(txn.topic, append.partition)
    for header in transactional:
        error = verify_snapshot(stored[txn.transactional_id], header.producer_id, header.producer_epoch, (tp,))[tp]
        if error != ErrorCode.none:
            return AppendOutcome.failed(error, (
                f"{txn.topic}-{append.partition} is not in the ongoing transaction of {txn.transactional_id!r} "
                f"(producer {header.producer_id}, epoch {header.producer_epoch}): {error.name}"))
    return None


# The object's row, locked; the same round trip sets the transaction's idle timeout (unchanged
# when none is given) before any partition is locked.
_LOCK_OBJECT = """
SELECT state, set_config('idle_in_transaction_session_timeout',
                         COALESCE(%(idle_timeout)s, current_setting('idle_in_transaction_session_timeout')), true)
FROM objects WHERE object_key = %(key)s FOR UPDATE
"""


async def commit_uploaded(conn: Conn, object_key: str, appends: Sequence[PlacedAppend], *,
                          delete_grace_ms: int = DEFAULT_DELETE_GRACE_MS,
                          idle_timeout_ms: int | None = None) -> list[AppendOutcome]:
    """Commit the batches of an uploaded object (inside the caller's transaction); one outcome per
    request, in the order of ``appends``. Raises ObjectNotUploadingError when the object is not
    'uploading' any more (nothing is written then).

    ``idle_timeout_ms`` bounds how long a committer that stalls inside the transaction (a paused
    process) keeps the partitions locked: PostgreSQL ends its session after that long idle in the
    transaction (``idle_in_transaction_session_timeout``, this transaction only), which rolls it
    back. Without it every other broker's commit to those partitions waits for the stalled one, and
    as each broker commits one object at a time, all of its produce requests wait too."""
    cursor = await conn.execute(_LOCK_OBJECT, {"key": object_key, "idle_timeout": (
        None if idle_timeout_ms is None else str(int(idle_timeout_ms)))})
    row = await cursor.fetchone()
    if row is None or row[0] != "uploading":
        raise ObjectNotUploadingError(
            f"produce object {object_key} is {'gone' if row is None else row[0]!r}, not 'uploading': not committed")
    partitions = await lock_partitions(conn, ((a.topic_id, a.partition) for a in appends))
    producers = await load_producers(conn, (
        (a.topic_id, a.partition, b.header.producer_id)
        for a in appends if (a.topic_id, a.partition) in partitions
        for b in a.batches if b.header.has_producer_id))
    outcomes: list[AppendOutcome] = []
    rows: list[BatchRow] = []
    changed: dict[ProducerKey, ProducerEntry] = {}
    verified: dict[str, TxnSnapshot | None] = {}
    for append in appends:
        key = (append.topic_id, append.partition)
        partition = partitions.get(key)
        if partition is None:
            outcomes.append(AppendOutcome.failed(
                ErrorCode.unknown_topic_or_partition,
                f"partition {append.partition} of topic id {append.topic_id} does not exist"))
            continue
        refusal = await _verify_transaction(conn, append, verified)
        if refusal is not None:
            outcomes.append(refusal)
            continue
        try:
            staged = _stage(append, partition, key, producers)
        except OnceStreamError as exc:
            outcomes.append(AppendOutcome.failed(exc.code, str(exc)))
            continue
        append_time = append.append_time_ms if append.log_append_time else -1
        if staged.duplicates:
            first = staged.duplicates[0]
            outcomes.append(AppendOutcome(
                base_offset=first.first_offset, last_offset=staged.duplicates[-1].last_offset,
                log_start_offset=partition.log_start_offset,
                log_append_time_ms=first.timestamp_ms if append.log_append_time else -1, duplicate=True))
            continue
        for pid, entry in staged.producers.items():
            producers[(*key, pid)] = entry
            changed[(*key, pid)] = entry
        partition.high_watermark = staged.next_offset
        for placed, base_offset, last_offset in staged.rows:
            header = placed.header
            rows.append(BatchRow(
                append.topic_id, append.partition, base_offset, last_offset, object_key, None,
                placed.byte_offset, placed.byte_size, header.producer_id, header.producer_epoch,
                header.base_sequence, header.last_sequence, header.is_transactional, False,
                placed.timestamp_type, placed.max_timestamp_ms, append.append_time_ms))
        outcomes.append(AppendOutcome(
            base_offset=staged.rows[0][1], last_offset=staged.rows[-1][2],
            log_start_offset=partition.log_start_offset, log_append_time_ms=append_time))
    await insert_batches(conn, rows)
    await store_producers(conn, changed)
    moved = await store_high_watermarks(conn, partitions)
    if rows:
        await conn.execute("UPDATE objects SET state = 'live' WHERE object_key = %s", (object_key,))
    else:
        # Nothing of it was kept (all duplicates or refused): garbage at once, after the grace.
        await conn.execute(
            "UPDATE objects SET state = 'deleting', delete_after = now() + %s * interval '1 millisecond'"
            " WHERE object_key = %s", (delete_grace_ms, object_key))
    await notify_appends(conn, moved)
    return outcomes


async def read_back_commit(conn: Conn, object_key: str, appends: Sequence[PlacedAppend]) -> list[AppendOutcome] | None:
    """After a commit whose outcome is unknown: None if it did not happen (the object is still
    'uploading': run the commit again), else the answers rebuilt from the committed rows."""
    cursor = await conn.execute("SELECT state FROM objects WHERE object_key = %s", (object_key,))
    row = await cursor.fetchone()
    if row is not None and row[0] == "uploading":
        return None
    cursor = await conn.execute(
        "SELECT b.topic_id, b.partition, b.byte_offset, b.base_offset, b.last_offset, p.log_start_offset"
        " FROM batches b JOIN partitions p ON p.topic_id = b.topic_id AND p.partition = b.partition"
        " WHERE b.object_key = %s", (object_key,))
    committed = {(t, p, pos): (base, last, lso) for t, p, pos, base, last, lso in await cursor.fetchall()}
    unknown = AppendOutcome.failed(
        ErrorCode.request_timed_out,
        f"the commit of produce object {object_key} lost its connection; this partition's data was not "
        "written by it (a retry is answered exactly)")
    outcomes: list[AppendOutcome] = []
    for append in appends:
        found = [committed.get((append.topic_id, append.partition, b.byte_offset)) for b in append.batches]
        present = [f for f in found if f is not None]
        if not present or len(present) != len(found):
            outcomes.append(unknown)
            continue
        first, last = present[0], present[-1]
        outcomes.append(AppendOutcome(
            base_offset=first[0], last_offset=last[1], log_start_offset=first[2],
            log_append_time_ms=append.append_time_ms if append.log_append_time else -1))
    return outcomes
