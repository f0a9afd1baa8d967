"""Reading a topic whose start lives only in the object store (issue 21), real clients against our
broker as a process, tiering to SeaweedFS.

One broker for the module, its topic produced far past ``local.retention.bytes`` with small
segments: committed and aborted librdkafka transactions (one aborted transaction spanning several
segments, so its ABORT marker lies segments after its first record), then plain records. Once the
transactional part is only in the bucket:

- librdkafka read_committed from offset 0: exactly the committed records, in order, none aborted;
  read_uncommitted: every record;
- kafka-python read_committed: the same committed records (a second client's decoding of the
  aborted-transaction lists the broker builds from the remote transaction indexes);
- ListOffsets -2 (global start, 0), -4 (the local start, above the transactions), -5 (the last
  tiered offset), by our client's connection at v10;
- a remote object deleted or corrupted under the running broker: that partition answers
  UNKNOWN_SERVER_ERROR, the broker stays up and the other partitions are served.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from kio.schema.errors import ErrorCode

from oncestream.client.common.connection import parse_bootstrap
from tests.support.clients import CLIENT_TIMEOUT_S, create_topic, unique_topic
from tests.support.seaweedfs import SeaweedServer
from tests.support.tiered import TieredBroker, segment_objects, wait_until
from tests.support.txn import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    list_offset,
    list_offsets,
    plain_produce,
    read_to_end,
    run_transaction,
    transactional_producer,
    values_of,
)
from tests.support.wire import WireConnection, fetch_request_body, parse_fetch_response

pytestmark = pytest.mark.interop

SEGMENT_BYTES = 4096
VALUE_BYTES = 200
EARLIEST_LOCAL, LATEST_TIERED, EARLIEST = -4, -5, -2


def _value(tag: str, n: int) -> bytes:
    return f"{tag}-{n:05d}-".encode().ljust(VALUE_BYTES, b"v")


class Produced:
    """What the module's topic holds, in log order."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.committed: list[bytes] = []
        self.everything: list[bytes] = []


@pytest.fixture(scope="module")
def s3(seaweedfs_factory: Callable[..., SeaweedServer]) -> SeaweedServer:
    return seaweedfs_factory()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, s3: SeaweedServer) -> Iterator[TieredBroker]:
    running = TieredBroker(tmp_path_factory.mktemp("tiered-read") / "data", s3)
    running.start()
    try:
        yield running
    finally:
        running.kill()


def _local_start(bootstrap: str, topic: str, partition: int = 0) -> int:
    [(error, offset)] = list_offsets(bootstrap, topic, partition, [EARLIEST_LOCAL])
    assert error == ErrorCode.none
    return offset


@pytest.fixture(scope="module")
def produced(broker: TieredBroker) -> Produced:
    topic = unique_topic("tiered-read")
    create_topic(broker.bootstrap, topic, 2, {
        "remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES),
        "local.retention.bytes": str(2 * SEGMENT_BYTES),
    })
    out = Produced(topic)
    producer = transactional_producer(broker.bootstrap, unique_topic("tx"), **{"batch.size": 1000})
    producer.init_transactions(CLIENT_TIMEOUT_S)
    n = 0
    for round_ in range(8):
        # One in three aborted; round 3's transaction is long: it spans several segments.
        size = 60 if round_ == 3 else 12
        values = [_value(f"r{round_}", n + i) for i in range(size)]
        n += size
        commit = round_ % 3 != 0 and round_ != 3
        run_transaction(producer, topic, {0: values}, commit=commit)
        out.everything += values
        if commit:
            out.committed += values
    # Plain records after the transactions: the tiered segments lie wholly below the LSO.
    tail = [_value("plain", n + i) for i in range(400)]
    plain_produce(broker.bootstrap, topic, {0: tail, 1: [_value("p1", i) for i in range(5)]})
    out.everything += tail
    out.committed += tail
    txn_end = len(out.everything) - len(tail) + 8  # the records + one marker per transaction
    wait_until(lambda: _local_start(broker.bootstrap, topic) >= txn_end,
               "the transactional part to leave the local disk")
    assert segment_objects(broker.store())
    return out


def test_librdkafka_read_committed_from_zero_sees_exactly_the_committed_records(
        broker: TieredBroker, produced: Produced) -> None:
    got = values_of(read_to_end(broker.bootstrap, produced.topic, 1, isolation=READ_COMMITTED))[0]
    assert got == produced.committed


def test_librdkafka_read_uncommitted_from_zero_sees_everything(broker: TieredBroker, produced: Produced) -> None:
    got = values_of(read_to_end(broker.bootstrap, produced.topic, 1, isolation=READ_UNCOMMITTED))[0]
    assert got == produced.everything


def test_kafka_python_read_committed_from_zero(broker: TieredBroker, produced: Produced) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition

    end = list_offset(broker.bootstrap, produced.topic, 0, read_committed=True)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", isolation_level="read_committed")
    values: list[bytes] = []
    try:
        tp = KpTopicPartition(produced.topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        next_offset = 0
        while next_offset < end - 1:
            assert time.monotonic() < deadline, f"kafka-python stuck at {next_offset} of {end}"
            for messages in consumer.poll(timeout_ms=500).values():
                for m in messages:
                    values.append(m.value)
                    next_offset = m.offset + 1
    finally:
        consumer.close()
    assert values == produced.committed


def test_list_offsets_earliest_local_and_latest_tiered(broker: TieredBroker, produced: Produced) -> None:
    [(e1, earliest), (e2, local_start), (e3, tiered)] = list_offsets(
        broker.bootstrap, produced.topic, 0, [EARLIEST, EARLIEST_LOCAL, LATEST_TIERED])
    assert (e1, e2, e3) == (ErrorCode.none,) * 3
    assert earliest == 0
    assert local_start > 0
    assert local_start - 1 <= tiered < list_offset(broker.bootstrap, produced.topic, 0, read_committed=False)
    # The untiered partition: nothing in the bucket.
    assert list_offsets(broker.bootstrap, produced.topic, 1, [LATEST_TIERED]) == [(ErrorCode.none, -1)]


def _fetch_errors(broker: TieredBroker, topic: str) -> dict[int, int]:
    """Fetch v11 at offset 0 of each partition, raw: partition -> error code."""
    host, port = parse_bootstrap(broker.bootstrap)
    errors = {}
    with WireConnection(host, port) as conn:
        for partition in (0, 1):
            body = fetch_request_body(11, topic, partition, 0, max_wait_ms=0, min_bytes=1)
            [part] = parse_fetch_response(conn.request(1, 11, 5, body), 11).partitions
            errors[partition] = part.error_code
    return errors


@pytest.mark.parametrize("damage", ["delete", "flip a byte"])
def test_a_missing_or_corrupt_remote_object_fails_that_partition_only(
        broker: TieredBroker, produced: Produced, damage: str) -> None:
    store = broker.store()
    topic_objects = sorted(k for k in segment_objects(store) if k.startswith(f"{produced.topic}-"))
    assert topic_objects
    first = topic_objects[0]  # the segment at offset 0
    saved = store.get(first)
    if damage == "delete":
        store.delete(first)
    else:
        flipped = bytearray(saved)
        flipped[200] ^= 0xFF  # inside the first batch's records: its CRC no longer matches
        store.put(first, bytes(flipped))
    try:
        assert _fetch_errors(broker, produced.topic) == {0: ErrorCode.unknown_server_error, 1: ErrorCode.none}
    finally:
        store.put(first, saved)
    # The broker stayed up and reads the segment again now that it is back.
    got = values_of(read_to_end(broker.bootstrap, produced.topic, 1, isolation=READ_COMMITTED))[0]
    assert got == produced.committed
