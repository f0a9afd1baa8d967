"""Share-group handlers on a real BrokerState (no sockets): bad input gets Kafka's error codes and
changes nothing; share-partition state survives a restart of the state (the __share_group_state
replay); a classic group's id is not a share group; share groups can be switched off."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from oncestream.broker.config import BrokerConfig
from oncestream.broker.handlers import api_versions, share, share_admin
from oncestream.broker.share_service import SHARE_STATE_TOPIC
from oncestream.broker.state import BrokerState
from oncestream.coordinator.group.messages import OffsetCommitRequest, PartitionOffsetCommit
from oncestream.coordinator.share.partition import RecordState
from oncestream.protocol import api_keys as k
from oncestream.protocol.codec import RequestHeader
from oncestream.protocol.records import NewRecord, encode_batch
from oncestream.protocol.schemas import request_module
from oncestream.topic_partition import TopicPartition

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
    return share.handle_share_acknowledge(state, _header(k.SHARE_ACKNOWLEDGE), request)


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
    response: Any = share_admin.handle_describe_offsets(state, RequestHeader(k.DESCRIBE_SHARE_GROUP_OFFSETS, version,
                                                                               1, "t", 0), request)
    return [(g.error_code, p.partition_index, p.start_offset, getattr(p, "lag", -1))
            for g in response.groups for t in g.topics for p in t.partitions]


def _alter_offsets(state: BrokerState, start: int) -> Any:
    m = request_module(k.ALTER_SHARE_GROUP_OFFSETS, 0)
    request = m.AlterShareGroupOffsetsRequest(group_id=GROUP, topics=(m.AlterShareGroupOffsetsRequestTopic(
        topic_name=TOPIC, partitions=(m.AlterShareGroupOffsetsRequestPartition(partition_index=0,
                                                                               start_offset=start),)),))
    return share_admin.handle_alter_offsets(state, RequestHeader(k.ALTER_SHARE_GROUP_OFFSETS, 0, 1, "t", 0), request)


def _delete_offsets(state: BrokerState) -> Any:
    m = request_module(k.DELETE_SHARE_GROUP_OFFSETS, 0)
    request = m.DeleteShareGroupOffsetsRequest(group_id=GROUP, topics=(
        m.DeleteShareGroupOffsetsRequestTopic(topic_name=TOPIC),))
    return share_admin.handle_delete_offsets(state, RequestHeader(k.DELETE_SHARE_GROUP_OFFSETS, 0, 1, "t", 0), request)


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
