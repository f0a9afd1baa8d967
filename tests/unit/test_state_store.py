"""KIP-892 transactional state store: writes stay pending until commit(offsets), which makes data
and changelog offsets durable together; readers at read_committed / read_uncommitted."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from oncestream.state import (
    CommitFailedError,
    OffsetRegressionError,
    StateStore,
    StoreFailedError,
    StoreLockedError,
    UncommittedLimitError,
    WriteBatch,
)


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


def test_writer_reads_merge_pending_writes_over_committed_data_in_key_order(store_dir: Path) -> None:
    with StateStore(store_dir) as store:
        for key in (b"a", b"b", b"c", b"d"):
            store.put(key, b"old-" + key)
        store.commit({("t", 0): 4})
        store.put(b"b", b"new-b")      # shadows a committed key
        store.delete(b"c")             # hides a committed key
        store.put(b"bb", b"new-bb")    # a new key between committed ones
        store.delete(b"zz")            # deleting an absent key is harmless
        assert list(store.range()) == [
            (b"a", b"old-a"), (b"b", b"new-b"), (b"bb", b"new-bb"), (b"d", b"old-d")]
        assert list(store.range(b"b", b"d")) == [(b"b", b"new-b"), (b"bb", b"new-bb")]
        assert list(store.prefix(b"b")) == [(b"b", b"new-b"), (b"bb", b"new-bb")]
        assert store.get(b"c") is None
        assert store.get(b"b") == b"new-b"


def test_prefix_scan_of_a_prefix_ending_in_0xff(store_dir: Path) -> None:
    with StateStore(store_dir) as store:
        store.put(b"a\xff", b"1")
        store.put(b"a\xff\x00", b"2")
        store.put(b"b", b"3")
        store.commit()
        store.put(b"a\xff\xff", b"4")
        assert [k for k, _ in store.prefix(b"a\xff")] == [b"a\xff", b"a\xff\x00", b"a\xff\xff"]
        assert [k for k, _ in store.prefix(b"\xff")] == []


def test_commit_is_durable_and_uncommitted_writes_are_gone_after_reopen(store_dir: Path) -> None:
    store = StateStore(store_dir)
    store.put(b"k1", b"v1")
    store.commit({("changelog", 0): 10, ("changelog", 1): 3})
    store.put(b"k2", b"v2")
    store.delete(b"k1")
    store.close()  # without commit: as after a crash, the pending writes are lost
    with StateStore(store_dir) as reopened:
        assert list(reopened.range()) == [(b"k1", b"v1")]
        assert reopened.committed_offsets() == {("changelog", 0): 10, ("changelog", 1): 3}


def test_commit_merges_offsets_and_refuses_a_lower_offset(store_dir: Path) -> None:
    with StateStore(store_dir) as store:
        store.commit({("t", 0): 5})
        store.commit({("t", 1): 2})
        assert store.committed_offsets() == {("t", 0): 5, ("t", 1): 2}
        store.put(b"x", b"1")
        with pytest.raises(OffsetRegressionError):
            store.commit({("t", 0): 4})
        # nothing was written; the pending write is still pending
        assert store.reader().get(b"x") is None
        assert store.get(b"x") == b"1"


def test_read_committed_never_sees_pending_writes_read_uncommitted_does(store_dir: Path) -> None:
    with StateStore(store_dir) as store:
        committed = store.reader("read_committed")
        uncommitted = store.reader("read_uncommitted")
        store.put(b"k", b"v")
        assert committed.get(b"k") is None
        assert list(committed.range()) == []
        assert uncommitted.get(b"k") == b"v"
        assert list(uncommitted.prefix(b"k")) == [(b"k", b"v")]
        store.commit({("t", 0): 1})
        # a read_committed reader stays at its commit until refreshed
        assert committed.get(b"k") is None
        committed.refresh()
        assert committed.get(b"k") == b"v"
        assert committed.committed_offsets() == {("t", 0): 1}


def test_read_committed_reader_sees_one_commit_even_across_later_commits(store_dir: Path) -> None:
    """A reader that reads half a batch, then (after a commit) the other half, still sees one
    state: everything through a reader comes from the iterator pinned at its creation."""
    keys = [b"k%03d" % i for i in range(100)]
    with StateStore(store_dir) as store:
        for key in keys:
            store.put(key, b"0")
        store.commit({("t", 0): 1})
        reader = store.reader()
        scan = reader.range()
        first_half = [next(scan) for _ in range(50)]
        for key in keys:
            store.put(key, b"1")
        store.commit({("t", 0): 2})
        # point reads on the same reader in the middle of the scan
        assert {reader.get(k) for k in keys} == {b"0"}
        rest = list(scan)
        values = {v for _, v in first_half + rest}
        assert [k for k, _ in first_half + rest] == keys
        assert values == {b"0"}
        assert reader.committed_offsets() == {("t", 0): 1}


def test_readers_racing_with_commits_see_whole_batches(store_dir: Path) -> None:
    """Every commit sets all 50 keys to the commit number and the offset to it; a reader on
    another thread must always see 50 equal values matching its offset."""
    keys = [b"k%02d" % i for i in range(50)]
    store = StateStore(store_dir)
    for key in keys:
        store.put(key, b"0")
    store.commit({("t", 0): 0})
    stop = threading.Event()
    seen: list[tuple[set[bytes | None], dict[tuple[str, int], int]]] = []

    def read() -> None:
        while not stop.is_set():
            reader = store.reader()
            values = {reader.get(k) for k in keys[::2]} | {v for _, v in reader.range()}
            seen.append((values, reader.committed_offsets()))
            reader.close()

    thread = threading.Thread(target=read)
    thread.start()
    try:
        for n in range(1, 200):
            for key in keys:
                store.put(key, str(n).encode())
            store.commit({("t", 0): n})
    finally:
        stop.set()
        thread.join()
    store.close()
    assert seen
    for values, offsets in seen:
        assert len(values) == 1, values
        assert values == {str(offsets[("t", 0)]).encode()}


def test_uncommitted_bound_asks_for_a_commit_once_and_hard_limit_refuses_writes(store_dir: Path) -> None:
    asked: list[int] = []
    with StateStore(store_dir, uncommitted_max_bytes=1000, on_commit_needed=lambda: asked.append(1)) as store:
        value = b"x" * 84  # 84 + 2-byte key + 16 overhead = 102 bytes per entry
        for i in range(9):
            store.put(b"%02d" % i, value)
        assert not store.commit_needed
        assert asked == []
        store.put(b"09", value)
        assert store.commit_needed
        assert asked == [1]
        for i in range(10, 19):
            store.put(b"%02d" % i, value)
        assert asked == [1]  # signalled once per window
        with pytest.raises(UncommittedLimitError):
            store.put(b"19", value)  # 20 x 102 > 2 x 1000
        assert store.get(b"19") is None
        store.commit()
        assert not store.commit_needed
        assert store.uncommitted_bytes == 0
        store.put(b"19", value)
        assert store.uncommitted_bytes == 102


def test_write_batch_is_all_or_nothing_at_the_hard_limit(store_dir: Path) -> None:
    with StateStore(store_dir, uncommitted_max_bytes=100) as store:
        batch = WriteBatch().put(b"a", b"1").delete(b"b").put(b"a", b"2")
        store.write(batch)
        assert store.get(b"a") == b"2"
        assert store.uncommitted_count == 2
        big = WriteBatch().put(b"c", b"y" * 50).put(b"d", b"y" * 150)
        with pytest.raises(UncommittedLimitError):
            store.write(big)
        assert store.get(b"c") is None
        assert store.uncommitted_count == 2


def test_failed_commit_keeps_previous_commit_and_poisons_the_store(store_dir: Path) -> None:
    """A full disk during commit (injected at the RocksDB write): CommitFailedError, the store
    refuses further use, and reopening gives exactly the previous commit."""
    armed = threading.Event()

    def disk_full(point: str) -> None:
        if point == "write" and armed.is_set():
            raise OSError(28, "No space left on device")

    store = StateStore(store_dir, fault_hook=disk_full)
    store.put(b"a", b"1")
    store.commit({("t", 0): 1})
    store.put(b"a", b"2")
    store.put(b"b", b"2")
    armed.set()
    with pytest.raises(CommitFailedError, match="No space left"):
        store.commit({("t", 0): 2})
    with pytest.raises(StoreFailedError):
        store.put(b"c", b"3")
    with pytest.raises(StoreFailedError):
        store.commit({("t", 0): 3})
    store.close()
    with StateStore(store_dir) as reopened:
        assert list(reopened.range()) == [(b"a", b"1")]
        assert reopened.committed_offsets() == {("t", 0): 1}


def test_second_open_of_the_same_directory_is_refused(store_dir: Path) -> None:
    with StateStore(store_dir), pytest.raises(StoreLockedError):
        StateStore(store_dir)


def test_close_releases_the_directory_even_with_readers_and_scans_alive(store_dir: Path) -> None:
    store = StateStore(store_dir)
    store.put(b"a", b"1")
    store.commit()
    reader = store.reader()
    scan = store.range()
    assert next(scan) == (b"a", b"1")
    assert reader.get(b"a") == b"1"
    del scan  # a finished or dropped writer scan releases its iterator
    store.close()
    with pytest.raises(StoreFailedError):
        reader.get(b"a")  # a typed error, not a crash, on a reader of a closed store
    with pytest.raises(StoreFailedError):
        store.get(b"a")
    with StateStore(store_dir) as again:
        assert again.get(b"a") == b"1"


def test_put_many_applies_in_order_skips_null_keys_and_stops_at_the_bound(store_dir: Path) -> None:
    """The materializer's bulk path: same results as put/delete one by one, and it returns as
    soon as statestore.uncommitted.max.bytes is reached so the caller can commit mid-poll."""
    with StateStore(store_dir, uncommitted_max_bytes=300) as store:
        store.put(b"gone", b"x")
        store.commit()
        pairs = [(b"a", b"1"), (None, b"no key"), (b"gone", None), (b"a", b"2"),
                 (b"b", b"y" * 200), (b"c", b"3"), (b"d", b"4")]
        upto, skipped = store.put_many(pairs)
        # a 18 + tombstone of gone 20 + a again (same size) + b 217 + c 18 + d 18 = 291 < 300
        assert (upto, skipped) == (7, 1)
        assert not store.commit_needed
        assert list(store.range()) == [(b"a", b"2"), (b"b", b"y" * 200), (b"c", b"3"), (b"d", b"4")]
        more = [(b"e", b"5"), (b"f", b"6"), (b"g", b"7")]
        upto, skipped = store.put_many(more)
        assert upto == 1
        assert store.commit_needed
        store.commit()
        upto, _ = store.put_many(more, upto)
        assert upto == 3
        assert store.get(b"g") == b"7"


def test_put_many_refuses_an_entry_past_the_hard_limit_and_keeps_the_ones_before(store_dir: Path) -> None:
    with StateStore(store_dir, uncommitted_max_bytes=100) as store:
        with pytest.raises(UncommittedLimitError):
            store.put_many([(b"a", b"1"), (b"big", b"z" * 300)])
        assert store.get(b"a") == b"1"
        assert store.get(b"big") is None
        assert store.uncommitted_bytes == 18
        with pytest.raises(TypeError):
            store.put_many([("text-key", b"v")])  # type: ignore[list-item]


def _wal_bytes(store_dir: Path) -> int:
    return sum(f.stat().st_size for f in (store_dir / "rocksdb").glob("*.log"))


def test_committed_bytes_flush_both_column_families_so_the_wal_stays_bounded(store_dir: Path) -> None:
    """Recovery after a crash replays the WAL since the last flush. The offsets column family
    gets a few bytes per commit and never fills its memtable: unless it is flushed with the data,
    it pins every WAL file ever written and a crash replays the store's whole history."""
    with StateStore(store_dir, flush_after_bytes=256 * 1024) as store:
        for n in range(40):
            for i in range(100):
                store.put(b"k%02d-%03d" % (n, i), b"x" * 1000)
            store.commit({("t", 0): n + 1})
        assert _wal_bytes(store_dir) > 0
        # Flushes run on RocksDB's background thread; the loop is a hang guard, not a timing
        # assertion: without the offsets flush the WAL stays at ~4 MB forever.
        deadline = time.monotonic() + 60
        while _wal_bytes(store_dir) > 1024 * 1024 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _wal_bytes(store_dir) <= 1024 * 1024
    with StateStore(store_dir) as reopened:
        assert reopened.committed_offsets() == {("t", 0): 40}
        assert sum(1 for _ in reopened.range()) == 4000


def test_apply_messages_reads_kafka_shaped_records_like_put_many(store_dir: Path) -> None:
    from oncestream.state.source import ChangelogRecord

    messages = [ChangelogRecord("t", 0, 0, b"a", b"1"), ChangelogRecord("t", 0, 1, None, b"x"),
                ChangelogRecord("t", 0, 2, b"b", b"2"), ChangelogRecord("t", 0, 3, b"a", None)]
    with StateStore(store_dir) as store:
        assert store.apply_messages(messages) == (4, 1)
        assert list(store.range()) == [(b"b", b"2")]


def test_overwrites_do_not_grow_the_pending_write_batch_without_bound(store_dir: Path) -> None:
    """Writes go into the commit's RocksDB WriteBatch as they are applied, overwrites included;
    once overwrites make it hold more than twice the pending entries (+ 1 MiB) it is rebuilt from
    the index, so its memory follows statestore.uncommitted.max.bytes, and the commit still
    stores the last write of each key."""
    value_bytes = 100
    with StateStore(store_dir) as store:
        for i in range(30_000):  # ~3.5 MB of writes to two keys
            store.put(b"hot", b"%06d" % i + b"v" * (value_bytes - 6))
            if i % 1000 == 0:
                store.delete(b"flapping")
            else:
                store.put_many([(b"flapping", b"x" * value_bytes)])
            assert store.uncommitted_batch_bytes <= 2 * store.uncommitted_bytes + (1 << 20) + 2 * (value_bytes + 64)
        assert store.uncommitted_count == 2
        store.commit({("t", 0): 30_000})
        assert store.uncommitted_batch_bytes < 64  # a new, empty batch (RocksDB's 12-byte header)
    with StateStore(store_dir) as reopened:
        assert reopened.get(b"hot") == b"029999" + b"v" * (value_bytes - 6)
        assert reopened.get(b"flapping") == b"x" * value_bytes
        assert reopened.committed_offsets() == {("t", 0): 30_000}


def test_apply_columns_in_bulk_gives_the_same_store_as_put_and_delete_one_by_one(store_dir, tmp_path):
    """The materializer's column path: keys and values as two lists, tombstones delete, null keys
    are skipped, later writes of a key win; committed data equals applying the writes singly."""
    import random

    rng = random.Random(892)
    # Null keys in the first chunk only: the others take the bulk path, tombstones included.
    keys: list[bytes | None] = [None if i < 500 and rng.random() < 0.05 else b"k%03d" % rng.randrange(200)
                                for i in range(2000)]
    values: list[bytes | None] = [None if rng.random() < 0.2 else rng.randbytes(rng.randrange(50)) for _ in keys]
    with StateStore(store_dir) as bulk, StateStore(tmp_path / "single") as single:
        bulk.put(b"k000", b"committed before")
        bulk.commit()
        single.put(b"k000", b"committed before")
        single.commit()
        for lo in range(0, len(keys), 500):  # four chunks, as four fetch responses
            ks, vs = keys[lo:lo + 500], values[lo:lo + 500]
            assert bulk.apply_columns(ks, vs) == (len(ks), ks.count(None))
            for k, v in zip(ks, vs, strict=True):
                if k is None:
                    continue
                single.delete(k) if v is None else single.put(k, v)
        assert list(bulk.range()) == list(single.range())  # the writer's view, pending index sorted
        assert bulk.get(b"k001") == single.get(b"k001")
        # Every write counted in full: an upper bound of the entries' bytes (here strictly above: the bulk path ran).
        assert bulk.uncommitted_bytes > single.uncommitted_bytes
        bulk.commit({("t", 0): len(keys)})
        single.commit({("t", 0): len(keys)})
        assert list(bulk.reader().range()) == list(single.reader().range())


def test_apply_columns_stops_right_after_the_write_that_reaches_the_bound(store_dir: Path) -> None:
    """statestore.uncommitted.max.bytes inside a chunk: the entry-by-entry path takes over and
    returns the index after the write that reached it, so the caller commits mid-chunk."""
    with StateStore(store_dir, uncommitted_max_bytes=100) as store:
        keys: list[bytes | None] = [b"a", b"b", b"c", b"d", b"e", b"f"]
        values: list[bytes | None] = [b"x" * 20] * 6
        upto, skipped = store.apply_columns(keys, values)
        assert (upto, skipped) == (3, 0)
        assert store.commit_needed
        store.commit()
        assert store.apply_columns(keys, values, upto) == (6, 0)
        assert [k for k, _ in store.range()] == keys
        with pytest.raises(UncommittedLimitError):
            store.apply_columns([b"big"], [b"z" * 300])
        with pytest.raises(TypeError):
            store.apply_columns(["text-key"], [b"v"])  # type: ignore[list-item]
        assert store.get(b"big") is None
