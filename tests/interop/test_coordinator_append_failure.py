"""Acknowledge only what is durable, through a real broker process (issue 10, point 2): while
appends to the internal topics fail, an OffsetCommit is answered COORDINATOR_NOT_AVAILABLE and
OffsetFetch keeps serving the last offset that reached the log, a leader's SyncGroup (whose group
record cannot be written) hears COORDINATOR_NOT_AVAILABLE instead of its assignment, and an
InitProducerId (whose
__transaction_state record cannot be written) is answered COORDINATOR_NOT_AVAILABLE with no
producer id; once appends work again the same requests succeed.

The failure is injected through the broker's internal-topic appender seam from the test tree
(``BrokerFaults(internal_append_fail_file=...)``: appends fail while that file exists). Requests and
responses are written by hand from the protocol guide (OffsetCommit v2, OffsetFetch v1,
JoinGroup v4, SyncGroup v3, InitProducerId v1), so the broker's codec is not the judge of itself.
"""

from __future__ import annotations

import pytest

from tests.support.brokers import BrokerFaults
from tests.support.clients import CLIENT_TIMEOUT_S, create_topic, unique_topic
from tests.support.wire import (
    ResponseReader,
    WireConnection,
    int16,
    int32,
    int64,
    nullable_string,
)

pytestmark = pytest.mark.interop

API_OFFSET_COMMIT, API_OFFSET_FETCH, API_JOIN_GROUP, API_SYNC_GROUP, API_INIT_PRODUCER_ID = 8, 9, 11, 14, 22
ERROR_NONE, ERROR_COORDINATOR_NOT_AVAILABLE, ERROR_MEMBER_ID_REQUIRED = 0, 15, 79


def _commit(conn: WireConnection, group: str, topic: str, offset: int) -> int:
    """OffsetCommit v2 of a "simple" consumer (generation -1, no member); the partition's error."""
    body = (
        nullable_string(group) + int32(-1) + nullable_string("") + int64(-1)
        + int32(1) + nullable_string(topic)
        + int32(1) + int32(0) + int64(offset) + nullable_string("")
    )
    reader = ResponseReader(conn.request(API_OFFSET_COMMIT, 2, 7, body))
    assert reader.take(">i") == 7
    assert reader.take(">i") == 1
    assert reader.string() == topic
    assert reader.take(">i") == 1
    assert reader.take(">i") == 0
    error = reader.take(">h")
    assert reader.remaining() == 0
    return error


def _fetch(conn: WireConnection, group: str, topic: str) -> int:
    """OffsetFetch v1 of partition 0; the committed offset (-1 if none)."""
    body = nullable_string(group) + int32(1) + nullable_string(topic) + int32(1) + int32(0)
    reader = ResponseReader(conn.request(API_OFFSET_FETCH, 1, 8, body))
    assert reader.take(">i") == 8
    assert reader.take(">i") == 1
    assert reader.string() == topic
    assert reader.take(">i") == 1
    assert reader.take(">i") == 0
    offset = reader.take(">q")
    reader.string()  # metadata
    assert reader.take(">h") == ERROR_NONE
    assert reader.remaining() == 0
    return offset


def _join_v4(conn: WireConnection, group: str, member_id: str) -> tuple[int, int, str]:
    """JoinGroup v4 with one protocol; (error code, generation, member id)."""
    body = (
        nullable_string(group) + int32(30_000) + int32(30_000) + nullable_string(member_id)
        + nullable_string("durable-test") + int32(1) + nullable_string("only") + int32(0)
    )
    reader = ResponseReader(conn.request(API_JOIN_GROUP, 4, 3, body))
    assert reader.take(">i") == 3
    reader.take(">i")  # throttle time
    error, generation = reader.take(">h"), reader.take(">i")
    reader.string()  # protocol name
    reader.string()  # leader
    member = reader.string()
    for _ in range(reader.take(">i")):
        reader.string()
        reader.nullable_bytes()
    assert reader.remaining() == 0
    assert member is not None
    return error, generation, member


def _sync_v3(conn: WireConnection, group: str, generation: int, member_id: str) -> tuple[int, bytes | None]:
    """SyncGroup v3 from the leader assigning b"mine" to itself; (error code, assignment)."""
    body = (
        nullable_string(group) + int32(generation) + nullable_string(member_id) + int16(-1)
        + int32(1) + nullable_string(member_id) + int32(4) + b"mine"
    )
    reader = ResponseReader(conn.request(API_SYNC_GROUP, 3, 4, body))
    assert reader.take(">i") == 4
    reader.take(">i")  # throttle time
    error = reader.take(">h")
    assignment = reader.nullable_bytes()
    assert reader.remaining() == 0
    return error, assignment


def test_sync_group_whose_group_record_is_not_appended_is_not_acknowledged(broker_factory, tmp_path):
    fault_file = tmp_path / "fail-internal-appends"
    broker = broker_factory({"group.initial.rebalance.delay.ms": "0"}, faults=BrokerFaults(internal_append_fail_file=fault_file))
    group = "durable-sync"
    with WireConnection(broker.host, broker.port, timeout_s=CLIENT_TIMEOUT_S) as conn:
        error, _, member = _join_v4(conn, group, "")
        assert error == ERROR_MEMBER_ID_REQUIRED  # KIP-394: come back with this id
        error, generation, member = _join_v4(conn, group, member)
        assert error == ERROR_NONE
        fault_file.touch()
        assert _sync_v3(conn, group, generation, member) == (ERROR_COORDINATOR_NOT_AVAILABLE, b"")


def _init_producer_id(conn: WireConnection, transactional_id: str) -> tuple[int, int]:
    """InitProducerId v1; (error code, producer id)."""
    body = nullable_string(transactional_id) + int32(60_000)
    reader = ResponseReader(conn.request(API_INIT_PRODUCER_ID, 1, 9, body))
    assert reader.take(">i") == 9
    reader.take(">i")  # throttle time
    error = reader.take(">h")
    producer_id = reader.take(">q")
    reader.take(">h")  # epoch
    assert reader.remaining() == 0
    return error, producer_id


def test_init_producer_id_not_appended_is_not_acknowledged(broker_factory, tmp_path):
    fault_file = tmp_path / "fail-internal-appends"
    broker = broker_factory(faults=BrokerFaults(internal_append_fail_file=fault_file))
    with WireConnection(broker.host, broker.port, timeout_s=CLIENT_TIMEOUT_S) as conn:
        fault_file.touch()
        assert _init_producer_id(conn, "durable-txn") == (ERROR_COORDINATOR_NOT_AVAILABLE, -1)
        fault_file.unlink()
        error, producer_id = _init_producer_id(conn, "durable-txn")
        assert error == ERROR_NONE
        assert producer_id >= 0


def test_offset_commit_not_appended_is_not_acknowledged(broker_factory, tmp_path):
    fault_file = tmp_path / "fail-internal-appends"
    broker = broker_factory(faults=BrokerFaults(internal_append_fail_file=fault_file))
    topic, group = unique_topic("durable"), "durable-group"
    create_topic(broker.bootstrap, topic)
    with WireConnection(broker.host, broker.port, timeout_s=CLIENT_TIMEOUT_S) as conn:
        assert _commit(conn, group, topic, 5) == ERROR_NONE
        fault_file.touch()
        assert _commit(conn, group, topic, 9) == ERROR_COORDINATOR_NOT_AVAILABLE
        fault_file.unlink()
        assert _fetch(conn, group, topic) == 5
        assert _commit(conn, group, topic, 9) == ERROR_NONE
        assert _fetch(conn, group, topic) == 9
