"""Materializer core (issue 13, part 2) driven by an in-memory changelog and an injected clock:
tombstones delete, commits every commit.interval.ms / at statestore.uncommitted.max.bytes / on
close, resume from the store's own offsets, new partitions picked up, a changelog that went
backwards rebuilds the store with a warning."""

from __future__ import annotations

import logging

import pytest

from oncestream.state import CommitFailedError, StateStore
from oncestream.state.materializer import Materializer
from oncestream.state.source import ChangelogColumns, ChangelogOffsetOutOfRangeError, ChangelogRecord, chunks_of
from tests.support.narrow import present

TOPIC = "changelog"


class FakeChangelog:
    """In-memory changelog: partition -> list of (key, value); offsets are list indexes."""

    def __init__(self, partitions: int = 1) -> None:
        self.logs: dict[int, list[tuple[bytes | None, bytes | None]]] = {p: [] for p in range(partitions)}
        self.log_start: dict[int, int] = {}
        self.pos: dict[tuple[str, int], int] = {}
        self.polled = 0
        self.closed = False

    def append(self, partition: int, key: bytes | None, value: bytes | None) -> None:
        self.logs[partition].append((key, value))

    def partition_count(self, topic: str) -> int:
        return len(self.logs) if topic == TOPIC else 0

    def watermarks(self, topic: str, partitions: list[int]) -> dict[int, tuple[int, int]]:
        return {p: (self.log_start.get(p, 0), len(self.logs[p])) for p in partitions}

    def assign(self, starts):
        self.pos.update(starts)

    def poll(self, max_records: int, timeout_s: float) -> list[ChangelogColumns]:
        out: list[ChangelogRecord] = []
        for (topic, partition), offset in sorted(self.pos.items()):
            log = self.logs[partition]
            if offset > len(log) or offset < self.log_start.get(partition, 0):
                raise ChangelogOffsetOutOfRangeError(f"offset out of range for {topic}[{partition}]")
            while offset < len(log) and len(out) < max_records:
                key, value = log[offset]
                out.append(ChangelogRecord(topic, partition, offset, key, value))
                offset += 1
            self.pos[(topic, partition)] = offset
        self.polled += len(out)
        return chunks_of(out)

    def positions(self):
        return dict(self.pos)

    def close(self) -> None:
        self.closed = True


class Clock:
    def __init__(self) -> None:
        self.now_ms = 0

    def __call__(self) -> int:
        return self.now_ms


def _materializer(tmp_path, source, clock, **kw) -> Materializer:
    kw.setdefault("commit_interval_ms", 1000)
    kw.setdefault("metadata_interval_ms", 5000)
    m = Materializer(tmp_path / "store", TOPIC, source, clock_ms=clock, **kw)
    m.start()
    return m


def _store_contents(tmp_path):
    with StateStore(tmp_path / "store") as store:
        return dict(store.range()), store.committed_offsets()


def test_applies_puts_and_tombstones_and_commits_on_the_interval(tmp_path):
    source, clock = FakeChangelog(), Clock()
    for i in range(10):
        source.append(0, b"k%d" % (i % 4), b"v%d" % i)
    source.append(0, b"k0", None)  # tombstone
    source.append(0, None, b"no key")  # skipped, but its offset is consumed
    m = _materializer(tmp_path, source, clock)
    assert m.step() == 12
    assert m.committed_offsets() == {}  # interval not reached: nothing committed yet
    reader = present(m.store, "materializer store").reader()
    assert reader.get(b"k1") is None  # read_committed: not yet
    assert present(m.store, "materializer store").get(b"k1") == b"v9"
    clock.now_ms = 1000
    m.step()
    assert m.committed_offsets() == {(TOPIC, 0): 12}
    assert m.skipped_records == 1
    present(m.store, "materializer store").close()
    assert _store_contents(tmp_path) == ({b"k1": b"v9", b"k2": b"v6", b"k3": b"v7"}, {(TOPIC, 0): 12})


def test_uncommitted_bound_forces_commits_inside_a_poll(tmp_path):
    source, clock = FakeChangelog(), Clock()
    for i in range(100):
        source.append(0, b"k%03d" % i, b"x" * 80)  # 4 + 80 + 16 = 100 bytes pending each
    m = _materializer(tmp_path, source, clock, uncommitted_max_bytes=1000, commit_interval_ms=10**9)
    m.step()
    assert present(m.store, "materializer store").commits == 10
    assert m.committed_offsets() == {(TOPIC, 0): 100}


def test_close_commits_and_restart_resumes_from_the_stored_offsets(tmp_path):
    source, clock = FakeChangelog(2), Clock()
    for i in range(30):
        source.append(i % 2, b"k%d" % i, b"v%d" % i)
    m = _materializer(tmp_path, source, clock)
    m.step()
    m.close()
    assert source.closed
    for i in range(30, 40):
        source.append(i % 2, b"k%d" % i, b"v%d" % i)
    again = FakeChangelog(2)
    again.logs = source.logs
    m2 = _materializer(tmp_path, again, clock)
    m2.step()
    assert m2.applied_records == 10
    assert again.polled == 10
    m2.close()
    data, offsets = _store_contents(tmp_path)
    assert offsets == {(TOPIC, 0): 20, (TOPIC, 1): 20}
    assert data == {b"k%d" % i: b"v%d" % i for i in range(40)}


def test_partitions_added_to_the_topic_are_picked_up_at_the_metadata_check(tmp_path):
    source, clock = FakeChangelog(1), Clock()
    source.append(0, b"a", b"1")
    m = _materializer(tmp_path, source, clock, metadata_interval_ms=5000)
    m.step()
    source.logs[1] = [(b"b", b"2")]
    clock.now_ms = 4999
    m.step()
    assert present(m.store, "materializer store").get(b"b") is None
    clock.now_ms = 5000
    m.step()  # metadata check assigns partition 1 from its log start
    m.step()
    assert present(m.store, "materializer store").get(b"b") == b"2"
    m.close()
    assert _store_contents(tmp_path)[1] == {(TOPIC, 0): 1, (TOPIC, 1): 1}


@pytest.mark.parametrize("recreated", ["shorter", "fewer-partitions", "log-start-moved"])
def test_changelog_gone_backwards_at_start_rebuilds_with_a_warning(tmp_path, caplog, recreated):
    source, clock = FakeChangelog(2), Clock()
    for i in range(20):
        source.append(i % 2, b"old%d" % i, b"v")
    m = _materializer(tmp_path, source, clock)
    m.step()
    m.close()
    fresh = FakeChangelog(1 if recreated == "fewer-partitions" else 2)
    if recreated == "log-start-moved":
        gone: list[tuple[bytes | None, bytes | None]] = [(b"gone", b"x")] * 15
        fresh.logs = {p: [*gone, (b"new%d" % p, b"v")] for p in range(2)}
        fresh.log_start = {0: 15, 1: 15}
    else:
        fresh.append(0, b"new0", b"v")
    with caplog.at_level(logging.WARNING, logger="oncestream.state.materializer"):
        m2 = _materializer(tmp_path, fresh, clock)
    assert "rebuilding" in caplog.text
    assert m2.rebuilds == 1
    m2.step()
    m2.close()
    data, _offsets = _store_contents(tmp_path)
    assert not any(k.startswith(b"old") for k in data)
    assert b"new0" in data


def test_offset_out_of_range_while_running_rebuilds(tmp_path, caplog):
    source, clock = FakeChangelog(1), Clock()
    for i in range(5):
        source.append(0, b"old%d" % i, b"v")
    m = _materializer(tmp_path, source, clock)
    m.step()
    m.commit()
    source.logs[0] = [(b"new", b"v")]  # recreated under the running materializer
    source.pos[(TOPIC, 0)] = 5
    with caplog.at_level(logging.WARNING):
        m.step()
    assert m.rebuilds == 1
    assert "rebuilding" in caplog.text
    m.step()
    m.close()
    assert _store_contents(tmp_path) == ({b"new": b"v"}, {(TOPIC, 0): 1})


def test_failed_commit_on_close_still_releases_the_store_and_keeps_the_last_commit(tmp_path):
    source, clock = FakeChangelog(), Clock()
    source.append(0, b"a", b"1")
    m = _materializer(tmp_path, source, clock)
    m.step()
    m.commit()
    source.append(0, b"a", b"2")
    m.step()

    def disk_full(point: str) -> None:
        if point == "write":
            raise OSError(28, "No space left on device")

    present(m.store, "materializer store")._fault = disk_full
    with pytest.raises(CommitFailedError):
        m.close()
    assert source.closed
    assert _store_contents(tmp_path) == ({b"a": b"1"}, {(TOPIC, 0): 1})
