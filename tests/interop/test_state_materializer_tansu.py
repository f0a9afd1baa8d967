"""The materializer's column-wise changelog reading (``client.consumer.batch_reader.ColumnConsumer``)
against Tansu, the second Kafka-protocol broker: a compacted-style changelog with overwrites and
tombstones over three partitions, compressed or not, ends up in the store as the last write per
key. (Transactions are not tested against Tansu: it returns aborted records to read_committed
readers; ``tests/chaos/test_state_materializer_sigkill.py`` tests them against our broker.)
"""

from __future__ import annotations

import time

import pytest

from oncestream.client import Admin, NewTopic, Producer
from oncestream.state.materializer import Materializer
from oncestream.state.source import KafkaChangelogSource
from tests.support.brokers import TansuProcess
from tests.support.clients import CLIENT_TIMEOUT_S, unique_topic
from tests.support.narrow import present

pytestmark = pytest.mark.interop

PARTITIONS = 3


@pytest.fixture(scope="module")
def tansu(tmp_path_factory):
    process = TansuProcess(log_dir=tmp_path_factory.mktemp("tansu") / "logs")
    process.start()
    try:
        yield process
    finally:
        process.kill()


def _changelog(bootstrap: str, topic: str, compression: str) -> dict[bytes, bytes]:
    """Writes 900 records (keys written many times, every 7th a tombstone); returns the last
    value per key (deleted keys left out)."""
    admin = Admin({"bootstrap.servers": bootstrap})
    try:
        assert admin.create_topics([NewTopic(topic, PARTITIONS, 1)]) == {topic: None}
    finally:
        admin.close()
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": compression})
    expected: dict[bytes, bytes] = {}
    try:
        for i in range(900):
            key = b"key-%d" % (i % 41)
            value = None if i % 7 == 0 else b"value-%05d" % i
            producer.produce(topic, value, key=key, partition=(i % 41) % PARTITIONS)
            if value is None:
                expected.pop(key, None)
            else:
                expected[key] = value
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
    finally:
        producer.close()
    return expected


@pytest.mark.parametrize("compression", ["none", "lz4"])
def test_materializer_reads_a_tansu_changelog_column_wise(tansu, tmp_path, compression):
    topic = unique_topic(f"tansu-changelog-{compression}")
    expected = _changelog(tansu.bootstrap, topic, compression)
    # Each partition's end: how many records were written to it (one producer, no transactions).
    ends = {(topic, p): sum(1 for i in range(900) if (i % 41) % PARTITIONS == p) for p in range(PARTITIONS)}
    m = Materializer(tmp_path / "store", topic, KafkaChangelogSource(tansu.bootstrap), commit_interval_ms=200)
    m.start()
    try:
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while any(m.positions().get(tp, 0) < end for tp, end in ends.items()):
            assert time.monotonic() < deadline, (m.positions(), ends)
            m.step(0.2)
        m.commit()
        assert m.committed_offsets() == ends
        assert m.applied_records == 900
        reader = present(m.store, "materializer store").reader()
        assert dict(reader.range()) == expected
        reader.close()
    finally:
        m.close()
