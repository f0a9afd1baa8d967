"""ListOffsets (earliest / latest / by timestamp) and DeleteRecords through confluent-kafka."""

from __future__ import annotations

import pytest
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition
from confluent_kafka.admin import OffsetSpec

from tests.support.clients import (
    CLIENT_TIMEOUT_S,
    admin_client,
    confluent_consume,
    confluent_consumer,
    confluent_produce,
    create_topic,
    unique_topic,
)
from tests.support.records import SentRecord

pytestmark = pytest.mark.interop

RECORD_COUNT = 10
BASE_TIMESTAMP_MS = 1_700_000_000_000
STEP_MS = 1_000


def _produce_timestamped(bootstrap: str, topic: str) -> None:
    """Records 0..9 on partition 0 with CreateTime BASE + i * STEP (one per batch: linger 0)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    errors: list[object] = []
    for i in range(RECORD_COUNT):
        producer.produce(
            topic,
            f"v{i}".encode(),
            key=b"k",
            partition=0,
            timestamp=BASE_TIMESTAMP_MS + i * STEP_MS,
            on_delivery=lambda err, msg: errors.append(err) if err else None,
        )
        producer.flush(CLIENT_TIMEOUT_S)  # one batch per record: timestamps index per batch too
    assert not errors, errors


@pytest.fixture(scope="module")
def timestamped_topic(broker) -> str:
    """A one-partition topic holding 10 records with known CreateTime timestamps."""
    topic = unique_topic("ts")
    create_topic(broker.bootstrap, topic, partitions=1)
    _produce_timestamped(broker.bootstrap, topic)
    return topic


def test_watermarks_are_zero_and_record_count(broker, timestamped_topic):
    """ListOffsets earliest/latest: low watermark 0, high watermark = records appended."""
    consumer = confluent_consumer(broker.bootstrap)
    try:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(timestamped_topic, 0), timeout=CLIENT_TIMEOUT_S, cached=False
        )
    finally:
        consumer.close()
    assert (low, high) == (0, RECORD_COUNT)


def test_empty_partition_watermarks_are_zero(broker):
    """A new partition has low = high = 0."""
    topic = unique_topic("empty")
    create_topic(broker.bootstrap, topic, partitions=2)
    consumer = confluent_consumer(broker.bootstrap)
    try:
        for partition in (0, 1):
            assert consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=CLIENT_TIMEOUT_S, cached=False
            ) == (0, 0)
    finally:
        consumer.close()


@pytest.mark.parametrize(
    ("timestamp_ms", "expected_offset"),
    [
        (BASE_TIMESTAMP_MS - 1, 0),  # before everything: the first record
        (BASE_TIMESTAMP_MS, 0),  # exact match
        (BASE_TIMESTAMP_MS + 3 * STEP_MS, 3),
        (BASE_TIMESTAMP_MS + 3 * STEP_MS + 1, 4),  # between records: the next one
        (BASE_TIMESTAMP_MS + (RECORD_COUNT - 1) * STEP_MS, RECORD_COUNT - 1),
    ],
)
def test_offsets_for_times_finds_first_record_at_or_after(
    broker, timestamped_topic, timestamp_ms, expected_offset
):
    """ListOffsets by timestamp returns the earliest offset whose timestamp is >= the target."""
    consumer = confluent_consumer(broker.bootstrap)
    try:
        [result] = consumer.offsets_for_times(
            [TopicPartition(timestamped_topic, 0, timestamp_ms)], timeout=CLIENT_TIMEOUT_S
        )
    finally:
        consumer.close()
    assert result.error is None
    assert result.offset == expected_offset


def test_offsets_for_times_after_last_record_is_end(broker, timestamped_topic):
    """A timestamp after every record finds nothing: offset -1 (librdkafka's OFFSET_END)."""
    consumer = confluent_consumer(broker.bootstrap)
    try:
        [result] = consumer.offsets_for_times(
            [TopicPartition(timestamped_topic, 0, BASE_TIMESTAMP_MS + RECORD_COUNT * STEP_MS)],
            timeout=CLIENT_TIMEOUT_S,
        )
    finally:
        consumer.close()
    assert result.error is None
    assert result.offset == OFFSET_END


def _admin_list_offset(bootstrap: str, tp: TopicPartition, spec: OffsetSpec):
    admin = admin_client(bootstrap)
    futures = admin.list_offsets({tp: spec}, request_timeout=CLIENT_TIMEOUT_S)
    return futures[tp].result(timeout=CLIENT_TIMEOUT_S)


def test_admin_list_offsets_earliest_latest_for_timestamp(broker, timestamped_topic):
    """AdminClient.list_offsets with OffsetSpec earliest, latest and for_timestamp."""
    tp = TopicPartition(timestamped_topic, 0)
    assert _admin_list_offset(broker.bootstrap, tp, OffsetSpec.earliest()).offset == 0
    assert _admin_list_offset(broker.bootstrap, tp, OffsetSpec.latest()).offset == RECORD_COUNT
    by_time = _admin_list_offset(
        broker.bootstrap, tp, OffsetSpec.for_timestamp(BASE_TIMESTAMP_MS + 5 * STEP_MS)
    )
    assert by_time.offset == 5
    assert by_time.timestamp == BASE_TIMESTAMP_MS + 5 * STEP_MS


def test_admin_list_offsets_max_timestamp_kip_734(broker, timestamped_topic):
    """KIP-734 (ListOffsets v7, timestamp -3): the offset and timestamp of the record with the
    largest timestamp."""
    tp = TopicPartition(timestamped_topic, 0)
    result = _admin_list_offset(broker.bootstrap, tp, OffsetSpec.max_timestamp())
    assert result.offset == RECORD_COUNT - 1
    assert result.timestamp == BASE_TIMESTAMP_MS + (RECORD_COUNT - 1) * STEP_MS


def test_delete_records_moves_low_watermark(broker):
    """DeleteRecords up to offset 6: low watermark 6, consumers from the beginning start at 6."""
    topic = unique_topic("delrec")
    create_topic(broker.bootstrap, topic, partitions=2)
    sent = [SentRecord(b"k", f"v{i}".encode()) for i in range(10)]
    confluent_produce(broker.bootstrap, topic, sent)
    # every record has key b"k": they all land in one partition; find which
    consumed_before = confluent_consume(broker.bootstrap, topic, 2)
    [partition] = {r.partition for r in consumed_before}

    admin = admin_client(broker.bootstrap)
    tp = TopicPartition(topic, partition, 6)
    futures = admin.delete_records([tp], request_timeout=CLIENT_TIMEOUT_S)
    deleted = futures[tp].result(timeout=CLIENT_TIMEOUT_S)
    assert deleted.low_watermark == 6

    consumer = confluent_consumer(broker.bootstrap)
    try:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=CLIENT_TIMEOUT_S, cached=False
        )
    finally:
        consumer.close()
    assert (low, high) == (6, 10)

    consumed_after = confluent_consume(broker.bootstrap, topic, 2)
    assert [(r.offset, r.value) for r in consumed_after] == [
        (i, f"v{i}".encode()) for i in range(6, 10)
    ]
    assert consumed_before[0].offset == 0


def test_delete_records_to_high_watermark_empties_partition(broker):
    """DeleteRecords with offset -1 (high watermark) leaves low = high; new writes still append."""
    topic = unique_topic("delall")
    create_topic(broker.bootstrap, topic, partitions=1)
    confluent_produce(broker.bootstrap, topic, [SentRecord(b"k", b"a"), SentRecord(b"k", b"b")])
    admin = admin_client(broker.bootstrap)
    tp = TopicPartition(topic, 0, OFFSET_END)
    deleted = admin.delete_records([tp], request_timeout=CLIENT_TIMEOUT_S)[tp].result(
        timeout=CLIENT_TIMEOUT_S
    )
    assert deleted.low_watermark == 2
    acked = confluent_produce(broker.bootstrap, topic, [SentRecord(b"k", b"c")])
    assert acked == [(0, 2)]
    consumer = confluent_consumer(broker.bootstrap)
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        msg = None
        for _ in range(60):
            msg = consumer.poll(0.5)
            if msg is not None:
                break
        assert msg is not None, msg and msg.error()
        assert msg.error() is None, msg and msg.error()
        assert (msg.offset(), msg.value()) == (2, b"c")
    finally:
        consumer.close()
