"""One walk per produced batch: the Produce handler's split of the records reaches the log, which
checks CRC and the rest on those pairs instead of parsing the batches again."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncestream.errors import CorruptRecordError
from oncestream.log import batch_validation
from oncestream.log.config import LogConfig
from oncestream.log.partition_log import PartitionLog
from oncestream.protocol.record_batch import iter_batches
from tests.unit._batches import make_batch


def _no_second_walk(*_args: object, **_kwargs: object) -> None:
    raise AssertionError("the log split records the handler had already split")


def test_an_append_with_the_handlers_split_does_not_walk_the_batches_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), 0)
    records = make_batch(3)
    split = list(iter_batches(records, verify_crc=False))
    monkeypatch.setattr(batch_validation, "iter_batches", _no_second_walk)
    result = log.append(records, 1_000, split=split)
    assert (result.base_offset, result.last_offset) == (0, 2)
    monkeypatch.undo()
    assert b"".join(log.read(0, 1 << 20).chunks)[8:] == bytes(records)[8:]
    log.close()


def test_the_crc_of_an_already_split_batch_is_still_verified(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), 0)
    records = bytearray(make_batch(2))
    records[-1] ^= 0xFF  # a record byte: the CRC no longer matches, the header still parses
    split = list(iter_batches(records, verify_crc=False))
    with pytest.raises(CorruptRecordError, match="CRC"):
        log.append(records, 1_000, split=split)
    assert log.log_end_offset == 0
    log.close()
