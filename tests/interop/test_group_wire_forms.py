"""Group API request forms that clients rarely send, checked over raw sockets:

- FindCoordinator v4+ (KIP-699): one request carries many keys of one key type and the answer
  holds one coordinator per key;
- OffsetFetch v8+ (KIP-709): one request asks for several groups' offsets at once;
- LeaveGroup v3+ (KIP-345): one request removes several members, with an outcome per member;
- ApiVersions: a classic-protocol broker does not advertise the KIP-848 consumer group APIs.

Request bodies and response parsers are written here by hand from the protocol guide (with the
compact primitives of tests/support/wire.py), not with the broker's codec, so an encoding bug
shared by the broker and its codec library cannot hide.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaPythonTopicPartition
from kafka.structs import OffsetAndMetadata

from tests.support.clients import CLIENT_TIMEOUT_S, create_topic, unique_topic
from tests.support.cluster_kind import ONE_BROKER_ASSUMED, not_on_cluster
from tests.support.coordinators import find_coordinator
from tests.support.groups import group_broker, unique_group, wait_until  # noqa: F401 - fixture
from tests.support.narrow import present
from tests.support.wire import (
    API_VERSIONS,
    ERROR_NONE,
    NO_TAGGED_FIELDS,
    ResponseReader,
    WireConnection,
    compact_array,
    compact_string,
    frame,
    int32,
    nullable_string,
    parse_api_versions_v0,
    request_header,
)

pytestmark = pytest.mark.interop

API_OFFSET_FETCH, API_FIND_COORDINATOR, API_JOIN_GROUP = 9, 10, 11
API_HEARTBEAT, API_LEAVE_GROUP, API_DESCRIBE_GROUPS = 12, 13, 15
# KIP-848's consumer group protocol APIs.
API_CONSUMER_GROUP_HEARTBEAT, API_CONSUMER_GROUP_DESCRIBE = 68, 69

KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION = 0, 1
ERROR_UNKNOWN_MEMBER_ID = 25
ERROR_MEMBER_ID_REQUIRED = 79
# A member that never heartbeats must outlive the test: session timeouts far above its run time.
SESSION_TIMEOUT_MS = 120_000
REBALANCE_TIMEOUT_MS = 60_000


def _connect(broker, group: str | None = None) -> WireConnection:
    """A raw connection whose reads are bounded by the client timeout: to ``group``'s coordinator
    when a group is named (on a cluster another broker answers NOT_COORDINATOR), else to
    ``broker`` (its first broker on a cluster)."""
    host, port = find_coordinator(broker.bootstrap, group) if group is not None else (broker.host, broker.port)
    return WireConnection(host, port, timeout_s=CLIENT_TIMEOUT_S)


def _call(conn: WireConnection, api_key: int, version: int, body: bytes, *, flexible: bool,
          correlation_id: int = 1) -> ResponseReader:
    """Send one request and return a reader positioned on its response body.

    Flexible versions use request header v2 and response header v1 (correlation id + tagged
    fields); the others use header v1 / response header v0.
    """
    frame_body = conn.request(api_key, version, correlation_id, body, flexible_header=flexible)
    reader = ResponseReader(frame_body)
    assert reader.take(">i") == correlation_id, "answer to another request"
    if flexible:
        reader.skip_tagged_fields()
    return reader


def _assert_consumed(reader: ResponseReader, what: str) -> None:
    """The parser read the whole response: a wrong field layout shows up here."""
    assert reader.remaining() == 0, f"{reader.remaining()} unread bytes in the {what} response"


# -- FindCoordinator ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Coordinator:
    """One entry of a FindCoordinator answer."""

    key: str
    node_id: int
    host: str
    port: int
    error_code: int


def _find_coordinator_v2(conn: WireConnection, key: str, key_type: int) -> Coordinator:
    """The single-key form (v1-v3 share it; v2 is not flexible): key, key_type."""
    reader = _call(conn, API_FIND_COORDINATOR, 2, nullable_string(key) + struct.pack(">b", key_type), flexible=False)
    reader.take(">i")  # throttle_time_ms
    error_code = reader.take(">h")
    reader.string()  # error_message
    node_id, host, port = reader.take(">i"), reader.string(), reader.take(">i")
    _assert_consumed(reader, "FindCoordinator v2")
    assert host is not None
    return Coordinator(key, node_id, host, port, error_code)


def _find_coordinators_v4(conn: WireConnection, keys: list[str], key_type: int) -> list[Coordinator]:
    """The batched form (KIP-699, v4+, flexible): key_type, coordinator_keys."""
    body = struct.pack(">b", key_type) + compact_array([compact_string(k) for k in keys]) + NO_TAGGED_FIELDS
    reader = _call(conn, API_FIND_COORDINATOR, 4, body, flexible=True)
    reader.take(">i")  # throttle_time_ms
    out = []
    for _ in range(reader.compact_array_length()):
        key = reader.compact_string()
        node_id = reader.take(">i")
        host = reader.compact_string()
        port = reader.take(">i")
        error_code = reader.take(">h")
        reader.compact_string()  # error_message
        reader.skip_tagged_fields()
        assert key is not None
        assert host is not None
        out.append(Coordinator(key, node_id, host, port, error_code))
    reader.skip_tagged_fields()
    _assert_consumed(reader, "FindCoordinator v4")
    return out


@pytest.mark.parametrize("key_type", [KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION])
@not_on_cluster(ONE_BROKER_ASSUMED)
def test_kip699_find_coordinator_v4_answers_one_coordinator_per_key(group_broker, key_type) -> None:
    """FindCoordinator v4 with several keys of one type (group ids, or transactional ids with
    key_type 1) answers one coordinator for every key, each the coordinator the single-key form
    (v2) names for that key: here the one broker, at its advertised address."""
    keys = [unique_group(f"find-{key_type}-{i}") for i in range(3)]
    with _connect(group_broker) as conn:
        batched = _find_coordinators_v4(conn, keys, key_type)
        single = [_find_coordinator_v2(conn, key, key_type) for key in keys]
    assert sorted(c.key for c in batched) == sorted(keys), "exactly one coordinator per key"
    assert sorted(batched, key=lambda c: c.key) == sorted(single, key=lambda c: c.key)
    for coordinator in batched:
        assert coordinator.error_code == ERROR_NONE, coordinator
        assert coordinator.node_id >= 0
        assert (coordinator.host, coordinator.port) == (group_broker.host, group_broker.port)


# -- OffsetFetch ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class FetchedOffset:
    """One partition of an OffsetFetch answer."""

    offset: int
    leader_epoch: int
    metadata: str | None
    error_code: int


def _offset_fetch_v8(
    conn: WireConnection, groups: dict[str, dict[str, list[int]] | None]
) -> dict[str, tuple[int, dict[tuple[str, int], FetchedOffset]]]:
    """OffsetFetch v8 (KIP-709, flexible) for several groups at once; ``None`` as a group's topics
    asks for every committed offset of that group. Returns {group: (group error, offsets)}."""
    group_entries = []
    for group_id, topics in groups.items():
        if topics is None:
            topics_field = b"\x00"  # null COMPACT_ARRAY: all topics
        else:
            topics_field = compact_array([
                compact_string(name) + compact_array([int32(p) for p in partitions]) + NO_TAGGED_FIELDS
                for name, partitions in topics.items()
            ])
        group_entries.append(compact_string(group_id) + topics_field + NO_TAGGED_FIELDS)
    body = compact_array(group_entries) + b"\x00" + NO_TAGGED_FIELDS  # require_stable=false
    reader = _call(conn, API_OFFSET_FETCH, 8, body, flexible=True)
    reader.take(">i")  # throttle_time_ms
    answer: dict[str, tuple[int, dict[tuple[str, int], FetchedOffset]]] = {}
    for _ in range(reader.compact_array_length()):
        group_id = present(reader.compact_string(), "group id")
        offsets: dict[tuple[str, int], FetchedOffset] = {}
        for _ in range(reader.compact_array_length()):
            topic = present(reader.compact_string(), "topic")
            for _ in range(reader.compact_array_length()):
                partition = reader.take(">i")
                offset = reader.take(">q")
                leader_epoch = reader.take(">i")
                metadata = reader.compact_string()
                error_code = reader.take(">h")
                reader.skip_tagged_fields()
                assert (topic, partition) not in offsets, f"{topic}-{partition} answered twice"
                offsets[(topic, partition)] = FetchedOffset(offset, leader_epoch, metadata, error_code)
            reader.skip_tagged_fields()
        group_error = reader.take(">h")
        reader.skip_tagged_fields()
        assert group_id is not None, f"group {group_id} answered twice"
        assert group_id not in answer, f"group {group_id} answered twice"
        answer[group_id] = (group_error, offsets)
    reader.skip_tagged_fields()
    _assert_consumed(reader, "OffsetFetch v8")
    return answer


def _commit_with_confluent(bootstrap: str, group: str, offsets: list[TopicPartition]) -> None:
    """OffsetCommit from librdkafka as a consumer outside the group (the group stays Empty)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committed = consumer.commit(offsets=offsets, asynchronous=False)
        assert committed is not None, committed
        assert all(tp.error is None for tp in committed), committed
    finally:
        consumer.close()


def _commit_with_kafka_python(bootstrap: str, group: str, offsets: dict) -> None:
    """OffsetCommit from kafka-python as a consumer outside the group; raises on any error."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        consumer.commit(offsets)
    finally:
        consumer.close(autocommit=False)


@not_on_cluster(ONE_BROKER_ASSUMED)
def test_kip709_offset_fetch_v8_answers_several_groups_in_one_request(group_broker) -> None:
    """OffsetFetch v8 naming three groups (two with offsets committed by real clients, one that
    never existed) and a fourth unknown group asking for all topics: each group gets its own
    entry with no error; committed partitions carry their offset and metadata, partitions with
    nothing committed (and every partition of an unknown group) answer offset -1, and an unknown
    group asked for all topics answers no topics."""
    topic = unique_topic("ofetch")
    create_topic(group_broker.bootstrap, topic, partitions=3)
    librdkafka_group, kafka_python_group = unique_group("ofetch-rd"), unique_group("ofetch-kp")
    unknown_group, unknown_all = unique_group("ofetch-none"), unique_group("ofetch-none-all")
    # No metadata through confluent-kafka: its binding sends the string's NUL terminator too.
    _commit_with_confluent(group_broker.bootstrap, librdkafka_group, [
        TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 7),
    ])
    _commit_with_kafka_python(group_broker.bootstrap, kafka_python_group, {
        KafkaPythonTopicPartition(topic, 0): OffsetAndMetadata(11, "kp-meta-0", -1),
        KafkaPythonTopicPartition(topic, 2): OffsetAndMetadata(13, "kp-meta-2", -1),
    })

    with _connect(group_broker) as conn:
        answer = _offset_fetch_v8(conn, {
            librdkafka_group: None,  # every committed offset of the group
            kafka_python_group: {topic: [0, 1, 2]},
            unknown_group: {topic: [0, 1]},
            unknown_all: None,
        })
    assert set(answer) == {librdkafka_group, kafka_python_group, unknown_group, unknown_all}
    assert all(error == ERROR_NONE for error, _ in answer.values())

    def summary(group: str) -> dict[int, tuple[int, str | None, int]]:
        offsets = answer[group][1]
        assert {t for t, _ in offsets} <= {topic}, offsets
        return {p: (f.offset, f.metadata, f.error_code) for (_, p), f in offsets.items()}

    assert {p: (o, e) for p, (o, _, e) in summary(librdkafka_group).items()} == {
        0: (5, ERROR_NONE), 1: (7, ERROR_NONE)
    }
    kafka_python_offsets = summary(kafka_python_group)
    assert kafka_python_offsets[0] == (11, "kp-meta-0", ERROR_NONE)
    assert kafka_python_offsets[2] == (13, "kp-meta-2", ERROR_NONE)
    assert (kafka_python_offsets[1][0], kafka_python_offsets[1][2]) == (-1, ERROR_NONE)
    assert {p: (o, e) for p, (o, _, e) in summary(unknown_group).items()} == {
        0: (-1, ERROR_NONE), 1: (-1, ERROR_NONE)
    }
    assert all(f.leader_epoch == -1 for f in answer[unknown_group][1].values())
    assert answer[unknown_all][1] == {}


# -- ApiVersions ----------------------------------------------------------------------------------
def test_api_versions_advertises_both_group_protocols(broker_factory) -> None:
    """Our broker serves the classic group protocol (JoinGroup/SyncGroup/Heartbeat) and KIP-848's
    (ConsumerGroupHeartbeat v0-v1, ConsumerGroupDescribe v0-v1, with OffsetCommit/OffsetFetch v9
    carrying the member epoch)."""
    broker = broker_factory()  # always ours: the advertised table is this broker's choice
    with _connect(broker) as conn:
        versions = parse_api_versions_v0(conn.request(API_VERSIONS, 0, 1, b"")).versions
    classic = {API_JOIN_GROUP, 14, API_HEARTBEAT, API_LEAVE_GROUP}  # 14: SyncGroup
    assert classic <= set(versions), "the classic protocol's APIs are advertised"
    assert versions[API_CONSUMER_GROUP_HEARTBEAT] == (0, 1)
    assert versions[API_CONSUMER_GROUP_DESCRIBE] == (0, 1)
    assert versions[8][1] >= 9, "OffsetCommit v9 (member epoch)"
    assert versions[9][1] >= 9, "OffsetFetch v9 (member epoch)"


# -- LeaveGroup -----------------------------------------------------------------------------------
PROTOCOL_TYPE = "wire-test"  # not "consumer": the broker need not read our protocol metadata


def _join_group_v4_body(group: str, member_id: str) -> bytes:
    """JoinGroup v4 (not flexible): group, session and rebalance timeouts, member id, one protocol."""
    return (
        nullable_string(group) + int32(SESSION_TIMEOUT_MS) + int32(REBALANCE_TIMEOUT_MS)
        + nullable_string(member_id) + nullable_string(PROTOCOL_TYPE)
        + int32(1) + nullable_string("only") + int32(0)  # protocol "only" with empty metadata
    )


@dataclass(frozen=True)
class JoinResult:
    """The parts of a JoinGroup v4 answer the test uses."""

    error_code: int
    generation_id: int
    member_id: str
    members: frozenset[str]  # only the leader is told the members


def _parse_join_group_v4(frame_body: bytes, correlation_id: int) -> JoinResult:
    """Response header v0 + JoinGroup v4 body."""
    reader = ResponseReader(frame_body)
    assert reader.take(">i") == correlation_id
    reader.take(">i")  # throttle_time_ms
    error_code, generation_id = reader.take(">h"), reader.take(">i")
    reader.string()  # protocol_name
    reader.string()  # leader
    member_id = reader.string()
    members = set()
    for _ in range(reader.take(">i")):
        members.add(reader.string())
        reader.nullable_bytes()  # metadata
    _assert_consumed(reader, "JoinGroup v4")
    assert member_id is not None
    return JoinResult(error_code, generation_id, member_id, frozenset(m for m in members if m))


def _join(conn: WireConnection, group: str, member_id: str, correlation_id: int) -> JoinResult:
    """One JoinGroup v4 round trip."""
    response = conn.request(API_JOIN_GROUP, 4, correlation_id, _join_group_v4_body(group, member_id))
    return _parse_join_group_v4(response, correlation_id)


def _describe_group_v0(conn: WireConnection, group: str) -> tuple[str, set[str]]:
    """DescribeGroups v0 for one group: (state, member ids)."""
    reader = _call(conn, API_DESCRIBE_GROUPS, 0, int32(1) + nullable_string(group), flexible=False)
    assert reader.take(">i") == 1, "one group asked, one answered"
    assert reader.take(">h") == ERROR_NONE
    assert reader.string() == group
    state = reader.string()
    reader.string()  # protocol_type
    reader.string()  # protocol_data
    members = set()
    for _ in range(reader.take(">i")):
        members.add(reader.string())
        reader.string()  # client_id
        reader.string()  # client_host
        reader.nullable_bytes()  # member_metadata
        reader.nullable_bytes()  # member_assignment
    _assert_consumed(reader, "DescribeGroups v0")
    assert state is not None
    return state, {m for m in members if m is not None}


def _two_joined_members(group: str, conn_a: WireConnection, conn_b: WireConnection) -> tuple[str, str]:
    """Make two dynamic members join ``group`` in one generation; returns their member ids.

    KIP-394: a first JoinGroup without a member id is answered MEMBER_ID_REQUIRED with the id
    to join with. A joins alone (generation 1); B's join then starts a rebalance that waits for
    every known member, so B's request is sent first and A's rejoin completes the generation.
    Every step waits only on answers, never on time.
    """
    first_a = _join(conn_a, group, "", 1)
    assert first_a.error_code == ERROR_MEMBER_ID_REQUIRED
    assert first_a.member_id
    alone = _join(conn_a, group, first_a.member_id, 2)
    assert (alone.error_code, alone.members) == (ERROR_NONE, {first_a.member_id})
    first_b = _join(conn_b, group, "", 1)
    assert first_b.error_code == ERROR_MEMBER_ID_REQUIRED
    assert first_b.member_id
    assert conn_b.send(frame(request_header(API_JOIN_GROUP, 4, 2, flexible=False)
                             + _join_group_v4_body(group, first_b.member_id)))
    rejoin_a = _join(conn_a, group, first_a.member_id, 3)
    joined_b = _parse_join_group_v4(conn_b.recv_frame(), 2)
    assert rejoin_a.error_code == joined_b.error_code == ERROR_NONE
    assert rejoin_a.generation_id == joined_b.generation_id == alone.generation_id + 1
    assert rejoin_a.members == {first_a.member_id, first_b.member_id}  # A stays the leader
    return first_a.member_id, first_b.member_id


def test_kip345_leave_group_v3_removes_several_members_in_one_request(group_broker) -> None:
    """LeaveGroup v3 naming two joined members and one unknown member id: the top-level error
    is NONE, each named member gets its own outcome (NONE for the two members,
    UNKNOWN_MEMBER_ID for the stranger), and the group ends up Empty with no members, so a
    removed member's heartbeat is refused with UNKNOWN_MEMBER_ID."""
    group = unique_group("leave-batch")
    stranger = "never-joined-0000"
    with _connect(group_broker, group) as conn_a, _connect(group_broker, group) as conn_b:
        member_a, member_b = _two_joined_members(group, conn_a, conn_b)
        state, members = _describe_group_v0(conn_a, group)
        assert members == {member_a, member_b}, state

        body = nullable_string(group) + int32(3)
        for member_id in (member_a, member_b, stranger):
            body += nullable_string(member_id) + nullable_string(None)  # dynamic: no instance id
        reader = _call(conn_a, API_LEAVE_GROUP, 3, body, flexible=False, correlation_id=10)
        reader.take(">i")  # throttle_time_ms
        top_level_error = reader.take(">h")
        outcomes = {}
        for _ in range(reader.take(">i")):
            member_id = present(reader.string(), "member id")
            reader.string()  # group_instance_id
            outcomes[member_id] = reader.take(">h")
        _assert_consumed(reader, "LeaveGroup v3")
        assert top_level_error == ERROR_NONE
        assert outcomes == {member_a: ERROR_NONE, member_b: ERROR_NONE, stranger: ERROR_UNKNOWN_MEMBER_ID}

        # With every member gone the pending rebalance finishes with nobody: the group is Empty
        # (waited for, as the coordinator completes it on its own timer).
        wait_until(lambda: _describe_group_v0(conn_a, group) == ("Empty", set()),
                   lambda: f"group {group} Empty with no members: {_describe_group_v0(conn_a, group)}",
                   timeout_s=CLIENT_TIMEOUT_S)
        heartbeat = (nullable_string(group) + int32(2) + nullable_string(member_a)
                     + nullable_string(None))  # Heartbeat v3: group, generation, member, instance
        reader = _call(conn_a, API_HEARTBEAT, 3, heartbeat, flexible=False, correlation_id=11)
        reader.take(">i")  # throttle_time_ms
        assert reader.take(">h") == ERROR_UNKNOWN_MEMBER_ID
        _assert_consumed(reader, "Heartbeat v3")
