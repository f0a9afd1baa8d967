"""__consumer_offsets record encoding, Kafka's partition mapping, and load() round trips."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from kio.schema.errors import ErrorCode

from oncestream.coordinator.group import (
    GroupCoordinator,
    GroupCoordinatorConfig,
    GroupState,
    OffsetAndMetadata,
    OffsetCommitRequest,
    OffsetFetchRequest,
    PartitionOffsetCommit,
    TopicPartition,
    java_string_hash,
    partition_for,
)
from oncestream.coordinator.group.consumer_protocol import encode_subscription
from oncestream.coordinator.group.records import (
    GroupMetadataKey,
    GroupSnapshot,
    MemberSnapshot,
    OffsetCommitKey,
    PendingTxnOffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_value,
    encode_key,
    encode_offset_value,
)
from oncestream.errors import CorruptRecordError
from tests.support.group_harness import GroupHarness, InMemoryOffsetsLog

E = ErrorCode
T0 = TopicPartition("orders", 0)
T1 = TopicPartition("orders", 1)


def make(log: InMemoryOffsetsLog | None = None) -> tuple[GroupCoordinator, GroupHarness]:
    counter = itertools.count(1)
    coordinator = GroupCoordinator(
        GroupCoordinatorConfig(group_initial_rebalance_delay_ms=0, offsets_topic_partitions=7),
        member_id_suffix=lambda: str(next(counter)),
    )
    return coordinator, GroupHarness(coordinator, log)


# --- partition mapping ----------------------------------------------------------------------------


def test_java_string_hash_matches_java() -> None:
    # Values computed by java.lang.String#hashCode.
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("console-consumer-12345") == 158455506
    assert java_string_hash("polygenelubricants") == -(2**31)
    # Non-BMP characters hash as two UTF-16 code units, as in Java: "\U0001F600" is D83D DE00.
    assert java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00


def test_partition_for_is_kafkas_abs_hash_mod_n() -> None:
    assert partition_for("hello", 50) == 99162322 % 50
    # Utils.abs(Integer.MIN_VALUE) is 0 in Kafka.
    assert partition_for("polygenelubricants", 50) == 0
    # A negative hash: the absolute value is taken before the modulo.
    assert java_string_hash("my-group") == -1906497762
    assert partition_for("my-group", 50) == 1906497762 % 50
    for group in ("a", "my-group", "console-consumer-1", "ünïcödé"):
        h = java_string_hash(group)
        assert partition_for(group, 50) == (abs(h) if h != -(2**31) else 0) % 50
    coordinator = GroupCoordinator(GroupCoordinatorConfig(offsets_topic_partitions=13))
    assert coordinator.partition_for("hello") == 99162322 % 13


# --- encoding -------------------------------------------------------------------------------------


def test_offset_commit_key_is_kafkas_layout() -> None:
    key = encode_key(OffsetCommitKey("g", TopicPartition("t", 3)))
    assert key == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x03"
    assert encode_key(GroupMetadataKey("g")) == b"\x00\x02\x00\x01g"


@pytest.mark.parametrize(
    "key",
    [
        OffsetCommitKey("group", TopicPartition("topic", 7)),
        GroupMetadataKey("grøup"),
        PendingTxnOffsetKey("group", 2**40, TopicPartition("t", 0)),
    ],
)
def test_keys_round_trip(key: object) -> None:
    assert decode_key(encode_key(key)) == key  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "value",
    [
        OffsetAndMetadata(42, 5, "meta", 1_700_000_000_000),
        OffsetAndMetadata(0, -1, "", 0),
        OffsetAndMetadata(42, -1, "m", 10, expire_timestamp_ms=99),
    ],
)
def test_offset_values_round_trip(value: OffsetAndMetadata) -> None:
    assert decode_offset_value(encode_offset_value(value)) == value


def test_group_value_round_trip() -> None:
    snapshot = GroupSnapshot(
        protocol_type="consumer",
        generation_id=3,
        protocol_name="range",
        leader_id="m-1",
        state_timestamp_ms=123,
        members=(
            MemberSnapshot("m-1", None, "c", "/h", 30_000, 10_000, b"sub", b"asg"),
            MemberSnapshot("m-2", "inst", "c", "/h", 30_000, 10_000, b"", b""),
        ),
    )
    assert decode_group_value(encode_group_value(snapshot)) == snapshot
    empty = GroupSnapshot(None, 4, None, None, 5, ())
    assert decode_group_value(encode_group_value(empty)) == empty


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        b"\x00\x07\x00\x01g",  # unknown key version
        encode_key(GroupMetadataKey("g")) + b"\x00",  # trailing byte
        b"\x00\x02\x00\x05g",  # string longer than the record
        b"\x00\x02\xff\xff",  # null group id
    ],
)
def test_corrupt_keys_are_rejected(data: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decode_key(data)


def test_corrupt_values_are_rejected() -> None:
    good = encode_offset_value(OffsetAndMetadata(1, 2, "x", 3))
    with pytest.raises(CorruptRecordError):
        decode_offset_value(good[:-1])
    with pytest.raises(CorruptRecordError):
        decode_offset_value(b"\x00\x09" + good[2:])
    with pytest.raises(CorruptRecordError):
        decode_group_value(b"\x00\x03\x00\x00")


# --- load() round trips ---------------------------------------------------------------------------


def build_state(h: GroupHarness) -> None:
    """A Stable group with a static member, a simple group, an Empty group, pending txn offsets."""
    sub = encode_subscription(["orders"])
    a = h.join("stable", now_ms=0, client_id="a", protocols=[("range", sub)], instance_id="ia")
    b = h.join("stable", now_ms=0, client_id="b", protocols=[("range", sub)])
    # With no initial delay a forms generation 1 alone; b's join starts generation 2.
    a2 = h.join(
        "stable", a.result.member_id, now_ms=1, protocols=[("range", sub)], instance_id="ia"
    )
    leader = a2.result.leader_id
    members = [a2.result.member_id, b.result.member_id]
    for m in members:
        h.sync(
            "stable",
            m,
            2,
            now_ms=2,
            instance_id="ia" if m == a2.result.member_id else None,
            assignments={x: f"assigned:{x}".encode() for x in members} if m == leader else None,
        )
    h.commit(
        "stable",
        {T0: PartitionOffsetCommit(10, 4, "meta")},
        now_ms=3,
        member_id=b.result.member_id,
        generation_id=2,
    )
    h.commit("simple", {T0: 1, T1: 2}, now_ms=4)
    h.commit("simple", {T0: 3}, now_ms=5)  # a newer value for the same key
    e = h.join("emptied", now_ms=6, client_id="e")
    h.sync("emptied", e.result.member_id, 1, now_ms=6, assignments={})
    h.leave("emptied", e.result.member_id, now_ms=7)
    _, writes = h.coordinator.add_pending_txn_offsets(
        "simple", 77, {T1: PartitionOffsetCommit(9)}, 8
    )
    h.log.append(writes)


def observable(coordinator: GroupCoordinator) -> dict[str, object]:
    """Everything a restarted broker must get back."""
    out: dict[str, object] = {}
    for group_id in coordinator.group_ids():
        snapshot = coordinator.group_snapshot(group_id)
        assert snapshot is not None
        if snapshot.generation_id == 0:
            # An offsets-only group has no metadata record, so no state timestamp to restore.
            snapshot = dataclasses.replace(snapshot, state_timestamp_ms=0)
        out[group_id] = (
            coordinator.group_state(group_id),
            snapshot,
            coordinator.committed_offsets(group_id),
            coordinator.pending_txn_offsets(group_id),
        )
    return out


def test_load_rebuilds_identical_groups_and_offsets() -> None:
    original, h = make()
    build_state(h)
    assert original.group_state("stable") is GroupState.STABLE
    assert original.group_state("emptied") is GroupState.EMPTY
    expected = observable(original)

    restarted, _ = make()
    restarted.load(h.log.records(), now_ms=100)
    assert observable(restarted) == expected

    # Compaction keeps exactly the latest state: loading the compacted log is the same.
    compacted, _ = make()
    compacted.load(list(h.log.compacted(drop_tombstones=True)), now_ms=100)
    assert observable(compacted) == expected
    assert len(list(h.log.compacted())) < len(h.log)


def test_loaded_group_keeps_working() -> None:
    original, h = make()
    build_state(h)
    snapshot = original.group_snapshot("stable")
    assert snapshot is not None
    static_id = next(m.member_id for m in snapshot.members if m.group_instance_id == "ia")
    dynamic_id = next(m.member_id for m in snapshot.members if m.group_instance_id is None)

    restarted, h2 = make()
    restarted.load(h.log.records(), now_ms=100)
    # Members heartbeat on with their generation; sessions restart at load time.
    assert h2.heartbeat("stable", dynamic_id, 2, now_ms=105) == E.none
    assert h2.sync("stable", dynamic_id, 2, now_ms=106).result.assignment == (
        f"assigned:{dynamic_id}".encode()
    )
    # The static member restarts once more and still gets its assignment without a rebalance.
    again = h2.join(
        "stable",
        now_ms=107,
        client_id="a",
        instance_id="ia",
        protocols=[("range", encode_subscription(["orders"]))],
    ).result
    assert again.error == E.none
    assert again.generation_id == 2
    synced = h2.sync("stable", again.member_id, 2, now_ms=108, instance_id="ia").result
    assert synced.assignment == f"assigned:{static_id}".encode()
    assert restarted.group_state("stable") is GroupState.STABLE
    # The pending transactional offset came back pending.
    fetched = restarted.fetch_offsets(OffsetFetchRequest("simple", (T1,), True), 109)
    assert fetched.partitions[T1].error == E.unstable_offset_commit
    h2.log.append(restarted.complete_pending_txn_offsets("simple", 77, commit=True, now_ms=110))
    fetched = restarted.fetch_offsets(OffsetFetchRequest("simple", (T1,), True), 110)
    assert fetched.partitions[T1].offset == 9


def test_tombstones_after_delete_groups_survive_reload() -> None:
    original, h = make()
    build_state(h)
    # The Empty group goes (it has a generation: its metadata record is tombstoned too).
    result, writes = original.delete_groups(["emptied", "stable"], now_ms=50)
    h.log.append(writes)
    assert result.errors == {"emptied": E.none, "stable": E.non_empty_group}
    tombstoned = {decode_key(k) for w in writes for k, v in w.records if v is None}
    assert GroupMetadataKey("emptied") in tombstoned

    # Deleting the simple group also tombstones its committed and pending offsets.
    result, writes = original.delete_groups(["simple"], now_ms=51)
    h.log.append(writes)
    assert result.errors == {"simple": E.none}
    tombstoned = {decode_key(k) for w in writes for k, v in w.records if v is None}
    assert tombstoned == {
        OffsetCommitKey("simple", T0),
        OffsetCommitKey("simple", T1),
        PendingTxnOffsetKey("simple", 77, T1),
    }

    expected = observable(original)
    assert set(expected) == {"stable"}
    replays = (
        list(h.log.records()),
        list(h.log.compacted()),
        list(h.log.compacted(drop_tombstones=True)),
    )
    for records in replays:
        restarted, _ = make()
        restarted.load(records, now_ms=100)
        assert observable(restarted) == expected


def test_group_emptied_by_rebalance_is_stored_empty_with_its_generation() -> None:
    _original, h = make()
    build_state(h)
    restarted, _ = make()
    restarted.load(h.log.records(), now_ms=100)
    assert restarted.group_state("emptied") is GroupState.EMPTY
    assert restarted.group_generation("emptied") == 2


def test_unload_answers_waiting_requests_and_load_restores_partition() -> None:
    coordinator, h = make()
    build_state(h)
    waiting = h.join("stable", now_ms=60, client_id="late", protocols=[("range", b"")])
    assert not waiting.done
    partition = coordinator.partition_for("stable")
    coordinator.unload_partition(partition)
    assert waiting.result.error == E.not_coordinator
    late_join = h.join("stable", now_ms=61, client_id="x").result
    assert late_join.error == E.coordinator_load_in_progress
    coordinator.load(h.log.records(), now_ms=62, partitions=[partition])
    assert coordinator.group_state("stable") is GroupState.STABLE
    # Groups of other partitions were not touched by the partial load.
    assert coordinator.group_state("simple") is not None


def test_failed_append_recovery_drops_unpersisted_commit() -> None:
    """Contract: after a failed append the broker unloads and reloads the partition from the log,
    so an offset that never became durable is not served."""
    coordinator, h = make()
    h.commit("g", {T0: 1}, now_ms=0)
    result, writes = coordinator.commit_offsets(
        OffsetCommitRequest("g", {T0: PartitionOffsetCommit(2)}), 1
    )
    assert result.partitions == {T0: E.none}
    assert writes
    partition = coordinator.partition_for("g")
    coordinator.unload_partition(partition)
    coordinator.load(h.log.records(), now_ms=2, partitions=[partition])
    assert coordinator.committed_offsets("g")[T0].offset == 1


def test_writes_are_tagged_with_the_group_partition() -> None:
    coordinator, _h = make()
    _, writes = coordinator.commit_offsets(
        OffsetCommitRequest("some-group", {T0: PartitionOffsetCommit(2)}), 1
    )
    assert [w.partition for w in writes] == [coordinator.partition_for("some-group")]
    key = decode_key(writes[0].records[0][0])
    assert key == OffsetCommitKey("some-group", T0)
