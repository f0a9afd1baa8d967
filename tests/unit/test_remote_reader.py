"""The remote reader and its index cache against a directory store holding segments copied by
hand from a real PartitionLog (what the copier uploads: .log, .index, .timeindex, .txnindex).

The local log stays open beside the store, so each remote answer is checked against what the
same log answers locally (offsets, bytes, aborted transactions, timestamp lookups)."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from oncestream.errors import OffsetOutOfRangeError, RemoteObjectNotFoundError, RemoteStorageError
from oncestream.log.config import LogConfig
from oncestream.log.partition_log import PartitionLog
from oncestream.protocol.record_batch import iter_batches
from oncestream.remote.index_cache import RemoteIndexCache
from oncestream.remote.local_store import LocalObjectStore
from oncestream.remote.reader import RemoteLogReader
from tests.unit._batches import ATTR_TRANSACTIONAL, make_batch
from tests.unit._remote_segments import Seg, layout_keys

P1, P2, P3 = 101, 202, 303
TOPIC_ID = uuid.UUID(int=7)
BIG = 2**31 - 1


key_of = layout_keys("t", TOPIC_ID)



class CountingStore(LocalObjectStore):
    """The directory store, recording every ranged read (key, bytes asked, bytes returned)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.ranges: list[tuple[str, int, int]] = []
        self.gets: list[str] = []

    def get_range(self, key: str, start: int, end: int) -> bytes:
        data = super().get_range(key, start, end)
        self.ranges.append((key, end - start, len(data)))
        return data

    def get(self, key: str) -> bytes:
        self.gets.append(key)
        return super().get(key)


def txn_batch(producer_id: int, sequence: int, count: int, ts: int) -> bytes:
    return make_batch(
        count, producer_id=producer_id, producer_epoch=0, base_sequence=sequence, attributes=ATTR_TRANSACTIONAL,
        timestamp_ms=ts, value_size=30,
    )


def marker(plog: PartitionLog, producer_id: int, *, commit: bool) -> int:
    return plog.append_marker(producer_id=producer_id, producer_epoch=0, commit=commit, coordinator_epoch=0, now_ms=5)


def build_log(directory: Path) -> PartitionLog:
    """~20 small segments: plain batches with rising timestamps, a committed transaction, and an
    aborted one whose first record sits segments before its ABORT marker."""
    plog = PartitionLog.open(directory, LogConfig(segment_bytes=700, index_interval_bytes=150), 0)
    ts = 10_000
    seq = {P1: 0, P2: 0, P3: 0}

    def plain(count: int = 3) -> None:
        nonlocal ts
        ts += 10
        plog.append(make_batch(count, timestamp_ms=ts, value_size=40), ts)

    def txn(producer_id: int, count: int = 2) -> None:
        nonlocal ts
        ts += 10
        plog.append(txn_batch(producer_id, seq[producer_id], count, ts), ts)
        seq[producer_id] += count

    for _ in range(8):
        plain()
    txn(P1)  # P1's aborted transaction starts here...
    for _ in range(3):
        plain()
        txn(P2)
    for _ in range(12):
        plain()  # ...several segments later:
    marker(plog, P2, commit=True)
    txn(P1)
    marker(plog, P1, commit=False)  # the ABORT lands segments after P1's first record
    for _ in range(4):
        plain()
    txn(P3, 3)
    marker(plog, P3, commit=False)  # an abort inside one segment
    for _ in range(10):
        plain()
    plog.flush()
    return plog


def copy_sealed_segments(plog: PartitionLog, directory: Path, store: CountingStore) -> list[Seg]:
    """What the copier does for every sealed segment: upload its files under layout keys."""
    bases = plog.segment_base_offsets()
    segments = []
    for base, next_base in itertools.pairwise(bases):
        stem = f"{base:020d}"
        log_bytes = (directory / f"{stem}.log").read_bytes()
        max_ts = max(header.max_timestamp for header, _ in iter_batches(log_bytes))
        has_txn_index = bool((directory / f"{stem}.txnindex").read_bytes())
        seg = Seg(uuid.uuid4(), base, next_base - 1, max_ts, has_txn_index)
        for suffix in ("log", "index", "timeindex", "txnindex"):
            path = directory / f"{stem}.{suffix}"
            if suffix == "txnindex" and not has_txn_index:
                continue  # the copier uploads no empty txnindex
            store.put(key_of(seg, suffix), path.read_bytes())
        segments.append(seg)
    return segments


@pytest.fixture
def tiered(tmp_path: Path) -> Iterator[tuple[PartitionLog, CountingStore, list[Seg], RemoteLogReader]]:
    directory = tmp_path / "t-0"
    plog = build_log(directory)
    store = CountingStore(tmp_path / "store")
    segments = copy_sealed_segments(plog, directory, store)
    assert len(segments) >= 10
    reader = RemoteLogReader(store, RemoteIndexCache(store.get, 1 << 20), key_of)
    yield plog, store, segments, reader
    plog.close()


def batches(chunks: list[memoryview]) -> list[tuple[int, int]]:
    return [(h.base_offset, h.last_offset) for c in chunks for h, _ in iter_batches(c)]


def test_every_offset_reads_the_batch_holding_it_as_the_local_log_stores_it(tiered) -> None:
    plog, _store, segments, reader = tiered
    remote_end = segments[-1].last_offset + 1
    for offset in range(remote_end):
        got = reader.read(segments, offset, 300, upper_offset=BIG, min_one=True, with_aborted=False)
        spans = batches(got.chunks)
        assert spans, offset
        assert spans[0][0] <= offset <= spans[0][1]
        holding = next(s for s in segments if s.base_offset <= offset <= s.last_offset)
        assert spans[-1][1] <= holding.last_offset  # stops at the segment's end
        assert got.next_offset == spans[-1][1] + 1
        assert got.size_bytes <= 300 or len(spans) == 1
        # The same bytes the local log returns from that batch on.
        local = b"".join(plog.read(spans[0][0], got.size_bytes, min_one=True).chunks)
        assert b"".join(got.chunks) == local[: got.size_bytes]


def test_consecutive_fetches_return_the_whole_remote_log_in_order(tiered, tmp_path: Path) -> None:
    _plog, _store, segments, reader = tiered
    offset, data = 0, bytearray()
    while offset <= segments[-1].last_offset:
        got = reader.read(segments, offset, 512, upper_offset=BIG, min_one=True, with_aborted=False)
        data += b"".join(got.chunks)
        offset = got.next_offset
    expected = b"".join((tmp_path / "t-0" / f"{s.base_offset:020d}.log").read_bytes() for s in segments)
    assert bytes(data) == expected


def test_kip74_first_batch_whole_when_larger_than_the_budget_else_nothing(tiered) -> None:
    _plog, store, segments, reader = tiered
    store.ranges.clear()
    got = reader.read(segments, 0, 10, upper_offset=BIG, min_one=True, with_aborted=False)
    assert len(batches(got.chunks)) == 1
    assert got.size_bytes > 10
    assert all(asked <= max(10, got.size_bytes) for _k, asked, _n in store.ranges)  # memory: one batch
    none = reader.read(segments, 0, 10, upper_offset=BIG, min_one=False, with_aborted=False)
    assert (none.chunks, none.size_bytes, none.next_offset) == ([], 0, 0)


def test_ranged_reads_stay_within_the_budget_plus_one_batch(tiered) -> None:
    _plog, store, segments, reader = tiered
    for offset in range(0, segments[-1].last_offset, 7):
        store.ranges.clear()
        got = reader.read(segments, offset, 256, upper_offset=BIG, min_one=True, with_aborted=False)
        first_batch = len(got.chunks[0])
        assert all(asked <= max(256, first_batch) for _k, asked, _n in store.ranges), offset
        assert got.size_bytes <= max(256, first_batch)


def test_nothing_at_or_above_the_upper_offset(tiered) -> None:
    _plog, _store, segments, reader = tiered
    seg = segments[3]
    whole = reader.read(segments, seg.base_offset, BIG // 2, upper_offset=BIG, min_one=True, with_aborted=False)
    upper = batches(whole.chunks)[1][0]  # the second batch's base offset
    got = reader.read(segments, seg.base_offset, BIG // 2, upper_offset=upper, min_one=True, with_aborted=False)
    assert batches(got.chunks) == batches(whole.chunks)[:1]
    assert reader.read(segments, upper, 10_000, upper_offset=upper, min_one=True, with_aborted=False).chunks == []


def test_read_committed_lists_the_aborts_the_local_log_lists(tiered) -> None:
    plog, _store, segments, reader = tiered
    p1_aborted = False
    for offset in range(segments[-1].last_offset + 1):
        got = reader.read(segments, offset, 400, upper_offset=BIG, min_one=True, with_aborted=True)
        local = plog.read(offset, got.size_bytes, min_one=True, with_aborted=True)
        assert local.size_bytes == got.size_bytes
        expected = set(local.aborted_transactions or ())
        remote = set(got.aborted_transactions or ())
        if got.aborted_complete:
            assert remote == expected, offset
        else:  # the rest is the local segments' to add, above the remote ones
            assert remote <= expected
            assert got.local_aborts_from == segments[-1].last_offset + 1
        p1_aborted |= any(pid == P1 for pid, _first in remote)
    assert p1_aborted


def test_abort_marker_in_a_later_segment_than_the_first_record(tiered) -> None:
    _plog, _store, segments, reader = tiered
    # P1's first record: the first transactional batch with producer P1.
    for seg in segments:
        got = reader.read(segments, seg.base_offset, BIG // 2, upper_offset=BIG, min_one=True, with_aborted=True)
        if got.aborted_transactions and any(pid == P1 for pid, _ in got.aborted_transactions):
            first_offset = next(first for pid, first in got.aborted_transactions if pid == P1)
            break
    else:
        pytest.fail("P1's abort never listed")
    holding_first = next(s for s in segments if s.base_offset <= first_offset <= s.last_offset)
    marker_segments = [s for s in segments if s.base_offset > holding_first.last_offset]

    def entries(seg: Seg) -> tuple:
        if not seg.has_txn_index:
            return ()
        return reader.index_cache.txn_index(str(seg.segment_id), key_of(seg, "txnindex")).entries

    assert not any(e.producer_id == P1 for e in entries(holding_first))  # not indexed where it starts...
    assert any(
        e.producer_id == P1 and e.first_offset == first_offset for s in marker_segments for e in entries(s)
    )  # ...but with its marker, in a later segment


def test_offset_for_timestamp_matches_the_local_lookup(tiered) -> None:
    plog, _store, segments, reader = tiered
    remote_max = segments[-1].max_timestamp_ms
    for target in range(9_000, remote_max + 1, 7):
        remote = reader.offset_for_timestamp(segments, 0, target)
        assert remote == plog.offset_for_timestamp(target), target
    assert reader.offset_for_timestamp(segments, 0, remote_max + 1) is None


def test_offset_outside_the_remote_segments(tiered) -> None:
    _plog, _store, segments, reader = tiered
    with pytest.raises(OffsetOutOfRangeError):
        reader.read(segments, segments[-1].last_offset + 1, 100, upper_offset=BIG, min_one=True, with_aborted=False)
    with pytest.raises(OffsetOutOfRangeError):
        reader.read(segments[2:], 0, 100, upper_offset=BIG, min_one=True, with_aborted=False)


# --- damaged objects --------------------------------------------------------------------------------


def test_a_flipped_byte_is_a_crc_error_naming_the_key(tiered, tmp_path: Path) -> None:
    _plog, _store, segments, reader = tiered
    seg = segments[4]
    path = tmp_path / "store" / key_of(seg, "log")
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))

    def read_segment() -> None:
        offset = seg.base_offset
        while offset <= seg.last_offset:  # some batch of the segment holds the flipped byte
            offset = reader.read(segments, offset, 100, upper_offset=BIG, min_one=True, with_aborted=False).next_offset

    with pytest.raises(RemoteStorageError, match=key_of(seg, "log")):
        read_segment()
    # Other segments still read.
    assert reader.read(segments, segments[5].base_offset, 100, upper_offset=BIG, min_one=True, with_aborted=False).chunks


def test_a_truncated_log_object_is_an_error(tiered, tmp_path: Path) -> None:
    _plog, _store, segments, reader = tiered
    seg = segments[2]
    path = tmp_path / "store" / key_of(seg, "log")
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(RemoteStorageError, match="ends inside"):
        reader.read(segments, seg.last_offset, BIG // 2, upper_offset=BIG, min_one=True, with_aborted=False)


@pytest.mark.parametrize("suffix", ["index", "log"])
def test_a_missing_object_is_a_remote_storage_error(tiered, suffix: str) -> None:
    _plog, store, segments, reader = tiered
    seg = segments[6]
    store.delete(key_of(seg, suffix))
    with pytest.raises(RemoteObjectNotFoundError):
        reader.read(segments, seg.base_offset, 100, upper_offset=BIG, min_one=True, with_aborted=False)


def test_a_truncated_index_is_an_error(tiered, tmp_path: Path) -> None:
    _plog, _store, segments, reader = tiered
    seg = next(s for s in segments if (tmp_path / "store" / key_of(s, "index")).stat().st_size > 8)
    path = tmp_path / "store" / key_of(seg, "index")
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(RemoteStorageError, match="truncated"):
        reader.read(segments, seg.last_offset, 100, upper_offset=BIG, min_one=True, with_aborted=False)


# --- index cache --------------------------------------------------------------------------------------


def test_index_cache_fetches_once_and_stays_within_its_byte_bound(tiered) -> None:
    _plog, store, segments, _reader = tiered
    sizes = [store.size(key_of(s, "index")) for s in segments]
    bound = sum(sizes[:3]) + 3 * 64  # room for about three offset indexes
    cache = RemoteIndexCache(store.get, bound)
    reader = RemoteLogReader(store, cache, key_of)
    store.gets.clear()
    for _ in range(3):
        reader.read(segments, segments[0].base_offset, 100, upper_offset=BIG, min_one=True, with_aborted=False)
    assert store.gets == [key_of(segments[0], "index")]  # one GET, then hits
    for seg in segments:
        reader.read(segments, seg.base_offset, 100, upper_offset=BIG, min_one=True, with_aborted=False)
        assert cache.size_bytes <= bound
    assert len(cache) < len(segments)
    store.gets.clear()
    reader.read(segments, segments[0].base_offset, 100, upper_offset=BIG, min_one=True, with_aborted=False)
    assert store.gets == [key_of(segments[0], "index")]  # the least recently used went first


def test_segments_without_txnindex_are_not_asked_for_one(tiered) -> None:
    _plog, store, segments, reader = tiered
    without = [s for s in segments if not s.has_txn_index]
    assert without
    assert any(s.has_txn_index for s in segments)
    store.gets.clear()
    for seg in segments:
        reader.read(segments, seg.base_offset, 100, upper_offset=BIG, min_one=True, with_aborted=True)
    fetched = {key for key in store.gets if key.endswith(".txnindex")}
    assert fetched
    assert not fetched & {key_of(s, "txnindex") for s in without}


def test_a_missing_txnindex_the_metadata_announces_is_an_error(tiered) -> None:
    _plog, store, segments, reader = tiered
    seg = next(s for s in segments if s.has_txn_index)
    store.delete(key_of(seg, "txnindex"))
    with pytest.raises(RemoteObjectNotFoundError):
        reader.read(segments, seg.base_offset, BIG // 2, upper_offset=BIG, min_one=True, with_aborted=True)


def test_an_index_out_of_order_is_an_error(tiered, tmp_path: Path) -> None:
    _plog, _store, segments, reader = tiered
    seg = next(s for s in segments if (tmp_path / "store" / key_of(s, "index")).stat().st_size >= 16)
    path = tmp_path / "store" / key_of(seg, "index")
    raw = path.read_bytes()
    path.write_bytes(raw[8:16] + raw[0:8] + raw[16:])  # the first two entries swapped
    with pytest.raises(RemoteStorageError, match="damaged"):
        reader.read(segments, seg.last_offset, 100, upper_offset=BIG, min_one=True, with_aborted=False)
