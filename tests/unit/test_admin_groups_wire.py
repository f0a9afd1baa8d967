"""``Admin``'s group methods on the wire, without a broker: the requests each method builds (at
the version a broker's ApiVersions allows, serialized with kio's writer and read back) and
what it makes of responses that went through kio's writer and reader. Covers the KIP-848 and
KIP-932 paths (ConsumerGroupDescribe, ShareGroupDescribe, Describe/Alter/DeleteShareGroupOffsets)
that the interop tests cannot reach until the broker serves them."""

from __future__ import annotations

import asyncio
import datetime
import io
import uuid
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest
from kio.schema.errors import ErrorCode

from oncestream.cli_common import CliError
from oncestream.cli_groups import parse_datetime_ms, parse_duration_ms, parse_topic_partitions
from oncestream.client.admin.admin_groups import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    GroupAdmin,
)
from oncestream.client.common.cluster import COORDINATOR_NODE_BASE
from oncestream.client.common.message import TopicPartition
from oncestream.protocol.api_keys import (
    ALTER_SHARE_GROUP_OFFSETS,
    CONSUMER_GROUP_DESCRIBE,
    DELETE_SHARE_GROUP_OFFSETS,
    DESCRIBE_GROUPS,
    DESCRIBE_SHARE_GROUP_OFFSETS,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    SHARE_GROUP_DESCRIBE,
)
from oncestream.protocol.codec import build, reader_for, writer_for
from oncestream.protocol.schemas import kio_versions, request_module, response_module

T = TypeVar("T")
COORDINATOR_ID = 3
DEDICATED = COORDINATOR_NODE_BASE - COORDINATOR_ID
OK, NOT_COORDINATOR = ErrorCode.none, ErrorCode.not_coordinator
GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP = ErrorCode.group_id_not_found, ErrorCode.non_empty_group
_NO_THROTTLE = datetime.timedelta(0)


def _through_kio(entity: Any) -> Any:
    """``entity`` written by kio and read back: what a peer would see."""
    buf = io.BytesIO()
    writer_for(type(entity))(buf, entity)
    decoded, _size = reader_for(type(entity))(buf.getvalue(), 0)
    return decoded


class FakeCluster:
    """What ``GroupAdmin`` uses of ``Cluster``: a coordinator, ApiVersions and one canned answer
    per API (a function of the request and version)."""

    def __init__(self, versions: dict[int, int], answers: dict[int, Callable[[Any, int], Any]]) -> None:
        self.versions = versions
        self.answers = answers
        self.sent: list[tuple[int, int, Any]] = []
        self.forgotten = 0
        self.nodes = {DEDICATED: ("coordinator.example", 9093)}

    async def coordinator(self, key: str, key_type: int) -> int:
        return DEDICATED

    def forget_coordinator(self, key: str, key_type: int) -> None:
        self.forgotten += 1

    async def connection(self, node: int) -> FakeCluster:
        return self

    def supports(self, api_key: int) -> bool:
        return api_key in self.versions

    async def send(self, node: int | None, api_key: int, make: Callable[[Any, int], Any], *,
                   max_version: int | None = None, min_version: int = 0, **_: Any) -> Any:
        lo, hi = kio_versions(api_key)
        version = min(hi, self.versions[api_key], max_version if max_version is not None else hi)
        assert version >= max(lo, min_version)
        request = _through_kio(make(request_module(api_key, version), version))
        self.sent.append((api_key, version, request))
        return _through_kio(self.answers[api_key](request, version))


class AdminUnderTest(GroupAdmin):
    def __init__(self, cluster: FakeCluster) -> None:
        self._cluster = cluster  # type: ignore[assignment]
        self._retry_backoff_s = 0.0

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None) -> T:
        return asyncio.run(coro)

    async def _all_brokers(self) -> list[int]:
        return [1]


def _cgd_answer(error_code: ErrorCode = ErrorCode.none) -> Callable[[Any, int], Any]:
    def answer(request: Any, version: int) -> Any:
        m = response_module(CONSUMER_GROUP_DESCRIBE, version)
        topic_id = uuid.uuid4()

        def assignment(parts: tuple[int, ...]) -> Any:
            return build(m.Assignment, topic_partitions=(
                build(m.TopicPartitions, topic_id=topic_id, topic_name="orders", partitions=parts),))

        member = build(m.Member, member_id="mem-1", instance_id="inst-1", rack_id=None, member_epoch=7,
                       client_id="client-a", client_host="/10.0.0.1", subscribed_topic_names=("orders",),
                       subscribed_topic_regex=None, assignment=assignment((0, 2)), target_assignment=assignment((0,)),
                       member_type=1)
        group = build(m.DescribedGroup, error_code=error_code, error_message=None, group_id=request.group_ids[0],
                      group_state="Reconciling", group_epoch=9, assignment_epoch=8, assignor_name="uniform",
                      members=(member,) if not error_code else (), authorized_operations=-2147483648)
        return build(m.ConsumerGroupDescribeResponse, throttle_time=_NO_THROTTLE, groups=(group,))
    return answer


def _describe_groups_answer(request: Any, version: int) -> Any:
    m = response_module(DESCRIBE_GROUPS, version)
    return build(m.DescribeGroupsResponse, throttle_time=_NO_THROTTLE, groups=(build(
        m.DescribedGroup, error_code=OK, group_id=request.groups[0], group_state="Empty", protocol_type="consumer",
        protocol_data="", members=(), authorized_operations=-2147483648),))


def test_describe_consumer_groups_uses_consumer_group_describe() -> None:
    cluster = FakeCluster({CONSUMER_GROUP_DESCRIBE: 1, DESCRIBE_GROUPS: 5},
                          {CONSUMER_GROUP_DESCRIBE: _cgd_answer(), DESCRIBE_GROUPS: _describe_groups_answer})
    d = AdminUnderTest(cluster).describe_consumer_groups(["g"])["g"]
    assert [(api, v) for api, v, _r in cluster.sent] == [(CONSUMER_GROUP_DESCRIBE, 1)]
    assert cluster.sent[0][2].group_ids == ("g",)
    assert (d.type, d.state, d.partition_assignor, d.group_epoch, d.assignment_epoch, d.error) == (
        ConsumerGroupType.CONSUMER, ConsumerGroupState.RECONCILING, "uniform", 9, 8, None)
    assert d.is_simple_consumer_group is False
    assert d.coordinator is not None
    assert (d.coordinator.id, d.coordinator.host, d.coordinator.port) == (COORDINATOR_ID, "coordinator.example", 9093)
    [m] = d.members
    assert (m.member_id, m.client_id, m.host, m.group_instance_id, m.member_epoch) == (
        "mem-1", "client-a", "/10.0.0.1", "inst-1", 7)
    assert [(tp.topic, tp.partition) for tp in m.assignment.topic_partitions] == [("orders", 0), ("orders", 2)]
    assert m.target_assignment is not None
    assert [(tp.topic, tp.partition) for tp in m.target_assignment.topic_partitions] == [("orders", 0)]


def test_describe_consumer_groups_falls_back_to_describe_groups() -> None:
    """GROUP_ID_NOT_FOUND from ConsumerGroupDescribe (a classic group) and a broker without the
    API both end at DescribeGroups, as Kafka's admin does."""
    cluster = FakeCluster({CONSUMER_GROUP_DESCRIBE: 1, DESCRIBE_GROUPS: 5},
                          {CONSUMER_GROUP_DESCRIBE: _cgd_answer(GROUP_ID_NOT_FOUND), DESCRIBE_GROUPS: _describe_groups_answer})
    d = AdminUnderTest(cluster).describe_consumer_groups(["g"])["g"]
    assert [api for api, _v, _r in cluster.sent] == [CONSUMER_GROUP_DESCRIBE, DESCRIBE_GROUPS]
    assert (d.type, d.state, d.error, d.is_simple_consumer_group) == (
        ConsumerGroupType.CLASSIC, ConsumerGroupState.EMPTY, None, False)

    old = FakeCluster({DESCRIBE_GROUPS: 5}, {DESCRIBE_GROUPS: _describe_groups_answer})
    assert AdminUnderTest(old).describe_consumer_groups(["g"])["g"].state is ConsumerGroupState.EMPTY
    assert [api for api, _v, _r in old.sent] == [DESCRIBE_GROUPS]


def test_a_moved_coordinator_is_looked_up_again() -> None:
    answers = iter([NOT_COORDINATOR, ErrorCode.none])

    def answer(request: Any, version: int) -> Any:
        m = response_module(DESCRIBE_GROUPS, version)
        return build(m.DescribeGroupsResponse, throttle_time=_NO_THROTTLE, groups=(build(
            m.DescribedGroup, error_code=next(answers), group_id="g", group_state="Stable", protocol_type="consumer",
            protocol_data="range", members=(), authorized_operations=-2147483648),))

    cluster = FakeCluster({DESCRIBE_GROUPS: 5}, {DESCRIBE_GROUPS: answer})
    assert AdminUnderTest(cluster).describe_consumer_groups(["g"])["g"].state is ConsumerGroupState.STABLE
    assert cluster.forgotten == 1
    assert len(cluster.sent) == 2


def test_list_consumer_groups_sends_filters_by_version() -> None:
    def answer(request: Any, version: int) -> Any:
        m = response_module(LIST_GROUPS, version)
        listed = [("c1", "consumer", "Stable", "consumer"), ("s1", "", "Empty", "share"), ("k1", "consumer", "Empty", "classic")]
        return build(m.ListGroupsResponse, throttle_time=_NO_THROTTLE, error_code=OK, groups=tuple(
            build(m.ListedGroup, group_id=g, protocol_type=p, group_state=s, group_type=t) for g, p, s, t in listed))

    cluster = FakeCluster({LIST_GROUPS: 5}, {LIST_GROUPS: answer})
    result = AdminUnderTest(cluster).list_consumer_groups(states=["Empty"], types=[ConsumerGroupType.SHARE])
    request = cluster.sent[0][2]
    assert (request.states_filter, request.types_filter) == (("Empty",), ("share",))
    # The filters apply here too (this fake broker ignores them).
    assert [(g.group_id, g.type, g.state) for g in result.valid] == [("s1", ConsumerGroupType.SHARE, ConsumerGroupState.EMPTY)]

    v3 = FakeCluster({LIST_GROUPS: 3}, {LIST_GROUPS: answer})
    result = AdminUnderTest(v3).list_consumer_groups(types=["classic"])
    assert v3.sent[0][1] == 3
    # Below v4 no state, below v5 no type: every group of an old broker is classic.
    assert [(g.group_id, g.type, g.state) for g in result.valid] == [
        (g, ConsumerGroupType.CLASSIC, ConsumerGroupState.UNKNOWN) for g in ("c1", "k1", "s1")]


def test_describe_share_groups() -> None:
    def answer(request: Any, version: int) -> Any:
        m = response_module(SHARE_GROUP_DESCRIBE, version)
        assignment = build(m.Assignment, topic_partitions=(
            build(m.TopicPartitions, topic_id=uuid.uuid4(), topic_name="jobs", partitions=(1, 0)),))
        member = build(m.Member, member_id="sm", rack_id=None, member_epoch=3, client_id="share-client",
                       client_host="/10.0.0.2", subscribed_topic_names=("jobs",), assignment=assignment)
        return build(m.ShareGroupDescribeResponse, throttle_time=_NO_THROTTLE, groups=(build(
            m.DescribedGroup, error_code=OK, error_message=None, group_id=request.group_ids[0], group_state="Stable",
            group_epoch=4, assignment_epoch=4, assignor_name="simple", members=(member,),
            authorized_operations=-2147483648),))

    cluster = FakeCluster({SHARE_GROUP_DESCRIBE: 1}, {SHARE_GROUP_DESCRIBE: answer})
    d = AdminUnderTest(cluster).describe_share_groups(["sg"])["sg"]
    assert (d.group_id, d.state, d.group_epoch, d.assignment_epoch, d.error) == ("sg", ConsumerGroupState.STABLE, 4, 4, None)
    [m] = d.members
    assert (m.member_id, m.client_id, m.host, m.member_epoch) == ("sm", "share-client", "/10.0.0.2", 3)
    assert [(tp.topic, tp.partition) for tp in m.assignment.topic_partitions] == [("jobs", 1), ("jobs", 0)]


def test_share_group_offsets_listed_altered_and_deleted() -> None:
    def describe(request: Any, version: int) -> Any:
        m = response_module(DESCRIBE_SHARE_GROUP_OFFSETS, version)
        [g] = request.groups
        assert g.topics is None or [(t.topic_name, t.partitions) for t in g.topics] == [("jobs", (0, 1))]
        parts = (build(m.DescribeShareGroupOffsetsResponsePartition, partition_index=1, start_offset=40, leader_epoch=2,
                       lag=5, error_code=OK, error_message=None),
                 build(m.DescribeShareGroupOffsetsResponsePartition, partition_index=0, start_offset=-1, leader_epoch=-1,
                       lag=-1, error_code=OK, error_message=None))
        return build(m.DescribeShareGroupOffsetsResponse, throttle_time=_NO_THROTTLE, groups=(build(
            m.DescribeShareGroupOffsetsResponseGroup, group_id=g.group_id, error_code=OK, error_message=None, topics=(
                build(m.DescribeShareGroupOffsetsResponseTopic, topic_name="jobs", topic_id=uuid.uuid4(),
                      partitions=parts),)),))

    def alter(request: Any, version: int) -> Any:
        m = response_module(ALTER_SHARE_GROUP_OFFSETS, version)
        [t] = request.topics
        assert (request.group_id, t.topic_name, [(p.partition_index, p.start_offset) for p in t.partitions]) == (
            "sg", "jobs", [(0, 10), (1, 20)])
        return build(m.AlterShareGroupOffsetsResponse, throttle_time=_NO_THROTTLE, error_code=OK, error_message=None, responses=(
            build(m.AlterShareGroupOffsetsResponseTopic, topic_name="jobs", topic_id=uuid.uuid4(), partitions=(
                build(m.AlterShareGroupOffsetsResponsePartition, partition_index=0, error_code=OK, error_message=None),
                build(m.AlterShareGroupOffsetsResponsePartition, partition_index=1, error_code=NON_EMPTY_GROUP,
                      error_message="busy"))),))

    def delete(request: Any, version: int) -> Any:
        m = response_module(DELETE_SHARE_GROUP_OFFSETS, version)
        assert [t.topic_name for t in request.topics] == ["jobs"]
        return build(m.DeleteShareGroupOffsetsResponse, throttle_time=_NO_THROTTLE, error_code=OK, error_message=None, responses=(
            build(m.DeleteShareGroupOffsetsResponseTopic, topic_name="jobs", topic_id=uuid.uuid4(), error_code=OK,
                  error_message=None),))

    cluster = FakeCluster({DESCRIBE_SHARE_GROUP_OFFSETS: 1, ALTER_SHARE_GROUP_OFFSETS: 0, DELETE_SHARE_GROUP_OFFSETS: 0},
                          {DESCRIBE_SHARE_GROUP_OFFSETS: describe, ALTER_SHARE_GROUP_OFFSETS: alter,
                           DELETE_SHARE_GROUP_OFFSETS: delete})
    admin = AdminUnderTest(cluster)
    for partitions in (None, [TopicPartition("jobs", 0), TopicPartition("jobs", 1)]):
        found = admin.list_share_group_offsets([ConsumerGroupTopicPartitions("sg", partitions)])["sg"]
        assert found.error is None
        assert [(p.topic, p.partition, p.start_offset, p.leader_epoch, p.lag) for p in found.partitions] == [
            ("jobs", 0, -1, -1, -1), ("jobs", 1, 40, 2, 5)]

    altered = admin.alter_share_group_offsets(
        ConsumerGroupTopicPartitions("sg", [TopicPartition("jobs", 0, 10), TopicPartition("jobs", 1, 20)]))
    assert altered.error is None
    assert [(tp.partition, tp.error.name() if tp.error else None) for tp in altered.topic_partitions or ()] == [
        (0, None), (1, "NON_EMPTY_GROUP")]
    assert admin.delete_share_group_offsets("sg", ["jobs"]) == (None, {"jobs": None})


def test_admin_offset_commit_and_delete_requests() -> None:
    def commit(request: Any, version: int) -> Any:
        m = response_module(OFFSET_COMMIT, version)
        return build(m.OffsetCommitResponse, throttle_time=_NO_THROTTLE, topics=tuple(
            build(m.OffsetCommitResponseTopic, name=t.name, partitions=tuple(
                build(m.OffsetCommitResponsePartition, partition_index=p.partition_index, error_code=OK)
                for p in t.partitions)) for t in request.topics))

    def delete(request: Any, version: int) -> Any:
        m = response_module(OFFSET_DELETE, version)
        return build(m.OffsetDeleteResponse, error_code=OK, throttle_time=_NO_THROTTLE, topics=tuple(
            build(m.OffsetDeleteResponseTopic, name=t.name, partitions=tuple(
                build(m.OffsetDeleteResponsePartition, partition_index=p.partition_index, error_code=OK)
                for p in t.partitions)) for t in request.topics))

    cluster = FakeCluster({OFFSET_COMMIT: 10, OFFSET_DELETE: 0}, {OFFSET_COMMIT: commit, OFFSET_DELETE: delete})
    admin = AdminUnderTest(cluster)
    done = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        "g", [TopicPartition("a", 1, 5, "meta"), TopicPartition("b", 0, 7)])])["g"]
    assert [(tp.topic, tp.partition, tp.offset, tp.error) for tp in done.topic_partitions or ()] == [
        ("a", 1, 5, None), ("b", 0, 7, None)]
    api, version, request = cluster.sent[0]
    assert (api, version) == (OFFSET_COMMIT, 8)  # v9+ is the KIP-848 member-epoch form
    assert (request.generation_id_or_member_epoch, request.member_id, request.group_instance_id) == (-1, "", None)
    assert [(t.name, [(p.partition_index, p.committed_offset, p.committed_metadata) for p in t.partitions])
            for t in request.topics] == [("a", [(1, 5, "meta")]), ("b", [(0, 7, None)])]
    deleted = admin.delete_consumer_group_offsets("g", [TopicPartition("a", 1)])
    assert (deleted.error, [(tp.topic, tp.partition, tp.error) for tp in deleted.topic_partitions or ()]) == (
        None, [("a", 1, None)])


def test_cli_parsers() -> None:
    assert parse_topic_partitions(["t", "u:2,0,2"]) == [("t", None), ("u", [0, 2])]
    with pytest.raises(CliError):
        parse_topic_partitions(["u:x"])
    assert parse_duration_ms("P1DT2H3M4.5S") == ((26 * 60 + 3) * 60 + 4.5) * 1000
    assert parse_duration_ms("PT30M") == 30 * 60_000
    assert parse_duration_ms("-PT1S") == -1000
    for bad in ("P", "PT", "1h", "P1H"):
        with pytest.raises(CliError):
            parse_duration_ms(bad)
    assert parse_datetime_ms("2021-01-01T09:00:00+09:00") == parse_datetime_ms("2021-01-01T00:00:00Z") == 1609459200000
    with pytest.raises(CliError):
        parse_datetime_ms("yesterday")
