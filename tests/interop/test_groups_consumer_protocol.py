"""The KIP-848 consumer group protocol with librdkafka (``group.protocol=consumer``) against a real
broker process: joins and leaves while records flow, incremental reassignment, static members,
regular-expression subscriptions, a crashed member, a crashed broker, and Kafka's error codes."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode

from oncestream.protocol import api_keys as k
from tests.support.brokers import BrokerFaults, BrokerProcess
from tests.support.clients import create_topic, unique_topic
from tests.support.consumer_protocol import (
    CONSUMER_PROTOCOL_BROKER_CONFIG,
    MemberProcess,
    ProtocolMember,
    close_all,
    connection,
    consumer_protocol_broker,  # noqa: F401 - fixture
    describe,
    group_connection,
    heartbeat,
    wait_until,
)

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def broker(consumer_protocol_broker):
    return consumer_protocol_broker


def unique_group() -> str:
    return f"cg-{uuid.uuid4().hex[:10]}"


def produce(bootstrap: str, topic: str, partitions: int, count: int, start: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + count):
        producer.produce(topic, f"v{i}".encode(), partition=i % partitions)
    assert producer.flush(30) == 0


def split_is_complete(members: list[ProtocolMember], topic: str, partitions: int) -> bool:
    owned = [m.owned() for m in members]
    union = set().union(*owned)
    return union == {(topic, p) for p in range(partitions)} and sum(map(len, owned)) == partitions


def test_members_join_and_leave_while_records_flow_each_record_once(broker):
    topic = unique_topic("cg-flow")
    partitions, total = 6, 600
    create_topic(broker.bootstrap, topic, partitions=partitions)
    group = unique_group()
    stop = threading.Event()
    produced = [0]

    def keep_producing() -> None:
        while not stop.is_set() and produced[0] < total:
            produce(broker.bootstrap, topic, partitions, 20, produced[0])
            produced[0] += 20

    feeder = threading.Thread(target=keep_producing, daemon=True)
    a = ProtocolMember(broker.bootstrap, group, [topic], "a").start()
    members = [a]
    try:
        feeder.start()
        wait_until(lambda: split_is_complete([a], topic, partitions), "a never got every partition")
        b = ProtocolMember(broker.bootstrap, group, [topic], "b").start()
        members.append(b)
        wait_until(lambda: split_is_complete([a, b], topic, partitions) and b.owned() != set(),
                   lambda: f"no split between a and b: {a.owned()} {b.owned()}")
        c = ProtocolMember(broker.bootstrap, group, [topic], "c").start()
        members.append(c)
        wait_until(lambda: split_is_complete([a, b, c], topic, partitions) and all(m.owned() for m in (a, b, c)),
                   lambda: f"no three-way split: {a.owned()} {b.owned()} {c.owned()}")
        b.close()
        wait_until(lambda: split_is_complete([a, c], topic, partitions), "b's partitions were not handed back")
        feeder.join(60)
        wait_until(lambda: sum(len(m.consumed) for m in members) >= total,
                   lambda: f"consumed {sum(len(m.consumed) for m in members)} of {total}")
    finally:
        stop.set()
        close_all(members)
    consumed = [r for m in members for r in m.consumed]
    assert len(consumed) == total, f"{len(consumed) - len(set(consumed))} duplicates"
    assert len(set(consumed)) == total
    assert not [e for m in members for e in m.errors], [m.errors for m in members]


def test_a_kept_partition_is_never_revoked_during_a_rebalance(broker):
    """Incremental: when c joins, a and b give up only the partitions that move to c."""
    topic = unique_topic("cg-keep")
    create_topic(broker.bootstrap, topic, partitions=6)
    group = unique_group()
    a = ProtocolMember(broker.bootstrap, group, [topic], "a").start()
    b = ProtocolMember(broker.bootstrap, group, [topic], "b").start()
    members = [a, b]
    try:
        wait_until(lambda: split_is_complete([a, b], topic, 6) and bool(a.owned()) and bool(b.owned()),
                   "no split between a and b")
        before = {m.name: m.owned() for m in (a, b)}
        revocations = {m.name: len(m.revoked) for m in (a, b)}
        c = ProtocolMember(broker.bootstrap, group, [topic], "c").start()
        members.append(c)
        wait_until(lambda: split_is_complete([a, b, c], topic, 6) and bool(c.owned()), "c got nothing")
        # Records produced now to a partition a kept are read by a without a new assignment.
        kept = sorted(before["a"] & a.owned())
        assert kept, "a kept nothing"
        for m in (a, b):
            for gone in m.revoked[revocations[m.name]:]:
                assert not gone & m.owned(), f"{m.name} revoked partitions it still owns: {gone}"
                assert gone <= before[m.name]
        count = len(a.consumed)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for _ in range(5):
            producer.produce(topic, b"kept", partition=kept[0][1])
        producer.flush(30)
        wait_until(lambda: len(a.consumed) >= count + 5, "a stopped reading a partition it kept")
    finally:
        close_all(members)


def test_static_member_rejoins_with_its_assignment(broker):
    topic = unique_topic("cg-static")
    create_topic(broker.bootstrap, topic, partitions=4)
    group = unique_group()
    a = ProtocolMember(broker.bootstrap, group, [topic], "a", **{"group.instance.id": "ia"}).start()
    b = ProtocolMember(broker.bootstrap, group, [topic], "b", **{"group.instance.id": "ib"}).start()
    members = [a, b]
    try:
        wait_until(lambda: split_is_complete([a, b], topic, 4) and bool(a.owned()) and bool(b.owned()),
                   "no split between the static members")
        kept = a.owned()
        epoch = describe(broker.bootstrap, group).group_epoch
        a.close()  # a static member's close leaves with epoch -2: it keeps its partitions
        a2 = ProtocolMember(broker.bootstrap, group, [topic], "a2", **{"group.instance.id": "ia"}).start()
        members.append(a2)
        wait_until(lambda: a2.owned() == kept, lambda: f"a2 holds {a2.owned()}, a held {kept}")
        assert b.owned().isdisjoint(kept)
        assert describe(broker.bootstrap, group).group_epoch == epoch
    finally:
        close_all(members)


def test_regex_subscription_picks_up_a_topic_created_later(broker):
    prefix = f"rx{uuid.uuid4().hex[:6]}"
    first = f"{prefix}-one"
    create_topic(broker.bootstrap, first, partitions=2)
    group = unique_group()
    a = ProtocolMember(broker.bootstrap, group, [f"^{prefix}-.*"], "a").start()
    try:
        wait_until(lambda: a.owned() == {(first, 0), (first, 1)}, lambda: f"a holds {a.owned()}")
        later = f"{prefix}-two"
        create_topic(broker.bootstrap, later, partitions=3)
        produce(broker.bootstrap, later, 3, 9)
        wait_until(lambda: {(later, p) for p in range(3)} <= a.owned(), lambda: f"a holds {a.owned()}")
        wait_until(lambda: sum(1 for t, _, _ in a.consumed if t == later) == 9, "the new topic's records were not read")
    finally:
        a.close()


def test_a_killed_member_loses_its_partitions_after_the_session_timeout(broker, tmp_path: Path):
    topic = unique_topic("cg-kill")
    create_topic(broker.bootstrap, topic, partitions=4)
    group = unique_group()
    child = MemberProcess(broker.bootstrap, group, topic, tmp_path / "child.jsonl").start()
    b = None
    try:
        wait_until(lambda: child.assigned() == {(topic, p) for p in range(4)}, "the child never got its partitions")
        b = ProtocolMember(broker.bootstrap, group, [topic], "b").start()
        wait_until(lambda: bool(b.owned()) and (child.assigned() or set()).isdisjoint(b.owned()),
                   "b never got a share")
        child.kill()
        wait_until(lambda: b.owned() == {(topic, p) for p in range(4)},
                   lambda: f"b holds {b.owned()} after the child's session should have ended")
        assert len(describe(broker.bootstrap, group).members) == 1
    finally:
        child.kill()
        if b is not None:
            b.close()


def test_broker_crash_keeps_the_group_and_its_offsets(tmp_path: Path):
    process = BrokerProcess(tmp_path / "data", config=CONSUMER_PROTOCOL_BROKER_CONFIG).start()
    try:
        topic = unique_topic("cg-crash")
        create_topic(process.bootstrap, topic, partitions=2)
        produce(process.bootstrap, topic, 2, 10)
        group = unique_group()
        a = ProtocolMember(process.bootstrap, group, [topic], "a", **{"group.instance.id": "ia"}).start()
        wait_until(lambda: len(a.consumed) == 10, "a did not read the records")
        a.close()  # a static member: it leaves with epoch -2 and keeps its assignment
        before = describe(process.bootstrap, group)
        process.kill()
        process.start()
        after = describe(process.bootstrap, group)
        assert after.error_code == ErrorCode.none
        assert (after.group_state, after.group_epoch, after.assignment_epoch) == \
            (before.group_state, before.group_epoch, before.assignment_epoch)
        assert after.members == before.members
        # The committed offsets survived: a new member starts after the ten records.
        produce(process.bootstrap, topic, 2, 4, start=10)
        b = ProtocolMember(process.bootstrap, group, [topic], "b", **{"group.instance.id": "ib"}).start()
        try:
            wait_until(lambda: len(b.consumed) >= 4, "b read nothing after the restart")
        finally:
            b.close()
        assert sorted(o for _, _, o in b.consumed) == [5, 5, 6, 6]
    finally:
        process.stop()


def test_bad_heartbeats_get_kafkas_errors_and_change_nothing(broker):
    topic = unique_topic("cg-bad")
    create_topic(broker.bootstrap, topic, partitions=2)
    group = unique_group()
    a = ProtocolMember(broker.bootstrap, group, [topic], "a").start()
    try:
        wait_until(lambda: len(a.owned()) == 2, "a never got its partitions")
        wait_until(lambda: describe(broker.bootstrap, group).group_state == "Stable", "the group never settled")
        before = describe(broker.bootstrap, group)
        (member,) = before.members
        wrong_epoch = heartbeat(broker.bootstrap, group, member.member_id, member.member_epoch + 10)
        assert wrong_epoch.error_code == ErrorCode.fenced_member_epoch
        unknown = heartbeat(broker.bootstrap, group, uuid.uuid4().hex, 1)
        assert unknown.error_code == ErrorCode.unknown_member_id
        no_group = heartbeat(broker.bootstrap, unique_group(), uuid.uuid4().hex, 3)
        assert no_group.error_code == ErrorCode.group_id_not_found
        bad_assignor = heartbeat(broker.bootstrap, group, uuid.uuid4().hex, 0, rebalance_timeout_ms=1000,
                                 subscribed_topic_names=(topic,), topic_partitions={}, server_assignor="nope")
        assert bad_assignor.error_code == ErrorCode.unsupported_assignor
        missing_timeout = heartbeat(broker.bootstrap, group, uuid.uuid4().hex, 0,
                                    subscribed_topic_names=(topic,), topic_partitions={})
        assert missing_timeout.error_code == ErrorCode.invalid_request
        after = describe(broker.bootstrap, group)
        assert (after.group_epoch, after.assignment_epoch, [m.member_id for m in after.members]) == \
            (before.group_epoch, before.assignment_epoch, [member.member_id])
        assert a.owned() == {(topic, 0), (topic, 1)}
    finally:
        a.close()


def test_a_heartbeat_whose_records_are_not_appended_is_not_acknowledged(broker_factory, tmp_path: Path):
    """While __consumer_offsets appends fail, a joining member hears COORDINATOR_NOT_AVAILABLE
    and the group it would have created is not served; once appends work the join succeeds."""
    fault_file = tmp_path / "fail-appends"
    broker = broker_factory(CONSUMER_PROTOCOL_BROKER_CONFIG, faults=BrokerFaults(internal_append_fail_file=fault_file))
    topic = unique_topic("cg-durable")
    create_topic(broker.bootstrap, topic, partitions=2)
    group, member_id = unique_group(), uuid.uuid4().hex
    fault_file.touch()
    refused = heartbeat(broker.bootstrap, group, member_id, 0, rebalance_timeout_ms=30_000,
                        subscribed_topic_names=(topic,), topic_partitions={})
    assert refused.error_code == ErrorCode.coordinator_not_available
    assert describe(broker.bootstrap, group).error_code == ErrorCode.group_id_not_found
    fault_file.unlink()
    joined = heartbeat(broker.bootstrap, group, member_id, 0, rebalance_timeout_ms=30_000,
                       subscribed_topic_names=(topic,), topic_partitions={})
    assert joined.error_code == ErrorCode.none
    assert joined.member_epoch == 1
    (member,) = describe(broker.bootstrap, group).members
    assert member.member_id == member_id


def test_offset_commit_and_fetch_v10_name_topics_by_id(broker):
    """OffsetCommit/OffsetFetch v10 address topics by id; an unknown id is UNKNOWN_TOPIC_ID."""
    topic = unique_topic("cg-v10")
    create_topic(broker.bootstrap, topic, partitions=2)
    group, bogus = unique_group(), uuid.uuid4()
    with group_connection(broker.bootstrap, group) as conn:
        assert conn.version_for(k.OFFSET_COMMIT) == conn.version_for(k.OFFSET_FETCH) == 10
        metadata = conn.call(k.METADATA, lambda m: m.MetadataRequest(
            topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False))
        (topic_id,) = [t.topic_id for t in metadata.topics if t.name == topic]

        def partition(m, index):
            return m.OffsetCommitRequestPartition(partition_index=index, committed_offset=9,
                                                  committed_leader_epoch=-1, committed_metadata="")

        committed = conn.call(k.OFFSET_COMMIT, lambda m: m.OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None, topics=(
                m.OffsetCommitRequestTopic(topic_id=topic_id, partitions=(partition(m, 1),)),
                m.OffsetCommitRequestTopic(topic_id=bogus, partitions=(partition(m, 0),)))))
        assert [(t.topic_id, [p.error_code for p in t.partitions]) for t in committed.topics] == [
            (topic_id, [ErrorCode.none]), (bogus, [ErrorCode.unknown_topic_id])]
        fetched = conn.call(k.OFFSET_FETCH, lambda m: m.OffsetFetchRequest(require_stable=False, groups=(
            m.OffsetFetchRequestGroup(group_id=group, topics=(
                m.OffsetFetchRequestTopics(topic_id=topic_id, partition_indexes=(0, 1)),
                m.OffsetFetchRequestTopics(topic_id=bogus, partition_indexes=(0,)))),)))
        (answer,) = fetched.groups
        assert [(t.topic_id, [(p.committed_offset, p.error_code) for p in t.partitions]) for t in answer.topics] == [
            (topic_id, [(-1, ErrorCode.none), (9, ErrorCode.none)]), (bogus, [(-1, ErrorCode.unknown_topic_id)])]


def test_group_version_feature_switches_the_protocol(broker, broker_factory):
    """ApiVersions finalizes group.version 1 by default; a broker started with group.version=0
    answers ConsumerGroupHeartbeat UNSUPPORTED_VERSION, as Kafka with the feature off."""
    with connection(broker.bootstrap) as conn:
        answer = conn.call(k.API_VERSIONS_KEY, lambda m: m.ApiVersionsRequest(
            client_software_name="cg-tests", client_software_version="1"))
        assert {f.name: f.max_version_level for f in answer.finalized_features}["group.version"] == 1
    off = broker_factory({**CONSUMER_PROTOCOL_BROKER_CONFIG, "group.version": "0"})
    refused = heartbeat(off.bootstrap, unique_group(), uuid.uuid4().hex, 0, rebalance_timeout_ms=30_000,
                        subscribed_topic_names=("t",), topic_partitions={})
    assert refused.error_code == ErrorCode.unsupported_version
