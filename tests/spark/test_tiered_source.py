"""The Spark source replays a topic whose start lives only in the object store (issue 21).

Our broker tiers to SeaweedFS; the topic is produced (committed and aborted transactions, then
plain records) far past local.retention.bytes, so its first offsets are no longer on the broker's
disk. A batch read from the earliest offsets, read_committed as the source reads by default,
returns exactly the committed records, from offset 0 on."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.support.clients import create_topic, unique_topic
from tests.support.seaweedfs import SeaweedServer
from tests.support.tiered import TieredBroker, wait_until
from tests.support.txn import list_offset, list_offsets

pytestmark = pytest.mark.spark

SEGMENT_BYTES = 4096


@pytest.fixture(scope="module")
def tiered_broker(tmp_path_factory: pytest.TempPathFactory,
                  seaweedfs_factory: Callable[..., SeaweedServer]) -> Iterator[TieredBroker]:
    broker = TieredBroker(tmp_path_factory.mktemp("spark-tiered") / "data", seaweedfs_factory())
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def _produce(bootstrap: str, topic: str) -> list[bytes]:
    """Transactions (every third aborted, flushed first) then plain records; the committed values."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"gen-{topic}", "batch.size": 1000})
    producer.init_transactions(30)
    committed: list[bytes] = []
    for t in range(9):
        values = [f"t{t}-{i:03d}".encode().ljust(150, b".") for i in range(15)]
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value=value, partition=0)
        assert producer.flush(30) == 0  # the aborted records must reach the log, not be purged
        if t % 3 == 0:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            committed += values
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    tail = [f"plain-{i:04d}".encode().ljust(150, b".") for i in range(300)]
    for value in tail:
        plain.produce(topic, value=value, partition=0)
    assert plain.flush(30) == 0
    return committed + tail


def _local_start(bootstrap: str, topic: str) -> int:
    [(_error, offset)] = list_offsets(bootstrap, topic, 0, [-4])  # EARLIEST_LOCAL (KIP-1005)
    return offset


def test_batch_read_from_earliest_replays_the_tiered_start(spark, tiered_broker: TieredBroker, tmp_path: Path):
    bootstrap = tiered_broker.bootstrap
    topic = unique_topic("spark-tiered")
    create_topic(bootstrap, topic, 1, {"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES),
                                       "local.retention.bytes": str(2 * SEGMENT_BYTES)})
    expected = _produce(bootstrap, topic)
    transactional_end = 9 * 16  # 15 records and a marker per transaction
    wait_until(lambda: _local_start(bootstrap, topic) >= transactional_end, "the transactions to leave the local disk")
    rows = (spark.read.format("oncestream").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest").load()
            .select("offset", "value").collect())
    ordered = sorted(rows, key=lambda r: r.offset)
    assert ordered[0].offset == 16  # t0 (offsets 0-14, marker 15) was aborted: t1 starts at 16
    assert [bytes(r.value) for r in ordered] == expected
    assert ordered[-1].offset == list_offset(bootstrap, topic, 0, read_committed=True) - 1
