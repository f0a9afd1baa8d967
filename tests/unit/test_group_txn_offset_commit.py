"""KIP-447 fencing of TxnOffsetCommit by the consumer group (v3+ carries member id, generation
and group.instance.id), checked on the sans-io group coordinator.

Kafka applies the same member rules to TxnOffsetCommit as to OffsetCommit (GroupCoordinator /
ClassicGroup ``validateOffsetCommit`` with ``isTransactional``): when any of member id,
generation or instance id is given, an instance id must be owned by exactly that member
(FENCED_INSTANCE_ID when another member owns it, UNKNOWN_MEMBER_ID when nobody does), the member
must be in the group (UNKNOWN_MEMBER_ID) and the generation must be the group's
(ILLEGAL_GENERATION). A refused request must stage nothing: no pending offset, no record for
``__consumer_offsets``, nothing that a later commit marker could make visible.
"""

from __future__ import annotations

import itertools

from kio.schema.errors import ErrorCode

from oncestream.coordinator.group import (
    GroupCoordinator,
    GroupCoordinatorConfig,
    OffsetFetchRequest,
    PartitionOffsetCommit,
    TopicPartition,
)
from oncestream.coordinator.group.consumer_protocol import encode_subscription
from tests.support.group_harness import GroupHarness

E = ErrorCode
T0 = TopicPartition("orders", 0)
PRODUCER_ID = 4242


def make() -> tuple[GroupCoordinator, GroupHarness]:
    """A coordinator without the initial rebalance delay, with predictable member ids."""
    counter = itertools.count(1)
    coordinator = GroupCoordinator(
        GroupCoordinatorConfig(group_initial_rebalance_delay_ms=0),
        member_id_suffix=lambda: str(next(counter)),
    )
    return coordinator, GroupHarness(coordinator)


def join_and_sync(h: GroupHarness, member_id: str = "", *, now_ms: int, instance_id: str | None = None) -> tuple[str, int]:
    """One consumer member (re)joins group ``g`` alone and syncs; returns (member id, generation).

    Alone in the group, its JoinGroup completes the rebalance at once, so every call forms a new
    generation: calling it twice leaves the first generation stale.
    """
    joined = h.join(
        "g", member_id, now_ms=now_ms, instance_id=instance_id,
        protocols=[("range", encode_subscription(["orders"]))],
    ).result
    assert joined.error == E.none, joined
    synced = h.sync("g", joined.member_id, joined.generation_id, now_ms=now_ms,
                    instance_id=instance_id, assignments={joined.member_id: b"a"}).result
    assert synced.error == E.none, synced
    return joined.member_id, joined.generation_id


def txn_offset_commit(coordinator: GroupCoordinator, h: GroupHarness, offset: int, *, now_ms: int,
                      member_id: str, generation_id: int, instance_id: str | None = None) -> tuple[ErrorCode, int]:
    """TxnOffsetCommit v3+ of ``offset`` for T0 by PRODUCER_ID; returns (error, records written).

    The writes go to the harness log, as the broker appends them before answering."""
    result, writes = coordinator.add_pending_txn_offsets(
        "g", PRODUCER_ID, {T0: PartitionOffsetCommit(offset)}, now_ms,
        member_id=member_id, generation_id=generation_id, group_instance_id=instance_id,
    )
    h.log.append(writes)
    return result.partitions[T0], sum(len(w.records) for w in writes)


def committed(coordinator: GroupCoordinator, now_ms: int) -> tuple[int, ErrorCode]:
    """OffsetFetch of T0 with RequireStable (KIP-447): (offset, error)."""
    fetched = coordinator.fetch_offsets(OffsetFetchRequest("g", (T0,), True), now_ms).partitions[T0]
    return fetched.offset, fetched.error


def assert_nothing_staged_and_commit_shows_nothing(coordinator: GroupCoordinator, h: GroupHarness, now_ms: int) -> None:
    """The refused request left no pending offset, and the producer's COMMIT marker (what the
    transaction coordinator triggers on the offsets partition) makes nothing visible."""
    assert coordinator.pending_txn_offsets("g") == {}
    assert committed(coordinator, now_ms) == (-1, E.none)
    h.log.append(coordinator.complete_pending_txn_offsets("g", PRODUCER_ID, commit=True, now_ms=now_ms))
    assert committed(coordinator, now_ms) == (-1, E.none)


def test_kip447_txn_offset_commit_from_an_unknown_member_id_is_unknown_member_id() -> None:
    coordinator, h = make()
    member, generation = join_and_sync(h, now_ms=0)
    error, written = txn_offset_commit(coordinator, h, 10, now_ms=1, member_id="ghost-member", generation_id=generation)
    assert (error, written) == (E.unknown_member_id, 0)
    assert_nothing_staged_and_commit_shows_nothing(coordinator, h, now_ms=2)
    # The live member with the same generation is accepted: the refusal was about the member id.
    assert txn_offset_commit(coordinator, h, 11, now_ms=3, member_id=member, generation_id=generation)[0] == E.none


def test_kip447_txn_offset_commit_with_a_stale_generation_is_illegal_generation() -> None:
    """The zombie case KIP-447 is about: the member's partitions were rebalanced (a new
    generation) while its old transaction still tries to commit offsets of the old one."""
    coordinator, h = make()
    member, first = join_and_sync(h, now_ms=0)
    same_member, second = join_and_sync(h, member, now_ms=1)
    assert same_member == member
    assert second == first + 1
    error, written = txn_offset_commit(coordinator, h, 10, now_ms=2, member_id=member, generation_id=first)
    assert (error, written) == (E.illegal_generation, 0)
    assert_nothing_staged_and_commit_shows_nothing(coordinator, h, now_ms=3)
    # A generation from the future is just as illegal.
    assert txn_offset_commit(coordinator, h, 10, now_ms=4, member_id=member, generation_id=second + 1)[0] == E.illegal_generation
    # The current generation stages, and the commit marker makes it visible.
    assert txn_offset_commit(coordinator, h, 12, now_ms=5, member_id=member, generation_id=second) == (E.none, 1)
    h.log.append(coordinator.complete_pending_txn_offsets("g", PRODUCER_ID, commit=True, now_ms=6))
    assert committed(coordinator, 6) == (12, E.none)


def test_kip345_kip447_txn_offset_commit_with_a_group_instance_id_owned_by_another_member_is_fenced() -> None:
    """A static member restarted (same group.instance.id, new member id): the old instance's
    transaction is a zombie and gets FENCED_INSTANCE_ID, even with the current generation."""
    coordinator, h = make()
    old_member, _ = join_and_sync(h, now_ms=0, instance_id="copier-0")
    new_member, generation = join_and_sync(h, now_ms=1, instance_id="copier-0")
    assert new_member != old_member
    error, written = txn_offset_commit(
        coordinator, h, 10, now_ms=2, member_id=old_member, generation_id=generation, instance_id="copier-0"
    )
    assert (error, written) == (E.fenced_instance_id, 0)
    assert_nothing_staged_and_commit_shows_nothing(coordinator, h, now_ms=3)
    assert txn_offset_commit(
        coordinator, h, 13, now_ms=4, member_id=new_member, generation_id=generation, instance_id="copier-0"
    )[0] == E.none


def test_kip345_txn_offset_commit_naming_an_instance_id_nobody_owns_is_unknown_member_id() -> None:
    """Kafka's validateMember: an instance id the group does not know is UNKNOWN_MEMBER_ID even
    when the member id itself is a live member (a request mixing identities is not trusted)."""
    coordinator, h = make()
    member, generation = join_and_sync(h, now_ms=0)
    error, written = txn_offset_commit(
        coordinator, h, 10, now_ms=1, member_id=member, generation_id=generation, instance_id="not-an-instance"
    )
    assert (error, written) == (E.unknown_member_id, 0)
    assert_nothing_staged_and_commit_shows_nothing(coordinator, h, now_ms=2)


def test_kip447_txn_offset_commit_without_member_information_is_not_checked() -> None:
    """TxnOffsetCommit below v3 (and v3+ from a producer whose consumer is not in a group) sends
    no member id, generation -1 and no instance id: Kafka accepts it even for a group with members,
    since those versions cannot say who they are."""
    coordinator, h = make()
    join_and_sync(h, now_ms=0)
    assert txn_offset_commit(coordinator, h, 10, now_ms=1, member_id="", generation_id=-1) == (E.none, 1)
