"""Transaction markers on diskless partitions (Kafka's WriteTxnMarkers, KIP-98 / KIP-890).

``write_markers`` writes COMMIT or ABORT control batches for producers' transactions, inside the
caller's transaction (the transaction coordinator runs it in the same PostgreSQL transaction that
checks its lease epoch, which is how a deposed coordinator is fenced: see ``cluster/leases``). A
marker is small, so its bytes live inline in its ``batches`` row (built with the record encoder's
``encode_control_batch``, as the single broker's ``append_marker`` does) and take the next offset
of the partition like any batch. The producer's row goes through the single broker's rules
(``check_batch``: a marker with an epoch older than the producer's is refused
INVALID_PRODUCER_EPOCH, a newer one becomes the producer's; ``apply_batch``: the open transaction
is closed, ``txn_first_offset`` cleared). An ABORT that closes an open transaction records its
range in ``aborted_txns`` (first offset .. the marker's offset) for read_committed readers. A
marker for a producer with no open transaction here is still written (the coordinator retries
markers after a crash) and changes nothing else. Errors are per marker; the others are written.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from oncestream.cluster.diskless.partition_rows import (
    BatchRow,
    Conn,
    ProducerKey,
    insert_batches,
    load_producers,
    lock_partitions,
    notify_appends,
    store_high_watermarks,
    store_producers,
)
from oncestream.cluster.diskless.produce_object import TIMESTAMP_TYPE_CREATE_TIME
from oncestream.errors import OnceStreamError
from oncestream.log.producer_state import NO_OFFSET, ProducerEntry, apply_batch, check_batch
from oncestream.log.transactions import ControlMarker
from oncestream.protocol.markers import CONTROL_ABORT, CONTROL_COMMIT
from oncestream.protocol.record_batch import parse_header
from oncestream.protocol.records import encode_control_batch


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """One marker to write: end ``producer_id``'s transaction on one partition."""

    topic_id: uuid.UUID
    partition: int
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int


@dataclass(frozen=True, slots=True)
class MarkerOutcome:
    """The answer for one marker (a WriteTxnMarkers partition result)."""

    error: ErrorCode = ErrorCode.none
    error_message: str | None = None
    offset: int = -1  # the marker's offset when written


async def write_markers(conn: Conn, markers: Sequence[TxnMarker], now_ms: int) -> list[MarkerOutcome]:
    """Write the markers (inside the caller's transaction); one outcome per marker, in order."""
    partitions = await lock_partitions(conn, ((m.topic_id, m.partition) for m in markers))
    producers = await load_producers(conn, (
        (m.topic_id, m.partition, m.producer_id) for m in markers if (m.topic_id, m.partition) in partitions))
    changed: dict[ProducerKey, ProducerEntry] = {}
    rows: list[BatchRow] = []
    aborted: list[tuple[uuid.UUID, int, int, int, int]] = []
    outcomes: list[MarkerOutcome] = []
    for marker in markers:
        partition = partitions.get((marker.topic_id, marker.partition))
        if partition is None:
            outcomes.append(MarkerOutcome(
                ErrorCode.unknown_topic_or_partition,
                f"partition {marker.partition} of topic id {marker.topic_id} does not exist"))
            continue
        batch = encode_control_batch(
            marker=CONTROL_COMMIT if marker.commit else CONTROL_ABORT, producer_id=marker.producer_id,
            producer_epoch=marker.producer_epoch, coordinator_epoch=marker.coordinator_epoch, now_ms=now_ms)
        header = parse_header(batch)
        key: ProducerKey = (marker.topic_id, marker.partition, marker.producer_id)
        stored = producers.get(key)
        entry = stored.copy() if stored is not None else None
        try:
            check_batch(entry, header)
        except OnceStreamError as exc:
            outcomes.append(MarkerOutcome(exc.code, str(exc)))
            continue
        offset = partition.high_watermark
        txn_first_offset = entry.current_txn_first_offset if entry is not None else NO_OFFSET
        updated = apply_batch(entry, header, offset, offset, now_ms, now_ms,
                              ControlMarker(marker.commit, marker.coordinator_epoch))
        producers[key] = changed[key] = updated
        partition.high_watermark = offset + 1
        if not marker.commit and txn_first_offset != NO_OFFSET:
            aborted.append((marker.topic_id, marker.partition, marker.producer_id, txn_first_offset, offset))
        rows.append(BatchRow(
            marker.topic_id, marker.partition, offset, offset, None, batch, 0, len(batch), marker.producer_id,
            marker.producer_epoch, -1, -1, True, True, TIMESTAMP_TYPE_CREATE_TIME, now_ms, now_ms))
        outcomes.append(MarkerOutcome(offset=offset))
    await insert_batches(conn, rows)
    if aborted:
        async with conn.cursor() as cursor:
            await cursor.executemany(
                "INSERT INTO aborted_txns (topic_id, partition, producer_id, first_offset, last_offset)"
                " VALUES (%s, %s, %s, %s, %s)", aborted)
    await store_producers(conn, changed)
    await notify_appends(conn, await store_high_watermarks(conn, partitions))
    return outcomes
