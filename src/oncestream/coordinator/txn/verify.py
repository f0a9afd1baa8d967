"""KIP-890 part 1's check of a transactional write against a transactional id's durable state.

One home for the rule both modes apply: the single broker's coordinator checks its in-memory
snapshot (``TransactionCoordinator.verify_partitions``); in cluster mode the diskless produce
commit checks the snapshot stored in PostgreSQL, share-locked in the same transaction
(cluster/leases/txn_state.py ``stored_transaction``), and TxnOffsetCommit does the same for the
group's offsets partition when the transaction coordinator is another broker.
"""

from __future__ import annotations

from collections.abc import Iterable

from kio.schema.errors import ErrorCode

from oncestream.coordinator.txn.metadata import TxnSnapshot
from oncestream.coordinator.txn.state import TxnState
from oncestream.topic_partition import TopicPartition

_PREPARED = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})


def verify_snapshot(snapshot: TxnSnapshot | None, producer_id: int, producer_epoch: int,
                    partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
    """Per partition: NONE when it is in the ongoing transaction of (producer_id, producer_epoch);
    INVALID_TXN_STATE when it was not added (or the transaction is not ongoing, or is a KIP-939
    prepared transaction kept by a new instance); CONCURRENT_TRANSACTIONS while it is being
    completed; INVALID_PRODUCER_ID_MAPPING / PRODUCER_FENCED when the producer is not the id's
    current one (Kafka's order of checks)."""
    parts = tuple(partitions)
    if snapshot is None or snapshot.producer_id != producer_id:
        return dict.fromkeys(parts, ErrorCode.invalid_producer_id_mapping)
    if snapshot.producer_epoch != producer_epoch:
        return dict.fromkeys(parts, ErrorCode.producer_fenced)
    if snapshot.state in _PREPARED:
        return dict.fromkeys(parts, ErrorCode.concurrent_transactions)
    if snapshot.has_kept_transaction:
        return dict.fromkeys(parts, ErrorCode.invalid_txn_state)
    # Pending writes are not checked, as in Kafka: partitions join only once durable, and the
    # partition does the final epoch check on append.
    in_txn = snapshot.partitions if snapshot.state is TxnState.ONGOING else frozenset()
    return {tp: ErrorCode.none if tp in in_txn else ErrorCode.invalid_txn_state for tp in parts}
