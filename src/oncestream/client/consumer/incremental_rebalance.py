"""What the Consumer's poll does for a KIP-848 member (``group.protocol=consumer``): carry out
reconciliation steps incrementally, release everything when the member was fenced or went
stale, and give up the assignment before leaving.

A step revokes first (auto-commit of the consumed positions, ``on_revoke`` with just the revoked
partitions, then dropping them) and adds second (``on_assign`` with just the added partitions;
without a callback, or one that does not assign, they are added with ``incremental_assign``),
then lets the member acknowledge. Partitions kept across the rebalance are not touched: their
fetches and buffered records go on (the classic protocol's eager rebalance stops everything).
The callbacks run in the caller's thread, as the Consumer runs them for the classic protocol.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import Any, Protocol

from oncestream.client.common.cluster import Cluster
from oncestream.client.common.errors import KafkaError
from oncestream.client.common.io_thread import IoThread
from oncestream.client.common.message import TopicPartition
from oncestream.client.consumer.consumer_group_member import ConsumerGroupMember
from oncestream.client.consumer.consumer_membership import MemberState


class Consumer(Protocol):
    """What these steps use of oncestream's Consumer (consumer.py imports this module, so the
    Consumer is described here rather than imported: no import cycle)."""

    _auto_commit: bool
    _commit_timeout_s: float
    _cluster: Cluster
    _io: IoThread
    _on_assign: Callable[..., Any] | None
    _on_revoke: Callable[..., Any] | None
    _in_rebalance_callback: bool
    _assign_called_in_callback: list[TopicPartition] | None
    _pending_errors: collections.deque[KafkaError]

    def _notify(self) -> None: ...
    def _final_commit(self, timeout_s: float) -> None: ...
    def _revoke_all(self, *, lost: bool) -> None: ...
    def incremental_assign(self, partitions: list[TopicPartition]) -> None: ...
    def incremental_unassign(self, partitions: list[TopicPartition]) -> None: ...

# How often unresolved topic ids of a target assignment may trigger a full metadata refresh.
_METADATA_RETRY_S = 0.5


def poll_step(consumer: Consumer, member: ConsumerGroupMember) -> None:
    """One turn of the consumer's housekeeping for ``member`` (caller's thread; the consumer
    raises the member's fatal error before it gets here)."""
    while member.errors:
        consumer._pending_errors.append(member.errors.pop(0))
    if member.state in (MemberState.FENCED, MemberState.STALE):
        # Kafka's rule: partitions of a fenced member may already belong to someone else, so
        # nothing is committed; on_lost (or on_revoke without it) hears of them.
        consumer._revoke_all(lost=True)
        member.lost_handled()
        return
    step = member.reconciliation(consumer._cluster.topic_name)
    if step is None:
        if member.machine.needs_metadata:
            _refresh_metadata(consumer, member)
        return
    if step.revoke:
        revoked = [TopicPartition(t, p) for t, p in step.revoke]
        if consumer._auto_commit:
            consumer._final_commit(consumer._commit_timeout_s)
        _run_callback(consumer, consumer._on_revoke, revoked)
        consumer.incremental_unassign(revoked)
    if step.assign or step.first_since_join:
        added = [TopicPartition(t, p) for t, p in step.assign]
        consumer._assign_called_in_callback = None
        _run_callback(consumer, consumer._on_assign, added)
        if consumer._assign_called_in_callback is None and added:
            consumer.incremental_assign(added)
    member.reconciled(step)


def release_for_leave(consumer: Consumer, member: ConsumerGroupMember) -> None:
    """unsubscribe()/close(): give up the assignment before the leave heartbeat: on_revoke (with
    the auto-commit) for a member in the group, on_lost for one fenced or gone stale."""
    lost = member.state in (MemberState.FENCED, MemberState.STALE)
    member.prepare_leaving()
    consumer._revoke_all(lost=lost)


def _run_callback(consumer: Consumer, callback: object, partitions: list[TopicPartition]) -> None:
    if callback is None or not callable(callback):
        return
    consumer._in_rebalance_callback = True
    try:
        callback(consumer, partitions)
    finally:
        consumer._in_rebalance_callback = False


def _refresh_metadata(consumer: Consumer, member: ConsumerGroupMember) -> None:
    now = time.monotonic()
    if now - member.metadata_refreshed_at < _METADATA_RETRY_S:
        return
    member.metadata_refreshed_at = now
    # Topic ids name topics the member may never have asked about (a regex, a topic created
    # later): only a full Metadata request finds them.
    future = consumer._io.submit(consumer._cluster.refresh(all_topics=True))
    future.add_done_callback(lambda _f: consumer._notify())
