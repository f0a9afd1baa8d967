"""Acknowledge only what is durable, through a real broker process (issue 10, point 2): while
appends to the internal topics fail, an OffsetCommit is answered COORDINATOR_NOT_AVAILABLE and
OffsetFetch keeps serving the last offset that reached the log, and an InitProducerId (whose
__transaction_state record cannot be written) is answered COORDINATOR_NOT_AVAILABLE with no
producer id; once appends work again the same requests succeed.

The failure is injected with the test-only broker property
``oncestream.test.internal.append.fail.file`` (appends fail while that file exists). Requests and
responses are written by hand from the protocol guide (OffsetCommit v2, OffsetFetch v1,
InitProducerId v1), so the broker's codec is not the judge of itself.
"""

from __future__ import annotations

import pytest

from tests.support.clients import CLIENT_TIMEOUT_S, create_topic, unique_topic
from tests.support.wire import (
    ResponseReader,
    WireConnection,
    int32,
    int64,
    nullable_string,
)

pytestmark = pytest.mark.interop

API_OFFSET_COMMIT, API_OFFSET_FETCH, API_INIT_PRODUCER_ID = 8, 9, 22
ERROR_NONE, ERROR_COORDINATOR_NOT_AVAILABLE = 0, 15


def _commit(conn: WireConnection, group: str, topic: str, offset: int) -> int:
    """OffsetCommit v2 of a "simple" consumer (generation -1, no member); the partition's error."""
    body = (
        nullable_string(group) + int32(-1) + nullable_string("") + int64(-1)
        + int32(1) + nullable_string(topic)
        + int32(1) + int32(0) + int64(offset) + nullable_string("")
    )
    reader = ResponseReader(conn.request(API_OFFSET_COMMIT, 2, 7, body))
    assert reader.take(">i") == 7
    assert reader.take(">i") == 1 and reader.string() == topic
    assert reader.take(">i") == 1 and reader.take(">i") == 0
    error = reader.take(">h")
    assert reader.remaining() == 0
    return error


def _fetch(conn: WireConnection, group: str, topic: str) -> int:
    """OffsetFetch v1 of partition 0; the committed offset (-1 if none)."""
    body = nullable_string(group) + int32(1) + nullable_string(topic) + int32(1) + int32(0)
    reader = ResponseReader(conn.request(API_OFFSET_FETCH, 1, 8, body))
    assert reader.take(">i") == 8
    assert reader.take(">i") == 1 and reader.string() == topic
    assert reader.take(">i") == 1 and reader.take(">i") == 0
    offset = reader.take(">q")
    reader.string()  # metadata
    assert reader.take(">h") == ERROR_NONE
    assert reader.remaining() == 0
    return offset


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
    broker = broker_factory({"oncestream.test.internal.append.fail.file": str(fault_file)})
    with WireConnection(broker.host, broker.port, timeout_s=CLIENT_TIMEOUT_S) as conn:
        fault_file.touch()
        assert _init_producer_id(conn, "durable-txn") == (ERROR_COORDINATOR_NOT_AVAILABLE, -1)
        fault_file.unlink()
        error, producer_id = _init_producer_id(conn, "durable-txn")
        assert error == ERROR_NONE and producer_id >= 0


def test_offset_commit_not_appended_is_not_acknowledged(broker_factory, tmp_path):
    fault_file = tmp_path / "fail-internal-appends"
    broker = broker_factory({"oncestream.test.internal.append.fail.file": str(fault_file)})
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
