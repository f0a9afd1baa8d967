"""Rewriting a batch without some of its records (log/batch_records.py), checked against the
protocol decoder clients use: offsets, keys, values, headers and timestamps of the kept records
are unchanged; the batch keeps its base offset, last offset delta, producer fields and codec;
a KIP-534 delete horizon is stored in the base timestamp without moving any record's timestamp."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncestream.errors import InvalidRecordError
from oncestream.log.batch_records import (
    delete_horizon_ms,
    has_keyless_record,
    iter_raw_records,
    rebuild_batch,
)
from oncestream.protocol.compression import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
)
from oncestream.protocol.record_batch import ATTR_DELETE_HORIZON, parse_header
from oncestream.protocol.records import NewRecord, decode_batch, encode_batch

T0 = 1_700_000_000_000

records_strategy = st.lists(
    st.tuples(
        st.binary(min_size=1, max_size=8),  # key
        st.one_of(st.none(), st.binary(max_size=20)),  # value (None = tombstone)
        st.integers(min_value=0, max_value=10_000),  # timestamp offset from T0
        st.lists(st.tuples(st.sampled_from(["h", "trace-id"]), st.one_of(st.none(), st.binary(max_size=5))), max_size=2),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(
    records=records_strategy,
    keep_mask=st.lists(st.booleans(), min_size=12, max_size=12),
    codec=st.sampled_from([COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD]),
    horizon=st.one_of(st.none(), st.integers(min_value=T0 - 5_000, max_value=T0 + 50_000)),
)
def test_rebuilt_batch_keeps_offsets_timestamps_and_producer_fields(records, keep_mask, codec, horizon) -> None:
    original = encode_batch(
        [NewRecord(value=v, key=k, headers=tuple(h), timestamp_ms=T0 + t) for k, v, t, h in records],
        now_ms=T0,
        base_offset=5_000,
        producer_id=77,
        producer_epoch=2,
        base_sequence=40,
        compression=codec,
        partition_leader_epoch=3,
    )
    header = parse_header(original)
    raw = iter_raw_records(header, original)
    assert [(r.key, r.has_value) for r in raw] == [(k, v is not None) for k, v, _, _ in records]
    kept = [r for r, keep in zip(raw, keep_mask) if keep]

    rebuilt = rebuild_batch(header, kept, new_delete_horizon_ms=horizon)

    decoded_original = decode_batch(original)
    decoded = decode_batch(rebuilt)  # verifies the new CRC
    kept_offsets = {header.base_offset + r.offset_delta for r in kept}
    assert decoded.records == [r for r in decoded_original.records if r.offset in kept_offsets]
    new = decoded.header
    assert (new.base_offset, new.last_offset_delta, new.record_count) == (5_000, header.last_offset_delta, len(kept))
    assert (new.producer_id, new.producer_epoch, new.base_sequence, new.last_sequence) == (77, 2, 40, header.last_sequence)
    assert new.partition_leader_epoch == 3
    if kept:
        assert new.compression == codec
        assert new.max_timestamp == max(r.timestamp_ms for r in decoded.records)
        assert delete_horizon_ms(new) == horizon
        assert bool(new.attributes & ATTR_DELETE_HORIZON) == (horizon is not None)
    else:
        assert new.compression == COMPRESSION_NONE
        assert decoded.records == []


def test_a_horizon_once_set_never_moves() -> None:
    batch = encode_batch([NewRecord(value=None, key=b"k", timestamp_ms=T0)], now_ms=T0)
    header = parse_header(batch)
    stamped = rebuild_batch(header, iter_raw_records(header, batch), new_delete_horizon_ms=T0 + 100)
    stamped_header = parse_header(stamped)
    again = rebuild_batch(stamped_header, iter_raw_records(stamped_header, stamped), new_delete_horizon_ms=T0 + 999)
    assert delete_horizon_ms(parse_header(again)) == T0 + 100
    assert decode_batch(again).records[0].timestamp_ms == T0


def test_keyless_detection() -> None:
    with_key = encode_batch([NewRecord(value=b"v", key=b"k")], now_ms=T0, compression=COMPRESSION_ZSTD)
    without = encode_batch([NewRecord(value=b"v", key=b"k"), NewRecord(value=b"v")], now_ms=T0)
    assert not has_keyless_record(parse_header(with_key), with_key)
    assert has_keyless_record(parse_header(without), without)


def test_rebuild_refuses_records_out_of_order_or_outside_the_batch_even_under_python_o() -> None:
    """A wrong subset would be written to disk: typed errors, not asserts that ``-O`` strips."""
    batch = encode_batch([NewRecord(value=b"a", key=b"k"), NewRecord(value=b"b", key=b"k")], now_ms=T0)
    header = parse_header(batch)
    first, second = iter_raw_records(header, batch)
    with pytest.raises(InvalidRecordError):
        rebuild_batch(header, [second, first], new_delete_horizon_ms=None)
    one_record = parse_header(encode_batch([NewRecord(value=b"a", key=b"k")], now_ms=T0))
    with pytest.raises(InvalidRecordError):
        rebuild_batch(one_record, [first, second], new_delete_horizon_ms=None)
