"""Complete record batches of a fetch response (protocol/batch_walk.py): a response may end
inside its last batch (the broker stops at the byte limit), and the reader takes only the whole
ones; a length field shorter than a batch header is corruption."""

from __future__ import annotations

import struct

import pytest

from oncestream.errors import CorruptRecordError
from oncestream.protocol.batch_walk import complete_batches, complete_batches_end, iter_complete_batches
from oncestream.protocol.records import NewRecord, encode_batch


def _batch(base: int, count: int) -> bytes:
    return encode_batch([NewRecord(value=b"v%d" % i) for i in range(count)], now_ms=1, base_offset=base)


def test_a_cut_off_last_batch_is_left_for_the_next_fetch() -> None:
    first, second = _batch(10, 3), _batch(13, 2)
    for cut in range(1, len(second)):
        data = first + second[:cut]
        assert complete_batches_end(data) == (len(first), 13)
        assert bytes(complete_batches(data)) == first
        assert [h.base_offset for h, _ in iter_complete_batches(data)] == [10]
    assert complete_batches_end(first + second) == (len(first) + len(second), 15)


def test_nothing_complete() -> None:
    assert complete_batches_end(b"") == (0, -1)
    assert complete_batches_end(_batch(0, 1)[:11]) == (0, -1)
    assert complete_batches_end(_batch(0, 1)[:40]) == (0, -1)


def test_a_length_below_the_header_size_is_corruption_not_a_cut() -> None:
    bad = bytearray(_batch(0, 1))
    struct.pack_into(">i", bad, 8, 10)  # batchLength: less than the 49 header bytes after it
    with pytest.raises(CorruptRecordError):
        complete_batches_end(_batch(0, 1) + bytes(bad))
