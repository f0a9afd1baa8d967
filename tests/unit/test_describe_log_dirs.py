"""DescribeLogDirs (key 35): which partitions a request describes (Kafka's ReplicaManager
.describeLogDirs), and our remote-store log directory, encoded by the broker's handler at every
version it serves and parsed by kafka-python's own DescribeLogDirsResponse (a real client's
parser, not ours: the extension must not break clients that know nothing of it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.protocol.admin.cluster import DescribeLogDirsResponse as KafkaPythonResponse

from oncestream.broker.config import BrokerConfig
from oncestream.broker.handlers import log_dirs as handler
from oncestream.broker.log_dirs import (
    RemoteLogDir,
    describe_log_dirs,
    remote_log_dir,
    remote_status,
    volume_bytes,
    wanted_partitions,
)
from oncestream.broker.state import BrokerState
from oncestream.protocol import api_keys as k
from oncestream.protocol.codec import RequestHeader, encode_response
from oncestream.protocol.schemas import request_module
from oncestream.remote.local_store import LocalObjectStore
from tests.support.wire import record_batch


def test_wanted_partitions_all_or_the_requested_ones_that_exist() -> None:
    existing = [("b", 0), ("a", 1), ("a", 0)]
    assert wanted_partitions(None, existing) == [("a", 0), ("a", 1), ("b", 0)]
    assert wanted_partitions([("a", [1, 5, 1]), ("zzz", [0])], existing) == [("a", 1)]
    assert wanted_partitions([], existing) == []


def test_remote_entry_lists_only_the_tiered_partitions() -> None:
    remote = RemoteLogDir("s3://bucket/prefix", {("a", 0): 4096, ("gone", 0): 1})
    local, far = describe_log_dirs([("a", 0), ("a", 1)], "/data/logs", {("a", 0): 10, ("a", 1): 20}, (100, 50), remote)
    assert (local.path, local.total_bytes, local.usable_bytes) == ("/data/logs", 100, 50)
    assert [(p.topic, p.partition, p.size_bytes) for p in local.partitions] == [("a", 0, 10), ("a", 1, 20)]
    assert (far.path, far.total_bytes, far.usable_bytes) == ("remote:s3://bucket/prefix", -1, -1)
    assert [(p.topic, p.partition, p.size_bytes) for p in far.partitions] == [("a", 0, 4096)]
    assert len(describe_log_dirs([], "/d", {}, (1, 1), None)) == 1  # no tiered storage: no remote entry


def test_volume_bytes_of_a_real_directory(tmp_path: Path) -> None:
    total, usable = volume_bytes(str(tmp_path))
    assert 0 < usable <= total


class _Tiering:
    """The RemoteLogManager as DescribeLogDirs reads it: partition t-0 has 123456 bytes copied."""

    status = "ok"

    def __init__(self, root: Path) -> None:
        self.store = LocalObjectStore(root)

    def remote_info(self, topic: str, partition: int) -> tuple[int, int, int]:
        return (123456, 0, 99) if (topic, partition) == ("t", 0) else (0, -1, -1)

    def close(self) -> None:  # BrokerState.close stops the RemoteLogManager
        pass


def test_remote_entry_of_the_manager(tmp_path: Path) -> None:
    """A tiered topic's partitions are listed even with nothing copied (0 bytes); another
    topic's only with remote data; no manager, no entry."""
    tiering = _Tiering(tmp_path)
    far = remote_log_dir(tiering, [("t", 0), ("t", 1), ("u", 0)], ["t"])
    assert far is not None
    assert far.description == tiering.store.description
    assert dict(far.sizes) == {("t", 0): 123456, ("t", 1): 0}
    assert dict(remote_log_dir(tiering, [("t", 0), ("u", 0)], []).sizes) == {("t", 0): 123456}  # type: ignore[union-attr]
    assert remote_log_dir(None, [("t", 0)], ["t"]) is None
    assert (remote_status(None), remote_status(tiering)) == ("disabled", "ok")


@pytest.fixture
def state(tmp_path: Path) -> Iterator[BrokerState]:
    broker = BrokerState(tmp_path / "data", BrokerConfig())
    try:
        broker.logs.create_topic("t", 2, {})
        now_ms = broker.now_ms()
        broker.logs.get("t", 0).append(record_batch([b"x" * 200], timestamp_ms=now_ms), now_ms)
        broker.remote = _Tiering(tmp_path / "store")  # type: ignore[assignment]  # the RemoteTiering side only
        yield broker
    finally:
        broker.close()


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_kafka_python_parses_the_answer_with_the_remote_entry(state: BrokerState, version: int) -> None:
    m = request_module(k.DESCRIBE_LOG_DIRS, version)
    request = m.DescribeLogDirsRequest(topics=(m.DescribableLogDirTopic(topic="t", partitions=(0, 1)),))
    response = handler.handle(state, RequestHeader(k.DESCRIBE_LOG_DIRS, version, 7, None, 0), request)
    frame = encode_response(k.DESCRIBE_LOG_DIRS, version, 7, response)
    parsed = KafkaPythonResponse.decode(frame, version=version, header=True, framed=True)
    assert parsed._header.correlation_id == 7
    by_dir = {r.log_dir: r for r in parsed.results}
    local_path = str((state.data_dir / "logs").resolve())
    remote_path = "remote:" + state.remote.store.description  # type: ignore[union-attr]
    assert set(by_dir) == {local_path, remote_path}
    local = {p.partition_index: p.partition_size for t in by_dir[local_path].topics for p in t.partitions}
    assert local == {0: state.logs.get("t", 0).size_bytes, 1: 0}
    assert local[0] > 200
    remote = by_dir[remote_path]
    assert [(t.name, [(p.partition_index, p.partition_size) for p in t.partitions]) for t in remote.topics] == \
        [("t", [(0, 123456)])]
    if version >= 4:
        assert by_dir[local_path].total_bytes > 0
        assert remote.total_bytes == -1
