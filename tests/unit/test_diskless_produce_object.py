"""Produce objects: many partitions' batches back to back, coordinates computed while building,
LogAppendTime stamped before upload with the CRC recomputed, the single broker's validation."""

from __future__ import annotations

import re
import uuid

import pytest

from oncestream.cluster.diskless.produce_object import (
    TIMESTAMP_TYPE_CREATE_TIME,
    TIMESTAMP_TYPE_LOG_APPEND_TIME,
    build_produce_object,
    new_object_key,
    validate_append,
)
from oncestream.errors import CorruptRecordError, InvalidRecordError, MessageTooLargeError
from oncestream.log.config import LogConfig
from oncestream.protocol.record_batch import ATTR_TIMESTAMP_TYPE_LOG_APPEND, iter_batches
from tests.unit._batches import ATTR_CONTROL, idempotent_batch, make_batch

TOPIC_A = uuid.uuid4()
TOPIC_B = uuid.uuid4()


def test_batches_of_many_partitions_back_to_back_with_their_coordinates():
    first = make_batch(3, timestamp_ms=5_000)
    second = idempotent_batch(7, 0, 0, count=2)
    third = make_batch(1, value_size=100)
    appends = [
        validate_append(TOPIC_A, 0, first, LogConfig()),
        validate_append(TOPIC_B, 3, second + third, LogConfig()),
    ]
    obj = build_produce_object("k", appends, now_ms=9_000)
    assert obj.data == first + second + third  # verbatim
    placed = [(a.topic_id, a.partition, [(b.byte_offset, b.byte_size) for b in a.batches]) for a in obj.appends]
    assert placed == [
        (TOPIC_A, 0, [(0, len(first))]),
        (TOPIC_B, 3, [(len(first), len(second)), (len(first) + len(second), len(third))]),
    ]
    assert obj.appends[1].batches[0].header.producer_id == 7
    assert obj.appends[0].batches[0].timestamp_type == TIMESTAMP_TYPE_CREATE_TIME
    for a in obj.appends:
        for b in a.batches:  # every range holds one whole valid batch
            [(header, _)] = list(iter_batches(obj.data[b.byte_offset : b.byte_offset + b.byte_size]))
            assert header.record_count == b.header.record_count


def test_log_append_time_is_stamped_before_upload_with_a_valid_crc():
    batch = make_batch(2, timestamp_ms=1_000)
    config = LogConfig(message_timestamp_type="LogAppendTime")
    obj = build_produce_object("k", [validate_append(TOPIC_A, 0, batch, config)], now_ms=77_000)
    [(header, _)] = list(iter_batches(obj.data))  # verifies the recomputed CRC
    assert header.attributes & ATTR_TIMESTAMP_TYPE_LOG_APPEND
    assert header.max_timestamp == 77_000
    [placed] = obj.appends[0].batches
    assert (placed.max_timestamp_ms, placed.timestamp_type) == (77_000, TIMESTAMP_TYPE_LOG_APPEND_TIME)
    assert obj.data[61:] == batch[61:]  # the records themselves untouched


def test_validation_is_the_single_brokers():
    batch = bytearray(make_batch(2))
    batch[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        validate_append(TOPIC_A, 0, bytes(batch), LogConfig())
    with pytest.raises(MessageTooLargeError):
        validate_append(TOPIC_A, 0, make_batch(1, value_size=2_000), LogConfig(max_message_bytes=1_000))
    with pytest.raises(InvalidRecordError):
        validate_append(TOPIC_A, 0, make_batch(1, attributes=ATTR_CONTROL), LogConfig())
    with pytest.raises(InvalidRecordError):
        validate_append(TOPIC_A, 0, b"", LogConfig())


def test_object_keys_are_unique_per_attempt_and_dated():
    keys = {new_object_key("pre/fix/", 0) for _ in range(100)}
    assert len(keys) == 100
    assert all(re.fullmatch(r"pre/fix/diskless/1970-01-01/[0-9a-f]{32}\.batches", key) for key in keys)
    assert new_object_key("", 0).startswith("diskless/1970-01-01/")


def test_the_append_notification_names_the_partitions_or_says_anything_changed():
    from oncestream.cluster.diskless.partition_rows import notify_payload

    assert notify_payload([(TOPIC_A, 0), (TOPIC_B, 12)]) == f"{TOPIC_A}:0,{TOPIC_B}:12"
    many = [(uuid.uuid4(), p) for p in range(300)]  # ~12 KB: above PostgreSQL's 8000-byte limit
    assert notify_payload(many) == ""
