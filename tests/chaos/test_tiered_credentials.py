"""Tiered storage with wrong credentials, against a real S3 server (SeaweedFS) and our broker as a
process (issue 21, "wrong credentials: a clear error in the log and in DescribeConfigs-visible
state, the broker stays up").

The broker starts with a wrong AWS_SECRET_ACCESS_KEY: SeaweedFS refuses every signed request. The
broker stays up, librdkafka produces and consumes as usual from the local segments, no local
segment goes (nothing was copied), the broker's DescribeConfigs entry
``oncestream.remote.log.storage.status`` and its log name the refused credentials. Restarted with
the right key, tiering catches up (objects in the bucket, the local log back under
``local.retention.bytes``, status ``ok``) and a consumer from offset 0 reads every offset once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import ConfigResource, ResourceType

from tests.support.clients import (
    CLIENT_TIMEOUT_S,
    admin_client,
    confluent_consume,
    confluent_produce,
    create_topic,
    unique_topic,
)
from tests.support.records import SentRecord
from tests.support.seaweedfs import SeaweedServer
from tests.support.tiered import TieredBroker, local_log_bytes, remote_log_bytes, segment_objects, wait_until

pytestmark = pytest.mark.chaos

SEGMENT_BYTES = 4096
LOCAL_RETENTION_BYTES = 8192
WAIT_S = 60.0  # a bound on a hang only
STATUS = "oncestream.remote.log.storage.status"
RECORDS = 600
VALUE_BYTES = 100
SMALL_BATCHES: dict[str, object] = {"linger.ms": 1, "batch.num.messages": 10}  # a batch never spans segments: many of them


@pytest.fixture
def broker(tmp_path: Path, seaweedfs: SeaweedServer) -> Iterator[TieredBroker]:
    running = TieredBroker(tmp_path / "data", seaweedfs)
    running.aws_overrides = {"AWS_SECRET_ACCESS_KEY": "not-the-secret-key"}
    running.start()
    try:
        yield running
    finally:
        running.kill()


def _status(bootstrap: str) -> str:
    resource = ConfigResource(ResourceType.BROKER, "0")
    admin = admin_client(bootstrap)  # held: a collected client cancels its futures
    described = admin.describe_configs([resource], request_timeout=CLIENT_TIMEOUT_S)[resource].result(
        timeout=CLIENT_TIMEOUT_S)
    return str(described[STATUS].value)


def _records(start: int, count: int) -> list[SentRecord]:
    return [SentRecord(b"k", f"{start + i:08d}".encode().ljust(VALUE_BYTES, b"x")) for i in range(count)]


def _produce(broker: TieredBroker, records: list[SentRecord], topic: str) -> list[tuple[int, int]]:
    return confluent_produce(broker.bootstrap, topic, records, extra_conf=SMALL_BATCHES)


def _local_segment_bases(data_dir: Path, topic: str) -> list[int]:
    return sorted(int(path.stem) for path in (data_dir / "logs" / f"{topic}-0").glob("*.log"))


def _wait(condition: Callable[[], bool], what: str) -> None:
    wait_until(condition, what, timeout_s=WAIT_S, poll_s=0.2)


def test_wrong_secret_key_keeps_the_broker_serving_and_says_so_then_the_right_key_catches_up(
        broker: TieredBroker) -> None:
    topic = unique_topic("tiered-creds")
    create_topic(broker.bootstrap, topic, 1, {"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES),
                                               "local.retention.bytes": str(LOCAL_RETENTION_BYTES)})
    offsets = [offset for _p, offset in _produce(broker, _records(0, RECORDS // 2), topic)]
    # The copies are refused: the status names the store and the refused credentials.
    _wait(lambda: "refused the credentials" in _status(broker.bootstrap), "the status naming the credentials")
    status = _status(broker.bootstrap)
    assert broker.server.bucket in status, status
    assert "refused the credentials" in broker.output_tail()
    # Produce and consume go on, from the local segments only; none of them was deleted.
    offsets += [offset for _p, offset in _produce(broker, _records(RECORDS // 2, RECORDS // 2), topic)]
    assert offsets == list(range(RECORDS))
    consumed = confluent_consume(broker.bootstrap, topic, 1)
    assert [r.offset for r in consumed] == list(range(RECORDS))
    bases = _local_segment_bases(broker.data_dir, topic)
    assert bases[0] == 0, bases
    assert len(bases) >= RECORDS * VALUE_BYTES // SEGMENT_BYTES, bases
    assert local_log_bytes(broker.data_dir, topic) >= RECORDS * VALUE_BYTES
    store = broker.store()
    assert segment_objects(store) == []
    assert broker.is_alive()

    broker.aws_overrides = {}
    broker.restart()
    _wait(lambda: local_log_bytes(broker.data_dir, topic) <= LOCAL_RETENTION_BYTES + 3 * SEGMENT_BYTES,
          "tiering caught up with the right key")
    assert remote_log_bytes(store) >= RECORDS * VALUE_BYTES - LOCAL_RETENTION_BYTES - 3 * SEGMENT_BYTES
    assert _local_segment_bases(broker.data_dir, topic)[0] > 0
    _wait(lambda: _status(broker.bootstrap) == "ok", "status ok")
    consumed = confluent_consume(broker.bootstrap, topic, 1)
    assert [r.offset for r in consumed] == list(range(RECORDS))
    assert [r.value[:8] for r in consumed] == [f"{i:08d}".encode() for i in range(RECORDS)]
