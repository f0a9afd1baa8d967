"""Driver-side planning and the read_committed filter, without Spark or a broker."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncestream.protocol import record_batch as rb
from oncestream.protocol.markers import CONTROL_ABORT, CONTROL_COMMIT
from oncestream.protocol.records import NewRecord, decode_batches, encode_batch, encode_control_batch
from oncestream.spark.errors import OptionError
from oncestream.spark.options import offsets_from_json, offsets_to_json, parse_offset_spec, sink_options, source_options
from oncestream.spark.partition_reader import _append_records, _Columns, decode_to_arrow
from oncestream.spark.source import plan_ranges, rate_limit

pytestmark = pytest.mark.spark

A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


def test_one_range_per_partition_and_empty_ones_dropped():
    assert plan_ranges({A0: (0, 10), A1: (5, 5), B0: (3, 4)}) == [(A0, 0, 10), (B0, 3, 4)]


def test_long_ranges_are_split_evenly():
    ranges = plan_ranges({A0: (0, 10)}, max_records_per_partition=4)
    assert ranges == [(A0, 0, 3), (A0, 3, 6), (A0, 6, 10)]


def test_min_partitions_splits_in_proportion_to_size():
    ranges = plan_ranges({A0: (0, 90), A1: (0, 10)}, min_partitions=10)
    assert sum(1 for tp, _, _ in ranges if tp == A0) == 9
    assert sum(1 for tp, _, _ in ranges if tp == A1) == 1


def test_rate_limit_shares_in_proportion_and_always_progresses():
    assert rate_limit({A0: 0, A1: 0}, {A0: 100, A1: 300}, 40) == {A0: 10, A1: 30}
    end = rate_limit({A0: 0, A1: 0, B0: 0}, {A0: 1, A1: 1, B0: 1}, 2)
    assert sum(end.values()) == 2
    assert rate_limit({A0: 5}, {A0: 8}, 100) == {A0: 8}


def test_offsets_json_is_sparks_shape():
    offsets = {A0: 12, A1: 7, B0: 0}
    assert offsets_to_json(offsets) == {"a": {"0": 12, "1": 7}, "b": {"0": 0}}
    assert offsets_from_json(offsets_to_json(offsets)) == offsets
    assert parse_offset_spec('{"a":{"0":-2,"1":5}}', "latest", "startingOffsets").per_partition == {A0: -2, A1: 5}


def test_option_validation():
    base = {"kafka.bootstrap.servers": "h:1"}
    with pytest.raises(OptionError, match="endingOffsets is not valid for streaming"):
        source_options({**base, "subscribe": "t", "endingOffsets": "latest"}, streaming=True)
    with pytest.raises(OptionError, match="startingOffsets=latest is not valid for batch"):
        source_options({**base, "subscribe": "t", "startingOffsets": "latest"}, streaming=False)
    opts = source_options({**base, "SubscribePattern": "t.*", "kafka.isolation.level": "read_uncommitted",
                           "maxOffsetsPerTrigger": "9"}, streaming=True)
    assert opts.subscription.matches("tx")
    assert not opts.read_committed
    assert opts.max_offsets_per_trigger == 9
    sink = sink_options({**base, "topic": "out", "exactlyOnce": "false", "kafka.linger.ms": "3",
                         "kafka.transactional.id": "app"})
    assert (sink.topic, sink.exactly_once, sink.transactional_id_prefix) == ("out", False, "app")
    assert sink.producer_config == {"linger.ms": "3"}


def _data(offset: int, pid: int, values: list[bytes], transactional: bool = True):
    return encode_batch([NewRecord(v) for v in values], now_ms=1, base_offset=offset, producer_id=pid,
                        producer_epoch=0, base_sequence=0, transactional=transactional)


def _marker(offset: int, pid: int, kind: int):
    return encode_control_batch(marker=kind, producer_id=pid, producer_epoch=0, coordinator_epoch=0, now_ms=1,
                                base_offset=offset)


def test_aborted_filter_drops_aborted_transactions_and_markers():
    """KIP-98 consumer rule: with aborted (pid 7, first offset 3), pid 7's batches from offset 3 up
    to its ABORT marker are dropped; pid 8's interleaved committed batch and pid 7's next
    transaction are kept; markers never reach the user."""
    blob = b"".join([
        _data(0, 7, [b"keep-1", b"keep-2"]),
        _marker(2, 7, CONTROL_COMMIT),
        _data(3, 7, [b"drop-1"]),
        _data(4, 8, [b"keep-3"]),
        _data(5, 7, [b"drop-2"]),
        _marker(6, 7, CONTROL_ABORT),
        _marker(7, 8, CONTROL_COMMIT),
        _data(8, 7, [b"keep-4"]),
    ])
    (arrow,) = decode_to_arrow(blob, "t", 0, 0, 9, read_committed=True, aborted=((7, 3),))
    assert arrow.column("value").to_pylist() == [b"keep-1", b"keep-2", b"keep-3", b"keep-4"]
    assert arrow.column("offset").to_pylist() == [0, 1, 4, 8]


@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=300)), st.one_of(st.none(), st.binary(max_size=3000)),
                          st.lists(st.tuples(st.text(max_size=20), st.one_of(st.none(), st.binary(max_size=50))),
                                   max_size=3),
                          st.integers(min_value=0, max_value=10**6)), min_size=1, max_size=40),
       st.integers(min_value=0, max_value=2**40), st.sampled_from([0, 1, 2, 3, 4]))
@settings(max_examples=60, deadline=None)
def test_columnar_decoder_matches_the_generic_decoder(records, base_offset, compression):
    """The reader's columnar record decoder agrees with protocol.records on every field."""
    batch = encode_batch([NewRecord(v, key=k, headers=h, timestamp_ms=1_600_000_000_000 + t)
                          for k, v, h, t in records], now_ms=1, base_offset=base_offset, compression=compression)
    (decoded,) = decode_batches(batch)
    cols = _Columns()
    (header, view), = list(rb.iter_batches(batch))
    _append_records(header, view, cols, base_offset, base_offset + len(records))
    assert cols.offsets == [r.offset for r in decoded.records]
    assert cols.keys == [r.key for r in decoded.records]
    assert cols.values == [r.value for r in decoded.records]
    assert cols.timestamps_us == [r.timestamp_ms * 1000 for r in decoded.records]
    assert cols.headers == [[{"key": k, "value": v} for k, v in r.headers] or None for r in decoded.records]
    # A sub-range keeps only its offsets.
    part = _Columns()
    _append_records(header, view, part, base_offset + 1, base_offset + 2)
    assert part.offsets == ([base_offset + 1] if len(records) > 1 else [])
