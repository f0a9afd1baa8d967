"""Materializer: keeps a ``StateStore`` equal to a prefix of a changelog topic (issue 13, part 2).

It reads the changelog read_committed from the offsets stored *in the store* (no consumer
group: the store's own commit is the only record of progress), applies every record (a null
value deletes the key) and commits the store with the next offsets every ``commit_interval_ms``,
whenever the pending writes reach ``statestore.uncommitted.max.bytes``, and on shutdown. Data and
offsets are committed in one atomic batch, so after a SIGKILL it resumes exactly where its last
commit stopped and re-reads at most one uncommitted window.

Partitions: every partition of the topic is materialized into the one store; a periodic metadata
check (``metadata_interval_ms``) picks up partitions added to the topic.

A changelog that went backwards (a stored offset above the partition's high watermark or below
its log start, a stored partition the topic no longer has: topic deleted and recreated) is
detected at start and on OFFSET_OUT_OF_RANGE: the store is wiped and rebuilt from the beginning,
with a warning.

Sans-io core: the clock (``clock_ms``) and the changelog (``ChangelogSource``) are injected; the
loop is driven by ``step``. ``main`` wires it to Kafka for ``python -m oncestream.state.materializer``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from oncestream.state.errors import StoreFailedError
from oncestream.state.source import (
    ChangelogOffsetOutOfRangeError,
    ChangelogSource,
    KafkaChangelogSource,
    TopicPartition,
)
from oncestream.state.store import (
    DEFAULT_UNCOMMITTED_MAX_BYTES,
    FaultHook,
    StateStore,
)

log = logging.getLogger(__name__)

DEFAULT_COMMIT_INTERVAL_MS = 1000
DEFAULT_METADATA_INTERVAL_MS = 5000
DEFAULT_POLL_MAX_RECORDS = 500

EventSink = Callable[[dict[str, Any]], None]


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def _offsets_json(offsets: dict[TopicPartition, int]) -> dict[str, int]:
    return {f"{t}:{p}": o for (t, p), o in sorted(offsets.items())}


class Materializer:
    """Materializes ``topic`` into the store at ``store_dir`` (see the module docstring)."""

    def __init__(self, store_dir: str | os.PathLike[str], topic: str, source: ChangelogSource, *,
                 commit_interval_ms: int = DEFAULT_COMMIT_INTERVAL_MS,
                 metadata_interval_ms: int = DEFAULT_METADATA_INTERVAL_MS,
                 uncommitted_max_bytes: int = DEFAULT_UNCOMMITTED_MAX_BYTES,
                 poll_max_records: int = DEFAULT_POLL_MAX_RECORDS,
                 clock_ms: Callable[[], int] = _monotonic_ms,
                 events: EventSink | None = None,
                 fault_hook: FaultHook | None = None) -> None:
        self.store_dir = Path(store_dir)
        self.topic = topic
        self._source = source
        self._commit_interval_ms = commit_interval_ms
        self._metadata_interval_ms = metadata_interval_ms
        self._uncommitted_max_bytes = uncommitted_max_bytes
        self._poll_max_records = poll_max_records
        self._clock_ms = clock_ms
        self._emit = events or (lambda event: None)
        self._fault_hook = fault_hook
        self.store: StateStore | None = None
        # Next offset per partition covering every record applied to the store (pending or not).
        self._positions: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._next_commit_ms = 0
        self._next_metadata_ms = 0
        self.applied_records = 0   # records applied since start (puts and deletes)
        self.skipped_records = 0   # records without a key (a changelog record needs one)
        self.rebuilds = 0

    # --- start ---------------------------------------------------------------------------------

    def _open_store(self) -> StateStore:
        return StateStore(self.store_dir, uncommitted_max_bytes=self._uncommitted_max_bytes,
                          fault_hook=self._fault_hook)

    def start(self) -> None:
        """Open the store, check its offsets against the changelog (rebuild if it went
        backwards), and assign every partition from its stored offset."""
        self.store = self._open_store()
        stored = self.store.committed_offsets()
        count = self._source.partition_count(self.topic)
        reason = self._changelog_regression(stored, count)
        if reason is not None:
            self._rebuild(reason)
            stored = {}
        self._committed = dict(stored)
        self._positions = dict(stored)
        self._emit({"event": "started", "offsets": _offsets_json(stored), "partitions": count})
        # Every ListOffsets before the first assignment: once fetches are in flight, one waits
        # behind a fetch the broker holds for fetch.wait.max.ms.
        new = self._new_partition_starts(count)
        if stored:
            self._source.assign(stored)
        self._assign_new(new)
        now = self._clock_ms()
        self._next_commit_ms = now + self._commit_interval_ms
        self._next_metadata_ms = now + self._metadata_interval_ms

    def _changelog_regression(self, stored: dict[TopicPartition, int], count: int) -> str | None:
        for (topic, partition), _offset in sorted(stored.items()):
            if topic != self.topic:
                return f"store holds offsets of another topic {topic!r}"
            if partition >= count:
                return f"{topic}[{partition}] is in the store but the topic has {count} partitions"
        marks = self._source.watermarks(self.topic, sorted(p for _t, p in stored))
        for (topic, partition), offset in sorted(stored.items()):
            low, high = marks[partition]
            # A stored offset is a read_committed position, never past the LSO it was read
            # under, and the LSO never moves back: being past it means a different log.
            if offset > high:
                return f"{topic}[{partition}]: stored offset {offset} is past the log's end {high}"
            if offset < low:
                return f"{topic}[{partition}]: stored offset {offset} is before the log start {low}"
        return None

    def _rebuild(self, reason: str) -> None:
        """Wipe the store and start it empty: the changelog it mirrored is gone."""
        log.warning("state store %s: changelog %s went backwards (%s); rebuilding from the beginning",
                    self.store_dir, self.topic, reason)
        self._emit({"event": "rebuild", "reason": reason})
        if self.store is None:
            raise StoreFailedError("no open store to rebuild")
        self.store.close()
        StateStore.destroy(self.store_dir)
        self.store = self._open_store()
        self._committed = {}
        self._positions = {}
        self.rebuilds += 1

    def _new_partition_starts(self, count: int) -> dict[TopicPartition, int]:
        """Log start offsets of the topic's partitions not read yet."""
        missing = [p for p in range(count) if (self.topic, p) not in self._positions]
        marks = self._source.watermarks(self.topic, missing)
        return {(self.topic, p): marks[p][0] for p in missing}

    def _assign_new(self, new: dict[TopicPartition, int]) -> None:
        if new:
            self._positions.update(new)
            self._source.assign(new)
            self._emit({"event": "assigned", "offsets": _offsets_json(new)})

    def _add_partitions(self, count: int) -> None:
        self._assign_new(self._new_partition_starts(count))

    # --- loop ----------------------------------------------------------------------------------

    def step(self, timeout_s: float = 0.1) -> int:
        """Poll once, apply what came, commit when due; returns the number of records applied."""
        store = self.store
        if store is None:
            raise StoreFailedError("start() the materializer first")
        now = self._clock_ms()
        if now >= self._next_metadata_ms:
            self._next_metadata_ms = now + self._metadata_interval_ms
            self._add_partitions(self._source.partition_count(self.topic))
        try:
            chunks = self._source.poll(self._poll_max_records, timeout_s)
        except ChangelogOffsetOutOfRangeError as exc:
            # The log lost the offset we read from while running (topic recreated): rebuild now
            # and read every partition again from its start.
            self._rebuild(str(exc))
            self._add_partitions(self._source.partition_count(self.topic))
            return 0
        # Bulk path: one apply_columns per chunk (a partition's fetched records as key and value
        # lists); it stops when statestore.uncommitted.max.bytes is reached, we commit (this
        # partition's position from the records applied so far) and go on.
        applied = 0
        positions = self._positions
        for chunk in chunks:
            n = len(chunk)
            tp = (chunk.topic, chunk.partition)
            done = 0
            while done < n:
                upto, skipped = store.apply_columns(chunk.keys, chunk.values, done)
                self.skipped_records += skipped
                self.applied_records += upto - done
                if upto < n or store.commit_needed:
                    if upto > 0:
                        positions[tp] = max(positions.get(tp, -1), chunk.offsets[upto - 1] + 1)
                    self.commit()
                done = upto
            applied += n
            if chunk.next_offset > positions.get(tp, -1):
                positions[tp] = chunk.next_offset
        # The source's positions also step over aborted records and transaction markers.
        for tp, position in self._source.positions().items():
            if position > self._positions.get(tp, -1):
                self._positions[tp] = position
        if self._clock_ms() >= self._next_commit_ms:
            self.commit()
        return applied

    def commit(self) -> None:
        """Commit the pending writes with the current positions (if anything moved)."""
        store = self.store
        if store is None:
            raise StoreFailedError("start() the materializer first")
        self._next_commit_ms = self._clock_ms() + self._commit_interval_ms
        if store.uncommitted_count == 0 and self._positions == self._committed:
            return
        offsets = dict(self._positions)
        self._emit({"event": "commit-begin", "offsets": _offsets_json(offsets),
                    "applied": self.applied_records, "pending": store.uncommitted_count})
        store.commit(offsets)
        self._committed = offsets
        self._emit({"event": "committed", "offsets": _offsets_json(offsets), "applied": self.applied_records})

    def positions(self) -> dict[TopicPartition, int]:
        """Next offset per partition covering every applied record."""
        return dict(self._positions)

    def committed_offsets(self) -> dict[TopicPartition, int]:
        """Offsets of the last commit."""
        return dict(self._committed)

    def close(self) -> None:
        """Commit what was applied, then close the store and the source."""
        try:
            if self.store is not None:
                try:
                    self.commit()
                finally:
                    self.store.close()  # even after a failed commit: release the directory
                self._emit({"event": "closed", "applied": self.applied_records})
        finally:
            self._source.close()


# --- entry point -----------------------------------------------------------------------------

def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m oncestream.state.materializer",
                                     description="Materialize a changelog topic into a state store.")
    parser.add_argument("--bootstrap-server", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--commit-interval-ms", type=int, default=DEFAULT_COMMIT_INTERVAL_MS)
    parser.add_argument("--metadata-interval-ms", type=int, default=DEFAULT_METADATA_INTERVAL_MS)
    parser.add_argument("--uncommitted-max-bytes", type=int, default=DEFAULT_UNCOMMITTED_MAX_BYTES,
                        help="statestore.uncommitted.max.bytes")
    parser.add_argument("--poll-max-records", type=int, default=DEFAULT_POLL_MAX_RECORDS)
    parser.add_argument("--events-file", help="append one JSON line per start/commit/rebuild event")
    parser.add_argument("--stop-when-caught-up", action="store_true",
                        help="commit and exit once every partition reached the end (LSO) seen at start")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None, *, fault_hook: FaultHook | None = None) -> int:
    """Run a materializer until SIGTERM/SIGINT (or until caught up), committing on the way out.
    ``fault_hook`` is the store's commit observer (store.COMMIT_FAULT_POINTS), injected by a
    caller running this entry from Python; none from the command line."""
    args = _parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    events_file = open(args.events_file, "a", buffering=1) if args.events_file else None  # noqa: SIM115

    def emit(event: dict[str, Any]) -> None:
        if events_file is not None:
            # Line-buffered: the line is in the kernel before the next step, so it survives SIGKILL.
            events_file.write(json.dumps(event) + "\n")

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    source = KafkaChangelogSource(args.bootstrap_server)
    materializer = Materializer(
        args.state_dir, args.topic, source,
        commit_interval_ms=args.commit_interval_ms, metadata_interval_ms=args.metadata_interval_ms,
        uncommitted_max_bytes=args.uncommitted_max_bytes, poll_max_records=args.poll_max_records,
        events=emit, fault_hook=fault_hook)
    try:
        targets = None
        if args.stop_when_caught_up:
            # Before start() assigns the partitions: once fetches are in flight, a ListOffsets
            # request on the same connection waits behind a fetch the broker holds for
            # fetch.wait.max.ms (Kafka answers one request per connection at a time), which
            # cost a recovering process two such waits, about 1 s (bench/state_store.py).
            count = source.partition_count(args.topic)
            marks = source.watermarks(args.topic, list(range(count)))
            targets = {(args.topic, p): end for p, (_low, end) in marks.items()}
        materializer.start()
        while not stop.is_set():
            materializer.step(0.2)
            if targets is not None:
                positions = materializer.positions()
                if all(positions.get(tp, 0) >= high for tp, high in targets.items()):
                    break
    finally:
        materializer.close()
        emit({"event": "exit"})
        if events_file is not None:
            events_file.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
