"""Share-group handlers on a real BrokerState (no sockets): bad input gets Kafka's error codes and
changes nothing; share-partition state survives a restart of the state (the __share_group_state
replay); a classic group's id is not a share group; share groups can be switched off."""

from __future__ import annotations

import asyncio
import datetime
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from oncestream.authz.authorizer import StandardAuthorizer
from oncestream.broker import share_group_configs
from oncestream.broker.config import BrokerConfig
from oncestream.broker.handlers import api_versions, configs, groups, share, share_admin
from oncestream.broker.principal import ANONYMOUS_PRINCIPAL
from oncestream.broker.share_service import SHARE_STATE_TOPIC
from oncestream.broker.state import BrokerState
from oncestream.coordinator.group.consumer.messages import ConsumerHeartbeatRequest
from oncestream.coordinator.group.messages import OffsetCommitRequest, PartitionOffsetCommit
from oncestream.coordinator.share.partition import RecordState
from oncestream.errors import InvalidConfigError
from oncestream.protocol import api_keys as k
from oncestream.protocol.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from oncestream.protocol.codec import RequestHeader
from oncestream.protocol.records import NewRecord, encode_batch
from oncestream.protocol.schemas import request_module
from oncestream.topic_partition import TopicPartition
from tests.support.narrow import present

TOPIC = "t"
GROUP = "g"
EARLIEST = {"share.auto.offset.reset": "earliest"}


def _state(data_dir: Path, **props: str) -> BrokerState:
    config = BrokerConfig.from_properties("127.0.0.1", 0, dict(props))
    return BrokerState(data_dir, config)


def _with_records(state: BrokerState, count: int) -> uuid.UUID:
    if TOPIC not in state.logs.topics():
        state.logs.create_topic(TOPIC, 1, {}, now_ms=state.now_ms())
    state.logs.get(TOPIC, 0).append(
        encode_batch([NewRecord(value=f"v{i}".encode()) for i in range(count)], now_ms=state.now_ms()),
        state.now_ms())
    state.shares.group_configs[GROUP] = dict(EARLIEST)
    return state.logs.topics()[TOPIC].topic_id


def _header(api_key: int) -> RequestHeader:
    return RequestHeader(api_key, 1, 1, "test", 0)


def _fetch(state: BrokerState, member: str, epoch: int, topic_id: uuid.UUID,
           acks: tuple[tuple[int, int, int], ...] = ()) -> Any:
    m = request_module(k.SHARE_FETCH, 1)
    request = m.ShareFetchRequest(
        group_id=GROUP, member_id=member, share_session_epoch=epoch, max_wait=datetime.timedelta(0),
        min_bytes=1, max_bytes=1 << 20, max_records=100, batch_size=100,
        topics=(m.FetchTopic(topic_id=topic_id, partitions=(m.FetchPartition(
            partition_index=0, acknowledgement_batches=tuple(
                m.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=(t,))
                for f, last, t in acks)),)),),
        forgotten_topics_data=())
    return asyncio.run(share.handle_share_fetch(state, _header(k.SHARE_FETCH), request))


def _acknowledge(state: BrokerState, member: str, epoch: int, topic_id: uuid.UUID,
                 acks: tuple[tuple[int, int, int], ...]) -> Any:
    m = request_module(k.SHARE_ACKNOWLEDGE, 1)
    request = m.ShareAcknowledgeRequest(
        group_id=GROUP, member_id=member, share_session_epoch=epoch,
        topics=(m.AcknowledgeTopic(topic_id=topic_id, partitions=(m.AcknowledgePartition(
            partition_index=0, acknowledgement_batches=tuple(
                m.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=(t,))
                for f, last, t in acks)),)),))
    return asyncio.run(share.handle_share_acknowledge(state, _header(k.SHARE_ACKNOWLEDGE), request))


def _acquired(response: Any) -> list[tuple[int, int]]:
    return [(r.first_offset, r.last_offset) for t in response.responses for p in t.partitions
            for r in p.acquired_records]


def _partition_errors(response: Any) -> list[ErrorCode]:
    return [p.error_code for t in response.responses for p in t.partitions]


def _ack_errors(response: Any) -> list[int]:
    return [p.acknowledge_error_code for t in response.responses for p in t.partitions]


@pytest.fixture
def state(tmp_path: Path):
    s = _state(tmp_path / "data")
    try:
        yield s
    finally:
        s.close()


def test_unknown_session_and_wrong_epoch_change_nothing(state: BrokerState) -> None:
    topic_id = _with_records(state, 5)
    response = _fetch(state, "a", 3, topic_id)
    assert response.error_code == ErrorCode.share_session_not_found
    assert state.shares.partitions == {}
    assert _acquired(_fetch(state, "a", 0, topic_id)) == [(0, 4)]
    before = state.shares.partitions[(GROUP, topic_id, 0)].snapshot()
    assert _fetch(state, "a", 7, topic_id, acks=((0, 4, 1),)).error_code == ErrorCode.invalid_share_session_epoch
    assert state.shares.partitions[(GROUP, topic_id, 0)].snapshot() == before
    session = state.shares.sessions.get(GROUP, "a")
    assert session is not None
    assert session.next_epoch == 1  # the refused request did not move the epoch on
    assert _fetch(state, "a", 0, topic_id, acks=((0, 0, 1),)).error_code == ErrorCode.invalid_request


def test_acknowledging_records_not_acquired_or_held_by_another_session(state: BrokerState) -> None:
    topic_id = _with_records(state, 5)
    assert _acquired(_fetch(state, "a", 0, topic_id)) == [(0, 4)]
    assert _acquired(_fetch(state, "b", 0, topic_id)) == []
    sp = state.shares.partitions[(GROUP, topic_id, 0)]
    before = sp.snapshot()
    foreign = _acknowledge(state, "b", 1, topic_id, ((0, 4, 1),))
    assert foreign.error_code == ErrorCode.none
    assert _partition_errors(foreign) == [ErrorCode.invalid_record_state]
    beyond = _acknowledge(state, "a", 1, topic_id, ((3, 7, 1),))
    assert _partition_errors(beyond) == [ErrorCode.invalid_record_state]
    assert sp.snapshot() == before
    assert sp.acquired_by("a") == [0, 1, 2, 3, 4]
    assert _acknowledge(state, "a", 0, topic_id, ((0, 0, 1),)).error_code == ErrorCode.invalid_share_session_epoch
    assert _acknowledge(state, "zz", 4, topic_id, ((0, 0, 1),)).error_code == ErrorCode.share_session_not_found
    # The right member, session and epoch: applied.
    ok = _acknowledge(state, "a", 2, topic_id, ((0, 4, 1),))
    assert _partition_errors(ok) == [ErrorCode.none]
    assert sp.start_offset == 5


def test_state_survives_a_restart_through_the_state_topic(tmp_path: Path) -> None:
    first = _state(tmp_path / "data", **{"share.coordinator.snapshot.update.records.per.snapshot": "2"})
    try:
        topic_id = _with_records(first, 6)
        assert _acquired(_fetch(first, "a", 0, topic_id)) == [(0, 5)]
        for epoch, offset, ack_type in ((1, 0, 1), (2, 1, 3), (3, 2, 2), (4, 3, 1)):
            assert _ack_errors(_fetch(first, "a", epoch, topic_id, acks=((offset, offset, ack_type),))) == [0]
        live = first.shares.partitions[(GROUP, topic_id, 0)].snapshot()
    finally:
        first.close()  # nothing else is written at close: the records already are in the log
    second = _state(tmp_path / "data")
    try:
        assert SHARE_STATE_TOPIC in second.logs.topics()
        restored = second.shares.partitions[(GROUP, topic_id, 0)]
        assert restored.snapshot() == live
        # 2 was released and acquired again by the same fetch; 4, 5 acquired, unacknowledged:
        # all AVAILABLE after the restart, their delivery counts kept.
        for offset, count in ((2, 2), (4, 1), (5, 1)):
            record = restored.record(offset)
            assert record is not None
            assert (record.state, record.delivery_count) == (RecordState.AVAILABLE, count)
        second.shares.group_configs[GROUP] = dict(EARLIEST)
        assert _acquired(_fetch(second, "b", 0, topic_id)) == [(2, 2), (4, 5)]
    finally:
        second.close()


def test_classic_group_id_is_not_a_share_group(state: BrokerState) -> None:
    _with_records(state, 1)
    state.groups.complete(state.groups.coordinator.commit_offsets(
        OffsetCommitRequest(GROUP, {TopicPartition(TOPIC, 0): PartitionOffsetCommit(1)}), state.now_ms())[1])
    m = request_module(k.SHARE_GROUP_HEARTBEAT, 1)
    response: Any = share.handle_share_group_heartbeat(state, _header(k.SHARE_GROUP_HEARTBEAT), m.ShareGroupHeartbeatRequest(
        group_id=GROUP, member_id="a", member_epoch=0, rack_id=None, subscribed_topic_names=(TOPIC,)))
    assert response.error_code == ErrorCode.group_id_not_found
    assert state.shares.groups.group(GROUP) is None



def test_consumer_group_id_without_offsets_is_not_a_share_group(state: BrokerState) -> None:
    """A KIP-848 group with a member but no committed offset has no classic state: its id is
    still taken, and a ShareGroupHeartbeat on it creates nothing."""
    _with_records(state, 1)
    result, writes = state.groups.coordinator.consumer_group_heartbeat(ConsumerHeartbeatRequest(
        group_id=GROUP, member_id="c1", member_epoch=0, rebalance_timeout_ms=30_000,
        subscribed_topic_names=(TOPIC,), server_assignor="uniform", owned={}), state.now_ms())
    state.groups.complete(writes)
    assert result.error == ErrorCode.none
    assert state.groups.coordinator.group_type(GROUP) == "consumer"
    m = request_module(k.SHARE_GROUP_HEARTBEAT, 1)
    response: Any = share.handle_share_group_heartbeat(state, _header(k.SHARE_GROUP_HEARTBEAT), m.ShareGroupHeartbeatRequest(
        group_id=GROUP, member_id="a", member_epoch=0, rack_id=None, subscribed_topic_names=(TOPIC,)))
    assert response.error_code == ErrorCode.group_id_not_found
    assert state.shares.groups.group(GROUP) is None

def _api_versions(state: BrokerState) -> Any:
    request = request_module(k.API_VERSIONS_KEY, 3).ApiVersionsRequest(client_software_name="t",
                                                                      client_software_version="1")
    response: Any = api_versions.handle(state, RequestHeader(k.API_VERSIONS_KEY, 3, 1, "t", 0), request)
    return response


def test_share_groups_switched_off(tmp_path: Path) -> None:
    off = _state(tmp_path / "data", **{"group.share.enable": "false"})
    try:
        versions = _api_versions(off)
        advertised = {entry.api_key for entry in versions.api_keys}
        assert not advertised & k.SHARE_GROUP_APIS
        assert k.FETCH in advertised
        topic_id = _with_records(off, 1)
        assert _fetch(off, "a", 0, topic_id).error_code == ErrorCode.unsupported_version
    finally:
        off.close()
    on = _state(tmp_path / "data2")
    try:
        versions = _api_versions(on)
        assert {entry.api_key for entry in versions.api_keys} >= k.SHARE_GROUP_APIS
        assert {f.name: f.max_version_level for f in versions.finalized_features}["share.version"] == 1
    finally:
        on.close()


def _describe_offsets(state: BrokerState, version: int = 1) -> list[tuple[int, int, int, int]]:
    m = request_module(k.DESCRIBE_SHARE_GROUP_OFFSETS, version)
    request = m.DescribeShareGroupOffsetsRequest(groups=(m.DescribeShareGroupOffsetsRequestGroup(
        group_id=GROUP, topics=(m.DescribeShareGroupOffsetsRequestTopic(topic_name=TOPIC, partitions=(0,)),)),))
    response: Any = asyncio.run(share_admin.handle_describe_offsets(
        state, RequestHeader(k.DESCRIBE_SHARE_GROUP_OFFSETS, version, 1, "t", 0), request))
    return [(g.error_code, p.partition_index, p.start_offset, getattr(p, "lag", -1))
            for g in response.groups for t in g.topics for p in t.partitions]


def _alter_offsets(state: BrokerState, start: int) -> Any:
    m = request_module(k.ALTER_SHARE_GROUP_OFFSETS, 0)
    request = m.AlterShareGroupOffsetsRequest(group_id=GROUP, topics=(m.AlterShareGroupOffsetsRequestTopic(
        topic_name=TOPIC, partitions=(m.AlterShareGroupOffsetsRequestPartition(partition_index=0,
                                                                               start_offset=start),)),))
    return asyncio.run(share_admin.handle_alter_offsets(state, RequestHeader(k.ALTER_SHARE_GROUP_OFFSETS, 0, 1, "t", 0),
                                                        request))


def _delete_offsets(state: BrokerState) -> Any:
    m = request_module(k.DELETE_SHARE_GROUP_OFFSETS, 0)
    request = m.DeleteShareGroupOffsetsRequest(group_id=GROUP, topics=(
        m.DeleteShareGroupOffsetsRequestTopic(topic_name=TOPIC),))
    return asyncio.run(share_admin.handle_delete_offsets(state, RequestHeader(k.DELETE_SHARE_GROUP_OFFSETS, 0, 1, "t", 0),
                                                         request))


def _heartbeat(state: BrokerState, member: str, epoch: int) -> Any:
    m = request_module(k.SHARE_GROUP_HEARTBEAT, 1)
    return share.handle_share_group_heartbeat(state, _header(k.SHARE_GROUP_HEARTBEAT), m.ShareGroupHeartbeatRequest(
        group_id=GROUP, member_id=member, member_epoch=epoch, rack_id=None,
        subscribed_topic_names=(TOPIC,) if epoch == 0 else None))


def test_share_group_offsets_describe_alter_delete(tmp_path: Path) -> None:
    first = _state(tmp_path / "data")
    try:
        topic_id = _with_records(first, 10)
        assert _describe_offsets(first) == [(ErrorCode.none, 0, -1, -1)]  # no state yet
        assert _acquired(_fetch(first, "a", 0, topic_id)) == [(0, 9)]
        assert _ack_errors(_fetch(first, "a", 1, topic_id, acks=((0, 3, 1), (5, 5, 1)))) == [0]
        # Start 4; of the 6 records from there to the high watermark one (5) is done.
        assert _describe_offsets(first) == [(ErrorCode.none, 0, 4, 5)]
        assert _heartbeat(first, "a", 0).error_code == ErrorCode.none
        assert _alter_offsets(first, 8).error_code == ErrorCode.non_empty_group
        assert _delete_offsets(first).error_code == ErrorCode.non_empty_group
        assert first.shares.groups.group(GROUP) is not None
        first.shares.groups.expire(first.mono_ms() + 10**9)  # the member's session ran out
        altered = _alter_offsets(first, 8)
        assert altered.error_code == ErrorCode.none
        assert [p.error_code for t in altered.responses for p in t.partitions] == [ErrorCode.none]
        assert _describe_offsets(first, version=0) == [(ErrorCode.none, 0, 8, -1)]
    finally:
        first.close()
    second = _state(tmp_path / "data")
    try:
        assert _describe_offsets(second) == [(ErrorCode.none, 0, 8, 2)]
        second.shares.group_configs[GROUP] = dict(EARLIEST)
        assert _acquired(_fetch(second, "b", 0, topic_id)) == [(8, 9)]
        deleted = _delete_offsets(second)
        assert deleted.error_code == ErrorCode.none
        assert [t.error_code for t in deleted.responses] == [ErrorCode.none]
        assert _describe_offsets(second) == [(ErrorCode.none, 0, -1, -1)]
    finally:
        second.close()
    third = _state(tmp_path / "data")
    try:
        assert _describe_offsets(third) == [(ErrorCode.none, 0, -1, -1)]  # the delete is durable
    finally:
        third.close()


def test_state_topic_is_pruned_below_the_oldest_snapshot_still_needed(tmp_path: Path) -> None:
    first = _state(tmp_path / "data", **{"share.coordinator.snapshot.update.records.per.snapshot": "3",
                                         "share.coordinator.state.topic.num.partitions": "1",
                                         "share.coordinator.state.topic.segment.bytes": "200"})
    try:
        topic_id = _with_records(first, 40)
        assert _acquired(_fetch(first, "a", 0, topic_id)) == [(0, 39)]
        for epoch in range(1, 31):  # one acknowledgement per request: 30 state records
            offset = epoch - 1
            assert _ack_errors(_fetch(first, "a", epoch, topic_id, acks=((offset, offset, 1),))) == [0]
        state_log = first.logs.get(SHARE_STATE_TOPIC, 0)
        assert state_log.log_start_offset == 0
        assert first.shares.prune() == [0]
        assert state_log.log_start_offset > 0
        assert first.shares.prune() == []  # nothing more below the latest snapshot
        live = first.shares.partitions[(GROUP, topic_id, 0)].snapshot()
    finally:
        first.close()
    second = _state(tmp_path / "data", **{"share.coordinator.state.topic.num.partitions": "1"})
    try:
        assert second.shares.partitions[(GROUP, topic_id, 0)].snapshot() == live
    finally:
        second.close()


def _allow(resource_type: ResourceType, name: str) -> AclBinding:
    return AclBinding(resource_type, name, PatternType.LITERAL, ANONYMOUS_PRINCIPAL, "*", AclOperation.READ,
                      AclPermissionType.ALLOW)


def test_acls_read_on_group_and_topic(state: BrokerState) -> None:
    topic_id = _with_records(state, 3)
    state.authorizer = StandardAuthorizer([])
    assert _fetch(state, "a", 0, topic_id).error_code == ErrorCode.group_authorization_failed
    assert _heartbeat(state, "a", 0).error_code == ErrorCode.group_authorization_failed
    state.authorizer = StandardAuthorizer([_allow(ResourceType.GROUP, GROUP)])
    # No ACL on the topic: DESCRIBE for the subscription and READ for the fetch are denied.
    assert _heartbeat(state, "a", 0).error_code == ErrorCode.topic_authorization_failed
    denied = _fetch(state, "a", 0, topic_id)
    assert denied.error_code == ErrorCode.none
    assert _partition_errors(denied) == [ErrorCode.topic_authorization_failed]
    assert _acquired(denied) == []
    state.authorizer = StandardAuthorizer([_allow(ResourceType.GROUP, GROUP), _allow(ResourceType.TOPIC, TOPIC)])
    assert _heartbeat(state, "a", 0).error_code == ErrorCode.none
    assert _acquired(_fetch(state, "a", 0, topic_id)) == [(0, 2)]


def test_classic_join_on_a_share_group_id_is_inconsistent(state: BrokerState) -> None:
    _with_records(state, 1)
    assert _heartbeat(state, "a", 0).error_code == ErrorCode.none
    m = request_module(k.JOIN_GROUP, 5)
    request = m.JoinGroupRequest(group_id=GROUP, session_timeout=datetime.timedelta(seconds=10),
                                 rebalance_timeout=datetime.timedelta(seconds=10), member_id="",
                                 group_instance_id=None, protocol_type="consumer",
                                 protocols=(m.JoinGroupRequestProtocol(name="range", metadata=b""),))
    response: Any = asyncio.run(groups.handle_join_group(state, RequestHeader(k.JOIN_GROUP, 5, 1, "t", 0), request))
    assert response.error_code == ErrorCode.inconsistent_group_protocol
    assert state.groups.coordinator.group_state(GROUP) is None


def _list_groups(state: BrokerState, version: int, **filters: tuple[str, ...]) -> list[tuple[str, str, str]]:
    m = request_module(k.LIST_GROUPS, version)
    response: Any = groups.handle_list_groups(state, RequestHeader(k.LIST_GROUPS, version, 1, "t", 0),
                                              m.ListGroupsRequest(**filters))
    return [(g.group_id, g.protocol_type, getattr(g, "group_type", "")) for g in response.groups]


def test_list_groups_shows_share_groups(state: BrokerState) -> None:
    _with_records(state, 1)
    assert _heartbeat(state, "a", 0).error_code == ErrorCode.none
    state.groups.complete(state.groups.coordinator.commit_offsets(
        OffsetCommitRequest("classic-one", {TopicPartition(TOPIC, 0): PartitionOffsetCommit(1)}), state.now_ms())[1])
    assert (GROUP, "share", "") in _list_groups(state, 0)
    everything = _list_groups(state, 5)
    assert (GROUP, "share", "share") in everything
    assert ("classic-one", "", "classic") in everything
    assert _list_groups(state, 5, types_filter=("Share",)) == [(GROUP, "share", "share")]
    assert _list_groups(state, 5, types_filter=("classic",)) == [("classic-one", "", "classic")]
    assert _list_groups(state, 4, states_filter=("stable",)) == [(GROUP, "share", "")]
    assert _list_groups(state, 4, states_filter=("Empty",)) == [("classic-one", "", "")]


def _delete_groups(state: BrokerState, *group_ids: str) -> dict[str, ErrorCode]:
    m = request_module(k.DELETE_GROUPS, 2)
    response: Any = asyncio.run(groups.handle_delete_groups(state, RequestHeader(k.DELETE_GROUPS, 2, 1, "t", 0),
                                                            m.DeleteGroupsRequest(groups_names=group_ids)))
    return {r.group_id: r.error_code for r in response.results}


def test_delete_groups_deletes_an_empty_share_group_and_its_state(tmp_path: Path) -> None:
    first = _state(tmp_path / "data")
    try:
        topic_id = _with_records(first, 3)
        assert _heartbeat(first, "a", 0).error_code == ErrorCode.none
        assert _acquired(_fetch(first, "a", 0, topic_id)) == [(0, 2)]
        assert _delete_groups(first, GROUP) == {GROUP: ErrorCode.non_empty_group}
        first.shares.groups.expire(first.mono_ms() + 10**9)
        assert _delete_groups(first, GROUP, "nobody") == {GROUP: ErrorCode.none,
                                                          "nobody": ErrorCode.group_id_not_found}
        assert first.shares.groups.group(GROUP) is None
        assert first.shares.state_of(GROUP) == {}
    finally:
        first.close()
    second = _state(tmp_path / "data")
    try:
        assert second.shares.state_of(GROUP) == {}  # the deletion is durable
    finally:
        second.close()


def test_share_group_with_state_exists_after_a_restart(tmp_path: Path) -> None:
    first = _state(tmp_path / "data")
    try:
        topic_id = _with_records(first, 2)
        assert _acquired(_fetch(first, "a", 0, topic_id)) == [(0, 1)]
    finally:
        first.close()
    second = _state(tmp_path / "data")
    try:
        assert _list_groups(second, 5, types_filter=("share",)) == [(GROUP, "share", "share")]
        assert _delete_groups(second, GROUP) == {GROUP: ErrorCode.none}
        assert second.shares.state_of(GROUP) == {}
    finally:
        second.close()


def test_by_duration_reset_and_its_validation(state: BrokerState) -> None:
    assert share_group_configs.duration_ms("PT1H") == 3_600_000
    assert share_group_configs.duration_ms("P1DT0.5S") == 86_400_500
    assert share_group_configs.duration_ms("PT0S") == 0
    assert share_group_configs.duration_ms("P") is None
    assert share_group_configs.duration_ms("1h") is None
    ok = share_group_configs.apply_operations({}, [("share.auto.offset.reset", 0, "by_duration:PT10M")])
    assert ok == {"share.auto.offset.reset": "by_duration:PT10M"}
    for bad in ("by_duration:", "by_duration:-PT1M", "by_duration:10m", "newest"):
        with pytest.raises(InvalidConfigError):
            share_group_configs.apply_operations({}, [("share.auto.offset.reset", 0, bad)])
    # Records stamped one hour ago and now: a 10-minute look-back starts at the recent ones.
    state.logs.create_topic(TOPIC, 1, {}, now_ms=state.now_ms())
    log = state.logs.get(TOPIC, 0)
    hour_ago = state.now_ms() - 3_600_000
    log.append(encode_batch([NewRecord(value=b"old", timestamp_ms=hour_ago)] * 3, now_ms=hour_ago), state.now_ms())
    log.append(encode_batch([NewRecord(value=b"new")] * 2, now_ms=state.now_ms()), state.now_ms())
    topic_id = state.logs.topics()[TOPIC].topic_id
    state.shares.group_configs[GROUP] = {"share.auto.offset.reset": "by_duration:PT10M"}
    assert _acquired(_fetch(state, "a", 0, topic_id)) == [(3, 4)]


def test_group_configs_are_durable_and_described(tmp_path: Path) -> None:
    first = _state(tmp_path / "data")
    try:
        m = request_module(k.INCREMENTAL_ALTER_CONFIGS, 1)
        request = m.IncrementalAlterConfigsRequest(resources=(m.AlterConfigsResource(
            resource_type=32, resource_name=GROUP, configs=(
                m.AlterableConfig(name="share.isolation.level", config_operation=0, value="read_committed"),
                m.AlterableConfig(name="share.auto.offset.reset", config_operation=0, value="earliest"))),),
            validate_only=False)
        response: Any = asyncio.run(configs.handle_incremental_alter(
            first, RequestHeader(k.INCREMENTAL_ALTER_CONFIGS, 1, 1, "t", 0), request))
        assert [r.error_code for r in response.responses] == [ErrorCode.none]
        bad = m.IncrementalAlterConfigsRequest(resources=(m.AlterConfigsResource(
            resource_type=32, resource_name=GROUP, configs=(
                m.AlterableConfig(name="share.isolation.level", config_operation=0, value="dirty"),)),),
            validate_only=False)
        refused: Any = asyncio.run(configs.handle_incremental_alter(
            first, RequestHeader(k.INCREMENTAL_ALTER_CONFIGS, 1, 1, "t", 0), bad))
        assert [r.error_code for r in refused.responses] == [ErrorCode.invalid_config]
    finally:
        first.close()
    second = _state(tmp_path / "data")
    try:
        assert second.shares.group_configs[GROUP] == {"share.isolation.level": "read_committed",
                                                      "share.auto.offset.reset": "earliest"}
        d = request_module(k.DESCRIBE_CONFIGS, 4)
        described: Any = configs.handle_describe(second, RequestHeader(k.DESCRIBE_CONFIGS, 4, 1, "t", 0),
                                                 d.DescribeConfigsRequest(resources=(d.DescribeConfigsResource(
                                                     resource_type=32, resource_name=GROUP,
                                                     configuration_keys=None),),
                                                     include_synonyms=False, include_documentation=False))
        entries = {c.name: (c.value, c.config_source) for r in described.results for c in r.configs}
        assert entries == {"share.isolation.level": ("read_committed", 8), "share.auto.offset.reset": ("earliest", 8),
                           # the broker's defaults
                           "share.record.lock.duration.ms": ("30000", 5), "share.session.timeout.ms": ("45000", 5),
                           "share.heartbeat.interval.ms": ("5000", 5), "share.delivery.count.limit": ("5", 5)}
    finally:
        second.close()


def test_group_timing_and_delivery_limit_are_bounded_and_used(tmp_path: Path) -> None:
    """KIP-932's share.session.timeout.ms / share.heartbeat.interval.ms and KIP-1240's
    share.delivery.count.limit: within the broker's group.share.min.* / max.* (Kafka's messages),
    the session above the interval, and used: the heartbeat answer's interval, the member's
    session, the records' delivery limit."""
    limits = share_group_configs.GroupConfigLimits.from_properties({
        "group.share.min.session.timeout.ms": "2000", "group.share.min.heartbeat.interval.ms": "500"})
    ok = share_group_configs.apply_operations({}, [("share.session.timeout.ms", 0, "3000"),
                                                   ("share.heartbeat.interval.ms", 0, "700"),
                                                   ("share.delivery.count.limit", 0, "2")], limits)
    assert ok == {"share.session.timeout.ms": "3000", "share.heartbeat.interval.ms": "700",
                  "share.delivery.count.limit": "2"}
    refusals = {
        ("share.session.timeout.ms", "1999"): "must be greater than or equal to group.share.min.session.timeout.ms",
        ("share.session.timeout.ms", "60001"): "must be less than or equal to group.share.max.session.timeout.ms",
        ("share.heartbeat.interval.ms", "15001"): "less than or equal to group.share.max.heartbeat.interval.ms",
        ("share.delivery.count.limit", "1"): "greater than or equal to group.share.min.delivery.count.limit",
        ("share.delivery.count.limit", "11"): "less than or equal to group.share.max.delivery.count.limit",
        ("share.delivery.count.limit", "many"): "Not a number of type INT",
    }
    for (name, value), message in refusals.items():
        with pytest.raises(InvalidConfigError, match=re.escape(message)):
            share_group_configs.apply_operations({}, [(name, 0, value)], limits)
    with pytest.raises(InvalidConfigError, match=re.escape("share.session.timeout.ms must be greater than share.heartbeat")):
        share_group_configs.apply_operations(ok, [("share.heartbeat.interval.ms", 0, "3000")], limits)
    state = _state(tmp_path / "data", **{"group.share.min.session.timeout.ms": "2000",
                                         "group.share.min.heartbeat.interval.ms": "500"})
    try:
        _with_records(state, 1)
        state.shares.group_configs[GROUP].update(ok)
        state.shares.apply_group_configs()
        before_ms = state.shares.mono_ms()
        joined = _heartbeat(state, "a", 0)
        after_ms = state.shares.mono_ms()
        assert joined.heartbeat_interval == datetime.timedelta(milliseconds=700)
        member = present(state.shares.groups.group(GROUP), "group").members["a"]
        assert before_ms + 3000 <= member.deadline_ms <= after_ms + 3000  # the group's session, not 45 s
        topic_id = state.logs.topics()[TOPIC].topic_id
        assert state.shares.share_partition(GROUP, TOPIC, topic_id, 0).config.delivery_count_limit == 2
        assert state.shares.group_settings("another").session_timeout_ms == 45000  # the broker's
    finally:
        state.close()


def test_share_group_describe(state: BrokerState) -> None:
    topic_id = _with_records(state, 1)
    state.groups.complete(state.groups.coordinator.commit_offsets(
        OffsetCommitRequest("classic-one", {TopicPartition(TOPIC, 0): PartitionOffsetCommit(1)}), state.now_ms())[1])
    for member in ("a", "b"):
        assert _heartbeat(state, member, 0).error_code == ErrorCode.none
    m = request_module(k.SHARE_GROUP_DESCRIBE, 1)
    response: Any = share.handle_share_group_describe(state, _header(k.SHARE_GROUP_DESCRIBE), m.ShareGroupDescribeRequest(
        group_ids=(GROUP, "nobody", "classic-one"), include_authorized_operations=False))
    described, nobody, classic = response.groups
    assert (described.error_code, described.group_state, described.assignor_name) == (ErrorCode.none, "Stable", "simple")
    assert described.group_epoch == described.assignment_epoch
    assert sorted(member.member_id for member in described.members) == ["a", "b"]
    for member in described.members:  # one partition: both members share it
        assert [(tp.topic_id, tp.topic_name, tp.partitions) for tp in member.assignment.topic_partitions] == \
            [(topic_id, TOPIC, (0,))]
        assert member.subscribed_topic_names == (TOPIC,)
    assert nobody.error_code == ErrorCode.group_id_not_found
    assert classic.error_code == ErrorCode.group_id_not_found
    assert classic.error_message is not None
    assert "not a share group" in classic.error_message


def _alter_group_config(state: BrokerState, name: str, value: str | None) -> list[ErrorCode]:
    """IncrementalAlterConfigs of GROUP's ``name``: SET ``value``, or DELETE when None."""
    m = request_module(k.INCREMENTAL_ALTER_CONFIGS, 1)
    request = m.IncrementalAlterConfigsRequest(resources=(m.AlterConfigsResource(
        resource_type=32, resource_name=GROUP, configs=(
            m.AlterableConfig(name=name, config_operation=0 if value is not None else 1, value=value),)),),
        validate_only=False)
    response: Any = asyncio.run(configs.handle_incremental_alter(
        state, RequestHeader(k.INCREMENTAL_ALTER_CONFIGS, 1, 1, "t", 0), request))
    return [r.error_code for r in response.responses]


def _described_group_config(state: BrokerState, name: str) -> tuple[str, int, int]:
    """(value, source, type) of GROUP's ``name`` as DescribeConfigs answers."""
    d = request_module(k.DESCRIBE_CONFIGS, 4)
    described: Any = asyncio.run(configs.handle_describe_configs(state, RequestHeader(k.DESCRIBE_CONFIGS, 4, 1, "t", 0),
                                                                 d.DescribeConfigsRequest(resources=(
                                                                     d.DescribeConfigsResource(
                                                                         resource_type=32, resource_name=GROUP,
                                                                         configuration_keys=(name,)),),
                                                                     include_synonyms=False,
                                                                     include_documentation=False)))
    [(value, source, kind)] = [(c.value, c.config_source, c.config_type) for r in described.results for c in r.configs]
    return value, source, kind


def test_a_groups_record_lock_duration_is_bounded_described_and_applied(tmp_path: Path) -> None:
    """share.record.lock.duration.ms of a GROUP resource (Kafka's GroupConfig): within the broker's
    group.share.{min,max}.record.lock.duration.ms, the broker's default until set, and the lock of
    the records the group acquires from then on (loaded share-partitions included)."""
    state = _state(tmp_path / "data", **{"group.share.record.lock.duration.ms": "30000",
                                         "group.share.min.record.lock.duration.ms": "1000"})
    name = "share.record.lock.duration.ms"
    try:
        topic_id = _with_records(state, 6)
        assert _described_group_config(state, name) == ("30000", 5, 3)  # DEFAULT_CONFIG, INT
        assert _alter_group_config(state, name, "999") == [ErrorCode.invalid_config]  # below the broker's min
        assert _alter_group_config(state, name, "60001") == [ErrorCode.invalid_config]  # above the default max
        assert _alter_group_config(state, name, "soon") == [ErrorCode.invalid_config]
        before_ms = state.mono_ms()
        assert _acquired(_fetch(state, "a", 0, topic_id)) == [(0, 5)]  # locked for the broker's duration
        sp = state.shares.partitions[(GROUP, topic_id, 0)]
        assert sp.config.record_lock_duration_ms == 30000
        first_deadline_ms = sp.next_lock_deadline_ms()
        assert first_deadline_ms is not None
        assert before_ms + 30000 <= first_deadline_ms <= state.mono_ms() + 30000
        assert _alter_group_config(state, name, "5000") == [ErrorCode.none]
        assert _described_group_config(state, name) == ("5000", 8, 3)  # GROUP_CONFIG
        assert sp.config.record_lock_duration_ms == 5000
        state.logs.get(TOPIC, 0).append(encode_batch([NewRecord(value=b"late")] * 2, now_ms=state.now_ms()),
                                        state.now_ms())
        before_ms = state.mono_ms()
        assert _acquired(_fetch(state, "a", 1, topic_id)) == [(6, 7)]  # locked for the group's duration
        deadline_ms = sp.next_lock_deadline_ms()
        assert deadline_ms is not None
        assert before_ms + 5000 <= deadline_ms <= state.mono_ms() + 5000
        assert _alter_group_config(state, name, None) == [ErrorCode.none]
        assert _described_group_config(state, name) == ("30000", 5, 3)
        assert sp.config.record_lock_duration_ms == 30000
    finally:
        state.close()
