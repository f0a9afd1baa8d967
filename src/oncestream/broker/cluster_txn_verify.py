"""KIP-890 verification against the transaction state stored in PostgreSQL (cluster mode).

When the transaction coordinator of an id is another broker, what it has made durable is the
``coordinator_records`` row of the id (cluster/leases/txn_state.py): a TxnOffsetCommit (v0-v4)
reaching the group coordinator checks that the group's offsets partition is in the producer's
ongoing transaction against it, with the rules of ``coordinator/txn/verify.py``; a forwarded
WriteTxnMarkers is checked against the transactions being completed.
"""

from __future__ import annotations

from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from oncestream.cluster.diskless.partition_rows import Conn
from oncestream.cluster.leases.txn_state import TRANSACTION_STATE_TOPIC, stored_transaction
from oncestream.cluster.pg.store import MetadataStore
from oncestream.coordinator.txn.records import decode_value
from oncestream.coordinator.txn.state import TxnState
from oncestream.coordinator.txn.verify import verify_snapshot
from oncestream.errors import OnceStreamError
from oncestream.topic_partition import TopicPartition


async def stored_verification(store: MetadataStore, transactional_id: str, producer_id: int, producer_epoch: int,
                              partitions: Sequence[TopicPartition], num_partitions: int) -> dict[TopicPartition, ErrorCode]:
    """Per partition: NONE when it is in the stored ongoing transaction of the producer, else the
    error ``verify_snapshot`` gives; COORDINATOR_NOT_AVAILABLE-like retriable codes when
    PostgreSQL cannot be read."""

    async def read(conn: Conn) -> dict[TopicPartition, ErrorCode]:
        snapshot = await stored_transaction(conn, transactional_id, num_partitions)
        return verify_snapshot(snapshot, producer_id, producer_epoch, partitions)

    try:
        return await store.run(read)
    except OnceStreamError as exc:
        return dict.fromkeys(partitions, exc.code)


_PREPARED_AT_EPOCH_SQL = """
SELECT r.value FROM coordinator_records r
JOIN coordinator_leases l ON l.resource = r.topic || '/' || r.partition
WHERE r.topic = %s AND l.epoch = %s
"""


async def forwarded_marker_is_genuine(store: MetadataStore, producer_id: int, commit: bool,
                                      coordinator_epoch: int) -> bool:
    """Whether a WriteTxnMarkers forwarded by another broker's transaction coordinator matches
    what PostgreSQL holds: a transaction of ``producer_id`` in PrepareCommit (``commit``) or
    PrepareAbort, in a ``__transaction_state`` partition whose lease carries ``coordinator_epoch``
    (the coordinator epoch its markers carry). A client forging the request finds none, so it
    cannot commit or drop another producer's staged offsets. False when PostgreSQL cannot be read
    (the coordinator retries)."""
    wanted = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT

    async def read(conn: Conn) -> bool:
        cursor = await conn.execute(_PREPARED_AT_EPOCH_SQL, (TRANSACTION_STATE_TOPIC, coordinator_epoch))
        for (value,) in await cursor.fetchall():
            snapshot = decode_value(bytes(value))
            if snapshot.state is not wanted:
                continue
            if producer_id in (snapshot.producer_id, snapshot.ongoing_txn_producer_id, snapshot.last_producer_id):
                return True
        return False

    try:
        return await store.run(read)
    except OnceStreamError:
        return False
