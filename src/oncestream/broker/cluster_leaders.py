"""Which broker a cluster's Metadata names as a partition's leader (rendezvous hashing).

In cluster mode any broker serves any partition (its records are in the object store, its
offsets in PostgreSQL), so "leader" only tells clients where to send a partition's requests. The
answer spreads partitions evenly over the live brokers and is the same on every broker for the
same set of live brokers: each partition goes to the broker with the highest hash of
(topic id, partition, node id). When a broker leaves, only its own partitions move (to the
broker with the next highest hash); when one joins, it takes about 1/N of the partitions from
the others. Clients that still send to an old leader are served all the same.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence


def _score(topic_id: uuid.UUID, partition: int, node_id: int) -> int:
    digest = hashlib.blake2b(topic_id.bytes + partition.to_bytes(4, "big", signed=True)
                             + node_id.to_bytes(8, "big", signed=True), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def leader_of(topic_id: uuid.UUID, partition: int, node_ids: Sequence[int]) -> int:
    """The node among ``node_ids`` (not empty) that leads ``(topic_id, partition)``; ties (never
    seen with 64-bit hashes) go to the lowest node id."""
    if not node_ids:
        raise ValueError("leader_of: no live broker to choose from")
    return max(sorted(node_ids), key=lambda node: _score(topic_id, partition, node))
