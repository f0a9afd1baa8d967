"""The transaction coordinator's persisted state of one transactional id, read inside another
area's PostgreSQL transaction (cluster mode).

A diskless produce of a transactional batch (KIP-890's verification) and the marker writer need to
know what the coordinator has made durable: the producer id and epoch, the state and the
partitions of the open transaction. In cluster mode that is the ``coordinator_records`` row of the
id (pg_internal_topic.py), the same bytes the coordinator replays at load. ``stored_transaction``
reads and decodes it with a share lock: the coordinator's next write of that id (e.g. the
PrepareCommit that precedes the markers) waits until the caller's transaction ends, so a batch
verified against Ongoing commits before the transaction can move on, and its markers follow it.
"""

from __future__ import annotations

from typing import Any

import psycopg

from oncestream.coordinator.group.partitioning import partition_for
from oncestream.coordinator.txn.metadata import TxnSnapshot
from oncestream.coordinator.txn.records import decode_value, encode_key

TRANSACTION_STATE_TOPIC = "__transaction_state"


async def stored_transaction(conn: psycopg.AsyncConnection[Any], transactional_id: str,
                             num_partitions: int) -> TxnSnapshot | None:
    """The persisted state of ``transactional_id`` (None if it has none), share-locked until the
    caller's transaction ends. ``num_partitions`` is ``transaction.state.log.num.partitions``."""
    cursor = await conn.execute(
        "SELECT value FROM coordinator_records WHERE topic = %s AND partition = %s AND key = %s FOR SHARE",
        (TRANSACTION_STATE_TOPIC, partition_for(transactional_id, num_partitions), encode_key(transactional_id)))
    row = await cursor.fetchone()
    return None if row is None else decode_value(bytes(row[0]))
