"""The records of a ShareFetch answer (client/consumer/share_records.py): only acquired offsets
are handed out, with their delivery count; acquired offsets without a record are gaps."""

from __future__ import annotations

from oncestream.client.consumer.share_records import acquired_records
from oncestream.protocol import records as rec
from oncestream.protocol.markers import CONTROL_COMMIT

NOW = 1_700_000_000_000


def _batch(base: int, count: int, *, pid: int = -1, txn: bool = False) -> bytes:
    records = [rec.NewRecord(value=b"v%d" % (base + i), key=None, timestamp_ms=NOW + i, headers=())
               for i in range(count)]
    return rec.encode_batch(records, now_ms=NOW, base_offset=base, producer_id=pid,
                            producer_epoch=0 if pid >= 0 else -1, base_sequence=0 if pid >= 0 else -1,
                            transactional=txn)


def test_only_acquired_offsets_with_their_delivery_counts() -> None:
    data = _batch(0, 5) + _batch(5, 5)
    messages, gaps = acquired_records(data, "t", 3, [(2, 3, 1), (6, 7, 4)])
    assert [(m.offset(), m.value(), m.delivery_count(), m.partition()) for m in messages] == [
        (2, b"v2", 1, 3), (3, b"v3", 1, 3), (6, b"v6", 4, 3), (7, b"v7", 4, 3)]
    assert gaps == []


def test_control_records_and_missing_offsets_are_gaps() -> None:
    marker = rec.encode_control_batch(marker=CONTROL_COMMIT, base_offset=2, producer_id=7, producer_epoch=0,
                                      coordinator_epoch=0, now_ms=NOW)
    data = _batch(0, 2, pid=7, txn=True) + marker + _batch(5, 1)
    messages, gaps = acquired_records(data, "t", 0, [(0, 5, 2)])
    assert [m.offset() for m in messages] == [0, 1, 5]
    assert gaps == [2, 3, 4]


def test_nothing_acquired_means_nothing_handed_out() -> None:
    assert acquired_records(_batch(0, 3), "t", 0, []) == ([], [])
    assert acquired_records(None, "t", 0, [(0, 1, 1)]) == ([], [0, 1])
