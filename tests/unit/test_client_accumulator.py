"""The producer's record accumulator: batching limits, the encoded batch, sticky partitioning
for null keys (KIP-480), readiness (linger, full, flush), the user/sender hand-off, and
buffer.memory back-pressure."""

from __future__ import annotations

import threading
import time

import pytest

from oncestream.client.producer.accumulator import BufferExhaustedError, RecordAccumulator, increment_sequence
from oncestream.client.producer.record_batch_builder import encode_headers
from oncestream.protocol import records as rec

TS = 1_700_000_000_000


def _acc(**overrides: int) -> RecordAccumulator:
    conf = {"batch_size": 10_000, "batch_num_messages": 1000, "linger_ms": 50, "buffer_memory": 10_000_000}
    conf.update(overrides)
    return RecordAccumulator(**conf)


def _append(acc: RecordAccumulator, partition: int = 0, value: bytes | None = b"v", *, key: bytes | None = None,
            ts: int = TS, headers: bytes | None = None, topic: str = "t", max_block_s: float = 5.0):
    return acc.append(topic, partition, 3, ts, key, value, headers, None, max_block_s)


def _take_all(acc: RecordAccumulator, now_ms: int) -> list:
    acc.begin_flush()
    try:
        batches, _, _ = acc.drain(now_ms, lambda t, p: 0, lambda b, n: True, 10**9)
    finally:
        acc.end_flush()
    return batches.get(0, [])


def test_sealed_batch_decodes_to_the_appended_records() -> None:
    """Records are encoded at append time; the sealed batch is a valid v2 batch (CRC, offset
    deltas, timestamp deltas, keys, headers) that our protocol decoder reads back."""
    acc = _acc()
    _append(acc, value=b"first", key=b"k1", ts=TS)
    _append(acc, value=None, key=None, ts=TS + 7)
    _append(acc, value=b"x" * 300, key=b"k3", ts=TS - 2, headers=encode_headers([("a", b"1"), ("b", None)]))
    (batch,) = _take_all(acc, now_ms=10**12)
    batch.seal(0)
    batch.producer_id, batch.producer_epoch, batch.base_sequence = 42, 3, 100
    header, payload = batch.wire_parts()
    decoded = rec.decode_batch(header + payload)
    assert decoded.header.producer_id == 42
    assert decoded.header.base_sequence == 100
    assert decoded.header.record_count == 3
    assert decoded.header.max_timestamp == TS + 7
    got = [(r.offset, r.timestamp_ms, r.key, r.value, r.headers) for r in decoded.records]
    assert got == [
        (0, TS, b"k1", b"first", ()),
        (1, TS + 7, None, None, ()),
        (2, TS - 2, b"k3", b"x" * 300, (("a", b"1"), ("b", None))),
    ]


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compressed_batches_decode(codec: int) -> None:
    acc = _acc()
    for i in range(100):
        _append(acc, value=b"value-%d" % i)
    (batch,) = _take_all(acc, now_ms=10**12)
    batch.seal(codec)
    header, payload = batch.wire_parts()
    decoded = rec.decode_batch(header + payload)
    assert decoded.header.compression == codec
    assert [r.value for r in decoded.records] == [b"value-%d" % i for i in range(100)]


def test_restamping_changes_only_the_header() -> None:
    """KIP-360 re-sequencing: a new identity gives a new header (and CRC) over the same records."""
    acc = _acc()
    _append(acc)
    (batch,) = _take_all(acc, now_ms=10**12)
    batch.seal(0)
    batch.producer_id, batch.producer_epoch, batch.base_sequence = 1, 0, 5
    first = batch.wire_parts()
    batch.producer_id, batch.base_sequence = 2, 0
    second = batch.wire_parts()
    assert first[1] is second[1]
    assert first[0] != second[0]
    assert rec.decode_batch(second[0] + second[1]).header.producer_id == 2


def test_batch_size_and_record_count_limits_start_new_batches() -> None:
    acc = _acc(batch_size=1000, batch_num_messages=5)
    for _ in range(12):
        _append(acc, value=b"x" * 10)
    assert [b.record_count for b in acc.queues[("t", 0)]] == [5, 5, 2]
    acc2 = _acc(batch_size=1000)
    for _ in range(10):
        _append(acc2, value=b"x" * 300)
    sizes = [b.size_bytes for b in acc2.queues[("t", 0)]]
    assert all(size <= 1000 for size in sizes)
    assert sum(b.record_count for b in acc2.queues[("t", 0)]) == 10


@pytest.mark.parametrize(("batch_size", "value_bytes"), [
    (1000, 1), (1000, 17), (1000, 100), (1000, 333),
    (1 << 20, 1), (1 << 20, 17), (1 << 20, 100), (1 << 20, 333), (1 << 20, 1024),
])
def test_a_full_batch_with_its_header_fits_batch_size(value_bytes: int, batch_size: int) -> None:
    """batch.size bounds the encoded batch, 61-byte header included (as in Kafka's client): 1 MiB
    batches must fit a broker whose max.message.bytes is 1048588, Kafka's default. Tiny records
    also run past 16384 records per batch, beyond the encoder's varint table."""
    acc = _acc(batch_size=batch_size, batch_num_messages=1 << 20, buffer_memory=64 << 20)
    count = 3 * batch_size // (value_bytes + 12)  # about three batches' worth
    for i in range(count):
        _append(acc, key=str(i).encode(), value=b"v" * value_bytes)
    batches = []
    while taken := _take_all(acc, now_ms=10**12):  # one batch per partition and drain
        batches += taken
    assert len(batches) >= 3
    assert sum(b.record_count for b in batches) == count
    sizes = []
    for batch in batches:
        batch.seal(0)
        batch.producer_id, batch.producer_epoch, batch.base_sequence = 1, 0, 0
        header, payload = batch.wire_parts()
        sizes.append(len(header) + len(payload))
    assert max(sizes) <= batch_size
    # ...and filled: within two records of it, or 90% for tiny records (their size is estimated)
    assert max(sizes) > min(0.9 * batch_size, batch_size - 2 * (value_bytes + 64))


def test_readiness_linger_full_and_flush() -> None:
    acc = _acc(linger_ms=100)
    _append(acc)
    created = acc.queues[("t", 0)][0].created_ms
    batches, next_ready, _ = acc.drain(created + 10, lambda t, p: 0, lambda b, n: True, 10**9)
    assert not batches
    assert next_ready == created + 100
    batches, _, _ = acc.drain(created + 100, lambda t, p: 0, lambda b, n: True, 10**9)
    assert len(batches[0]) == 1
    # A full batch is ready at once.
    small = _acc(batch_num_messages=2, linger_ms=10**6)
    _append(small)
    _append(small)
    _append(small)
    batches, _, _ = small.drain(0, lambda t, p: 0, lambda b, n: True, 10**9)
    assert [b.record_count for b in batches[0]] == [2]
    # flush makes the rest ready regardless of linger.
    assert [b.record_count for b in _take_all(small, 0)] == [1]


def test_drain_takes_one_batch_per_partition_and_reports_unknown_leaders() -> None:
    acc = _acc(batch_num_messages=1)
    for p in (0, 0, 1):
        _append(acc, partition=p)
    _append(acc, topic="other")
    leaders = {"t": 0, "other": -1}
    batches, _, unknown = acc.drain(10**12, lambda t, p: leaders[t], lambda b, n: True, 10**9)
    assert sorted(b.partition for b in batches[0]) == [0, 1]
    assert unknown == {"other"}


def test_sender_does_not_take_a_batch_a_user_thread_is_writing() -> None:
    """The hand-off: a batch marked as being appended to stays until the writer is done; the
    sender's closing it makes the next append open a new batch."""
    acc = _acc()
    _append(acc)
    batch = acc.queues[("t", 0)][0]
    acc.appending = batch  # as if a user thread were inside append() for this batch
    assert _take_all(acc, 10**12) == []
    assert batch.closed  # the sender claimed it: no further appends go into it
    acc.appending = None
    _append(acc)  # goes to a new batch
    assert len(acc.queues[("t", 0)]) == 2
    taken = _take_all(acc, 10**12)
    assert taken == [batch]


def test_null_keys_stick_to_one_partition_until_its_batch_is_taken() -> None:
    """KIP-480: the sticky partition changes when its batch is sent (or full), not per record."""
    acc = _acc()
    first = {_append(acc, partition=-1)[0] for _ in range(20)}
    assert len(first) == 1
    _take_all(acc, 10**12)
    second = {_append(acc, partition=-1)[0] for _ in range(20)}
    assert len(second) == 1
    assert second != first
    assert next(iter(second)) == (next(iter(first)) + 1) % 3


def test_wakeups_are_only_requested_for_new_batches_and_coalesced() -> None:
    acc = _acc()
    _, wake = _append(acc)
    assert wake  # a new batch and the sender has no timer yet
    _, wake = _append(acc)
    assert not wake  # same batch: the sender already knows its deadline
    _, wake = _append(acc, partition=1)
    assert not wake  # a wakeup is already pending
    acc.drain(0, lambda t, p: 0, lambda b, n: False, 10**9)  # the sender ran: pending cleared
    acc.sender_wake_at_ms = 10**15
    _, wake = _append(acc, partition=2)
    assert wake  # the sender sleeps past this batch's linger deadline


def test_buffer_memory_blocks_then_raises() -> None:
    acc = _acc(buffer_memory=20_000, batch_size=10_000)
    _append(acc, partition=0, value=b"x" * 9000)
    _append(acc, partition=1, value=b"x" * 9000)
    with pytest.raises(BufferExhaustedError):
        _append(acc, partition=2, value=b"x" * 9000, max_block_s=0.0)


def test_blocked_producer_resumes_when_memory_is_released() -> None:
    acc = _acc(buffer_memory=20_000, batch_size=10_000)
    _append(acc, partition=0, value=b"x" * 9000)
    _append(acc, partition=1, value=b"x" * 9000)
    done = threading.Event()

    def producer() -> None:
        _append(acc, partition=2, value=b"x" * 9000, max_block_s=60.0)
        done.set()

    thread = threading.Thread(target=producer)
    thread.start()
    deadline = time.monotonic() + 30
    while acc.space_waiters == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert acc.space_waiters == 1
    assert not done.is_set()
    for batch in _take_all(acc, 10**12)[:1]:
        acc.release(batch)
    thread.join(30)
    assert done.is_set()


def test_sequence_numbers_wrap_at_int32_max() -> None:
    """DefaultRecordBatch.incrementSequence: sequences wrap from 2^31-1 to 0."""
    assert increment_sequence(0, 5) == 5
    assert increment_sequence(2**31 - 1, 1) == 0
    assert increment_sequence(2**31 - 3, 5) == 2


def test_a_record_larger_than_max_request_size_is_refused() -> None:
    """It could never be sent (librdkafka: MSG_SIZE_TOO_LARGE at produce time)."""
    from oncestream.client.producer.accumulator import RecordTooLargeError

    acc = RecordAccumulator(batch_size=10_000, batch_num_messages=1000, linger_ms=5,
                            buffer_memory=10_000_000, max_request_size=5000)
    _append(acc, value=b"x" * 4000)
    with pytest.raises(RecordTooLargeError):
        _append(acc, value=b"x" * 6000)
