"""The one read_committed filter (protocol/aborted_filter.py), KIP-98 consumer-side filtering:
a producer's transactional batches from its aborted transaction's first offset up to its ABORT
marker are hidden, control batches are never shown, and every reader (client decoder, Spark
reader, CLI) applies the same rule."""

from __future__ import annotations

from oncestream.client.consumer.fetch_decoder import decode_partition
from oncestream.log.batch_records import iter_raw_records, rebuild_batch
from oncestream.protocol import record_batch as rb
from oncestream.protocol.aborted_filter import AbortedFilter
from oncestream.protocol.compression import COMPRESSION_LZ4
from oncestream.protocol.markers import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    NOT_A_MARKER,
    encode_marker_key,
    encode_marker_value,
    first_marker_type,
)
from oncestream.protocol.records import NewRecord, encode_batch, encode_control_batch

NOW = 1_700_000_000_000


def _data(base: int, pid: int, value: bytes, *, txn: bool = True) -> bytes:
    return encode_batch([NewRecord(value=value)], now_ms=NOW, base_offset=base, producer_id=pid, producer_epoch=0,
                        base_sequence=0, transactional=txn)


def _marker(base: int, pid: int, kind: int) -> bytes:
    return encode_control_batch(marker=kind, producer_id=pid, producer_epoch=0, coordinator_epoch=0, now_ms=NOW,
                                base_offset=base)


def _hidden(blob: bytes, filt: AbortedFilter) -> list[int]:
    return [h.base_offset for h, batch in rb.iter_batches(blob) if filt.hides_header(h, batch)]


def test_aborted_transaction_hidden_until_its_abort_marker() -> None:
    """Producer 7 aborts 3..5 while 8 commits an interleaved batch and 7's plain (idempotent,
    non-transactional) batch stays visible; 7's next transaction is visible again."""
    blob = b"".join([
        _data(0, 7, b"keep"), _marker(1, 7, CONTROL_COMMIT),
        _data(3, 7, b"drop"), _data(4, 8, b"keep"), _data(5, 7, b"plain", txn=False), _data(6, 7, b"drop"),
        _marker(7, 7, CONTROL_ABORT), _marker(8, 8, CONTROL_COMMIT), _data(9, 7, b"keep"),
    ])
    assert _hidden(blob, AbortedFilter(True, [(7, 3)])) == [1, 3, 6, 7, 8]
    assert _hidden(blob, AbortedFilter(False, [(7, 3)])) == [1, 7, 8]  # read_uncommitted: markers only


def test_aborted_lists_arrive_fetch_by_fetch() -> None:
    """The Spark reader feeds each response's list into one filter for its whole range."""
    filt = AbortedFilter(True)
    filt.add([(7, 0)])
    assert filt.hides_header(*next(rb.iter_batches(_data(0, 7, b"x"))))
    filt.add([(8, 1)])
    assert filt.hides_header(*next(rb.iter_batches(_data(1, 8, b"y"))))
    assert not filt.hides_header(*next(rb.iter_batches(_data(2, 9, b"z"))))


def _abort_then_commit() -> bytes:
    return b"".join([_data(0, 7, b"aborted"), _marker(1, 7, CONTROL_ABORT), _data(2, 7, b"committed"),
                     _marker(3, 7, CONTROL_COMMIT)])


def test_client_marker_below_the_fetch_position_still_ends_the_aborted_transaction() -> None:
    """Kafka's consumer feeds every batch of a response to the filter, also those below the
    position: skipping the ABORT marker at 1 left producer 7 'aborting', and its committed
    record at 2 was silently dropped."""
    result = decode_partition(_abort_then_commit(), "t", 0, 2, read_committed=True, aborted=[(7, 0)])
    assert [m.value() for m in result.messages] == [b"committed"]


def test_spark_marker_below_the_read_position_still_ends_the_aborted_transaction() -> None:
    from oncestream.spark.partition_reader import decode_to_arrow

    (batch,) = decode_to_arrow(_abort_then_commit(), "t", 0, 2, 10, read_committed=True, aborted=[(7, 0)])
    assert batch.column("value").to_pylist() == [b"committed"]


def test_a_compressed_marker_is_read_through_its_codec() -> None:
    """The broker writes markers uncompressed, but a control batch that says it is compressed
    is decompressed, not misread (the client's old marker reader took the raw bytes)."""
    marker = encode_batch([NewRecord(value=encode_marker_value(0), key=encode_marker_key(CONTROL_ABORT))],
                          now_ms=NOW, base_offset=1, producer_id=7, producer_epoch=0, transactional=True,
                          control=True, compression=COMPRESSION_LZ4)
    header = rb.parse_header(marker)
    assert first_marker_type(marker, 0, len(marker), header.attributes) == CONTROL_ABORT
    blob = _data(0, 7, b"aborted") + marker + _data(2, 7, b"committed") + _marker(3, 7, CONTROL_COMMIT)
    result = decode_partition(blob, "t", 0, 0, read_committed=True, aborted=[(7, 0)])
    assert [m.value() for m in result.messages] == [b"committed"]


def test_an_emptied_control_batch_is_hidden_and_ends_nothing() -> None:
    """A control batch the cleaner emptied has no record to name its type."""
    full = _marker(1, 7, CONTROL_ABORT)
    header = rb.parse_header(full)
    assert len(iter_raw_records(header, full)) == 1
    emptied = rebuild_batch(header, [], new_delete_horizon_ms=None)
    assert first_marker_type(emptied, 0, len(emptied), header.attributes) == NOT_A_MARKER
    filt = AbortedFilter(True, [(7, 0)])
    blob = _data(0, 7, b"a") + emptied + _data(2, 7, b"b")
    assert _hidden(blob, filt) == [0, 1, 2]
