"""Fetch-side record decoding: every codec, headers, keys, offsets below the fetch position, a
truncated last batch, control records, and read_committed filtering of aborted transactions
(KIP-98: the response's aborted_transactions plus ABORT markers)."""

from __future__ import annotations

import pytest

from oncestream.client.common.message import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME
from oncestream.client.consumer.fetch_decoder import decode_partition
from oncestream.errors import CorruptRecordError
from oncestream.protocol import records as rec
from oncestream.protocol.batch_walk import complete_batches_end
from oncestream.protocol.markers import CONTROL_ABORT, CONTROL_COMMIT
from oncestream.protocol.record_batch import ATTR_TIMESTAMP_TYPE_LOG_APPEND

NOW = 1_700_000_000_000


def _batch(base: int, values: list[bytes], *, pid: int = -1, txn: bool = False, codec: int = 0,
           headers: bool = False) -> bytes:
    records = [rec.NewRecord(value=v, key=b"k" + v, timestamp_ms=NOW + i,
                             headers=(("h", v), ("n", None)) if headers else ())
               for i, v in enumerate(values)]
    return rec.encode_batch(records, now_ms=NOW, base_offset=base, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                            base_sequence=0 if pid >= 0 else -1, transactional=txn, compression=codec)


def _marker(base: int, pid: int, commit: bool) -> bytes:
    return rec.encode_control_batch(marker=CONTROL_COMMIT if commit else CONTROL_ABORT,
                                    producer_id=pid, producer_epoch=0, coordinator_epoch=0,
                                    now_ms=NOW, base_offset=base)


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_decodes_every_codec_with_keys_headers_and_timestamps(codec: int) -> None:
    values = [b"v%d" % i * (i + 1) for i in range(50)] + [b"x" * 3000]
    data = _batch(10, values, codec=codec, headers=True)
    result = decode_partition(data, "t", 3, 0)
    assert [m.value() for m in result.messages] == values
    assert [m.offset() for m in result.messages] == list(range(10, 10 + len(values)))
    first = result.messages[0]
    assert first.topic() == "t"
    assert first.partition() == 3
    assert first.key() == b"k" + values[0]
    assert first.headers() == [("h", values[0]), ("n", None)]
    assert first.timestamp() == (TIMESTAMP_CREATE_TIME, NOW)
    assert result.messages[5].timestamp() == (TIMESTAMP_CREATE_TIME, NOW + 5)
    assert result.next_offset == 10 + len(values)


def test_null_key_and_value_and_no_headers() -> None:
    data = rec.encode_batch([rec.NewRecord(value=None, key=None)], now_ms=NOW)
    (m,) = decode_partition(data, "t", 0, 0).messages
    assert m.key() is None
    assert m.value() is None
    assert m.headers() is None


def test_log_append_time_batches_use_max_timestamp() -> None:
    data = bytearray(_batch(0, [b"a", b"b"]))
    # Flip the timestamp type attribute and fix the CRC as a broker with LogAppendTime would.
    attrs = int.from_bytes(data[21:23], "big") | ATTR_TIMESTAMP_TYPE_LOG_APPEND
    data[21:23] = attrs.to_bytes(2, "big")
    ms = decode_partition(bytes(data), "t", 0, 0).messages
    assert ms[0].timestamp()[0] == TIMESTAMP_LOG_APPEND_TIME
    assert ms[0].timestamp()[1] == ms[1].timestamp()[1] == NOW + 1


def test_records_below_the_fetch_position_are_dropped() -> None:
    """A fetch returns whole batches; the position can be inside the first one."""
    data = _batch(100, [b"a", b"b", b"c", b"d"]) + _batch(104, [b"e"])
    result = decode_partition(data, "t", 0, 102)
    assert [m.offset() for m in result.messages] == [102, 103, 104]


def test_truncated_last_batch_is_ignored_and_next_offset_stops_before_it() -> None:
    whole = _batch(0, [b"a", b"b"])
    data = whole + _batch(2, [b"c", b"d"])[:-5]
    result = decode_partition(data, "t", 0, 0)
    assert [m.value() for m in result.messages] == [b"a", b"b"]
    assert result.next_offset == 2
    assert complete_batches_end(data) == (len(whole), 2)


def test_control_batches_are_never_returned() -> None:
    data = _batch(0, [b"a"], pid=7, txn=True) + _marker(1, 7, commit=True) + _batch(2, [b"b"])
    result = decode_partition(data, "t", 0, 0, read_committed=True)
    assert [m.value() for m in result.messages] == [b"a", b"b"]
    assert result.next_offset == 3


def test_read_committed_skips_aborted_transactions_only() -> None:
    """Producer 7 aborts its transaction at 0..1, producer 8 commits its interleaved one, then
    producer 7 starts a new (committed) transaction: only 7's first transaction is dropped."""
    data = (
        _batch(0, [b"p7-aborted-1"], pid=7, txn=True)
        + _batch(1, [b"p8-committed"], pid=8, txn=True)
        + _batch(2, [b"p7-aborted-2"], pid=7, txn=True)
        + _marker(3, 7, commit=False)
        + _marker(4, 8, commit=True)
        + _batch(5, [b"p7-committed"], pid=7, txn=True)
        + _marker(6, 7, commit=True)
        + _batch(7, [b"plain"])
    )
    committed = decode_partition(data, "t", 0, 0, read_committed=True, aborted=[(7, 0)])
    assert [m.value() for m in committed.messages] == [b"p8-committed", b"p7-committed", b"plain"]
    uncommitted = decode_partition(data, "t", 0, 0, read_committed=False, aborted=[(7, 0)])
    assert len(uncommitted.messages) == 5  # read_uncommitted sees aborted data, never markers


def test_corrupt_record_lengths_are_detected() -> None:
    data = bytearray(_batch(0, [b"abc"]))
    data[61] = 0x7E  # first record's length varint: claims far more bytes than the batch has
    with pytest.raises(CorruptRecordError):
        decode_partition(bytes(data), "t", 0, 0)


def test_crc_check_on_request() -> None:
    data = bytearray(_batch(0, [b"abc"]))
    data[-2] ^= 0x01  # a byte of the value: the structure still parses, the CRC does not match
    assert decode_partition(bytes(data), "t", 0, 0).messages[0].value() == b"abb"
    decode_partition(bytes(data), "t", 0, 0)  # not checked by default (librdkafka's check.crcs=false)
    with pytest.raises(CorruptRecordError):
        decode_partition(bytes(data), "t", 0, 0, check_crcs=True)
