"""Columnar decoding of fetch responses (``client.consumer.batch_reader``): the same records, offsets and
read_committed filtering (KIP-98: aborted transactions and markers never visible) as the
client's message decoder, with the C builder and with the pure-Python fallback."""

from __future__ import annotations

import random

import pytest

from oncestream.client.consumer.batch_reader import decode_columns, native_available
from oncestream.client.consumer.fetch_decoder import decode_partition
from oncestream.protocol.compression import COMPRESSION_GZIP, COMPRESSION_NONE
from oncestream.protocol.markers import CONTROL_ABORT, CONTROL_COMMIT
from oncestream.protocol.records import NewRecord, encode_batch, encode_control_batch

NATIVE = [pytest.param(True, marks=pytest.mark.skipif(not native_available(), reason="C builder not built")), False]


def _random_log(rng: random.Random) -> tuple[bytes, list[tuple[int, int]]]:
    """Batches of plain, transactional (committed and aborted) records with null keys and
    tombstones, some compressed, plus the aborted list a read_committed Fetch would carry."""
    out: list[bytes] = []
    aborted: list[tuple[int, int]] = []
    offset = 0
    open_txns: dict[int, bool] = {}  # producer id -> aborts
    for _ in range(rng.randint(1, 30)):
        choice = rng.random()
        if open_txns and choice < 0.25:
            pid = rng.choice(sorted(open_txns))
            marker = CONTROL_ABORT if open_txns.pop(pid) else CONTROL_COMMIT
            out.append(encode_control_batch(marker=marker, producer_id=pid, producer_epoch=0, coordinator_epoch=0,
                                            now_ms=1000, base_offset=offset))
            offset += 1
            continue
        records = [NewRecord(value=None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 300)),
                             key=None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, 20)),
                             headers=[("h", b"v")] if rng.random() < 0.1 else ())
                   for _ in range(rng.randint(1, 20))]
        compression = COMPRESSION_GZIP if rng.random() < 0.3 else COMPRESSION_NONE
        if choice < 0.6:
            pid = rng.randint(1, 3)
            if pid not in open_txns:
                open_txns[pid] = rng.random() < 0.5
                if open_txns[pid]:
                    aborted.append((pid, offset))
            out.append(encode_batch(records, now_ms=1000, base_offset=offset, producer_id=pid, producer_epoch=0,
                                    base_sequence=0, transactional=True, compression=compression))
        else:
            out.append(encode_batch(records, now_ms=1000, base_offset=offset, compression=compression))
        offset += len(records)
    return b"".join(out), aborted


@pytest.mark.parametrize("native", NATIVE)
@pytest.mark.parametrize("read_committed", [True, False])
def test_columns_match_the_message_decoder_on_random_logs(native: bool, read_committed: bool) -> None:
    """KIP-98 read_committed: the same visible records as the consumer's decoder, from any position."""
    rng = random.Random(13)
    for _ in range(60):
        data, aborted = _random_log(rng)
        cut = len(data) - rng.randint(0, 40)  # a response may end inside its last batch
        data = data[:cut]
        position = rng.randint(0, 40)
        expected = decode_partition(data, "t", 3, position, read_committed=read_committed, aborted=aborted)
        got = decode_columns(data, "t", 3, position, read_committed=read_committed, aborted=aborted,
                             check_crcs=True, native=native)
        assert (got.topic, got.partition) == ("t", 3)
        assert got.keys == [m.key() for m in expected.messages]
        assert got.values == [m.value() for m in expected.messages]
        assert list(got.offsets) == [m.offset() for m in expected.messages]
        assert got.next_offset == expected.next_offset
        assert got.null_keys == got.keys.count(None)
        assert got.null_values == got.values.count(None)
        assert all(type(k) is bytes for k in got.keys if k is not None)
        assert all(type(v) is bytes for v in got.values if v is not None)


@pytest.mark.parametrize("native", NATIVE)
def test_aborted_transaction_is_never_visible_read_committed(native: bool) -> None:
    """An aborted transaction's records are dropped up to its ABORT marker; the position moves past both."""
    batches = [
        encode_batch([NewRecord(b"v0", b"k0")], now_ms=1, base_offset=0),
        encode_batch([NewRecord(b"gone", b"k1"), NewRecord(None, b"k0")], now_ms=1, base_offset=1, producer_id=7,
                     producer_epoch=0, base_sequence=0, transactional=True),
        encode_control_batch(marker=CONTROL_ABORT, producer_id=7, producer_epoch=0, coordinator_epoch=0, now_ms=1,
                             base_offset=3),
        encode_batch([NewRecord(b"v4", b"k4")], now_ms=1, base_offset=4, producer_id=7, producer_epoch=0,
                     base_sequence=2, transactional=True),
        encode_control_batch(marker=CONTROL_COMMIT, producer_id=7, producer_epoch=0, coordinator_epoch=0, now_ms=1,
                             base_offset=5),
    ]
    got = decode_columns(b"".join(batches), "t", 0, 0, read_committed=True, aborted=[(7, 1)], native=native)
    assert (got.keys, got.values, list(got.offsets), got.next_offset) == ([b"k0", b"k4"], [b"v0", b"v4"], [0, 4], 6)
    uncommitted = decode_columns(b"".join(batches), "t", 0, 0, read_committed=False, aborted=[(7, 1)], native=native)
    assert uncommitted.keys == [b"k0", b"k1", b"k0", b"k4"]
    assert uncommitted.values == [b"v0", b"gone", None, b"v4"]
    assert uncommitted.null_values == 1
