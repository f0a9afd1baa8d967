"""split_produce_data: a Produce partition's data split once, with Kafka's answer for data that is
not exactly one record batch (found by tests/fuzz/test_fuzz_wire.py: a batch length made shorter
left bytes behind whose 'magic' happened to be 1, answered UNSUPPORTED_FOR_MESSAGE_FORMAT)."""

from __future__ import annotations

import pytest

from oncestream.errors import CorruptRecordError, InvalidRecordError, UnsupportedMagicError
from oncestream.log.batch_validation import split_produce_data
from oncestream.protocol.record_batch import MAGIC_OFFSET
from tests.support.wire import record_batch


def _leftover(magic: int) -> bytes:
    junk = bytearray(40)
    junk[8:12] = (28).to_bytes(4, "big")  # a batch length that fits the bytes left
    junk[MAGIC_OFFSET] = magic
    return bytes(junk)


def test_one_batch_is_split_with_its_header() -> None:
    split: list = []
    split_produce_data(record_batch([b"a", b"b"], timestamp_ms=1), split)
    assert [header.record_count for header, _ in split] == [2]


@pytest.mark.parametrize("magic", [0, 1, 7])
def test_bytes_after_a_first_batch_are_invalid_record_whatever_they_look_like(magic: int) -> None:
    split: list = []
    with pytest.raises(InvalidRecordError, match="exactly one record batch"):
        split_produce_data(record_batch([b"a"], timestamp_ms=1) + _leftover(magic), split)


def test_the_first_batch_keeps_its_own_error() -> None:
    with pytest.raises(UnsupportedMagicError):
        split_produce_data(_leftover(1), [])
    with pytest.raises(CorruptRecordError):
        split_produce_data(record_batch([b"a"], timestamp_ms=1)[:30], [])
