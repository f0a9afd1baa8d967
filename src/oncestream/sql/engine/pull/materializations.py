"""``TableMaterializations``: one transactional state store per TABLE, kept by a materializer thread.

Every TABLE of the metastore (``CREATE TABLE`` over a topic, ``CREATE SOURCE TABLE``, ``CREATE
TABLE AS SELECT``) is materialized on every node from its topic, which is the table's changelog:
``oncestream.state.materializer.Materializer`` reads it read_committed (no consumer group, from
the offsets stored in the store) into a KIP-892 ``StateStore`` under
``<state_dir>/tables/<name>``. Each table has its own thread running the materializer's
``step()`` loop: the store and its consumer belong to that thread only; pull queries read
through ``StateStore.reader("read_committed")`` from any thread, which sees whole commits only.

So a pull query sees a row only after (1) its transaction committed on the changelog (the
consumer is read_committed) and (2) the materializer committed the store (every
``commit_interval_ms``). Nothing of an aborted or open transaction is ever visible.

Lag (``DESCRIBE EXTENDED``): ``lag(name)`` asks the broker for the changelog's end offsets (the
last stable offset, what read_committed can reach) when called; the lag of a partition is that
end minus the offset of the store's last commit (what pull queries see). Transaction markers
count as offsets, so a partition with transactions shows a few records more than the data
records still to come until the materializer steps past them. The end offsets come from one
extra consumer per node (``ListOffsets`` only, no assignment), not from the materializers' own
consumers: a consumer with an assignment has a long-poll fetch outstanding, and a ListOffsets
behind it waits for the fetch (about 1 s with our client), which would stall the materializer.

A pull query's answer reports the lag of the commit it read (``snapshot_lag``): the changelog's
end offsets, asked of the broker at most once per ``metadata_interval_ms`` per table (a pull query
must not wait for a broker round trip each time; ksqlDB's own lag reports are seconds old),
minus the offsets stored in that very commit. On a restarted node that is the store left on disk,
served before its materializer caught up: the lag says how far behind it is.

A materializer that fails (broker unreachable, store error) is closed, logged and started again
after ``retry_backoff_ms``; ``status(name)`` tells the error meanwhile.
"""

from __future__ import annotations

import logging
import re
import shutil
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oncestream.sql.errors import NotReadyError, StatementError
from oncestream.sql.language.catalog import SourceInfo
from oncestream.sql.language.sql_ast import SourceKind
from oncestream.state.errors import StateStoreError
from oncestream.state.materializer import Materializer
from oncestream.state.source import KafkaChangelogSource
from oncestream.state.store import CommittedReader

log = logging.getLogger(__name__)

DEFAULT_COMMIT_INTERVAL_MS = 200
DEFAULT_METADATA_INTERVAL_MS = 1000
DEFAULT_RETRY_BACKOFF_MS = 1000
STEP_TIMEOUT_S = 0.1
JOIN_TIMEOUT_S = 60.0

# Characters kept as they are in a table's directory name; anything else is %XX-escaped so a
# back-quoted name (spaces, slashes, case) maps to one directory and back.
_SAFE_NAME = re.compile(r"[A-Za-z0-9_\-]")


def directory_name(table: str) -> str:
    """The directory of ``table`` under ``<state_dir>/tables``: the name with every byte outside
    ``[A-Za-z0-9_-]`` written ``%XX`` (so ``orders`` stays ``orders``, ```my t``` is ``my%20t``)."""
    out = []
    for ch in table:
        if _SAFE_NAME.fullmatch(ch):
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8"))
    return "".join(out)


class TableNotMaterializedError(StatementError):
    """A pull query named a source this node does not materialize (a stream, or an unknown name)."""


class TableNotReadyError(NotReadyError):
    """The table's store is not open yet on this node (materializer starting or restarting)."""


@dataclass(frozen=True)
class TableStatus:
    """What a table's materializer is doing: ``state`` is STARTING, RUNNING, ERROR or STOPPED."""

    state: str
    error: str | None
    applied_records: int
    rebuilds: int


class _TableWorker:
    """One table: a thread that runs a Materializer over the table's topic until stopped."""

    def __init__(self, name: str, topic: str, directory: Path, bootstrap_servers: str,
                 client_properties: Mapping[str, str], *, commit_interval_ms: int,
                 metadata_interval_ms: int, retry_backoff_ms: int) -> None:
        self.name = name
        self.topic = topic
        self.directory = directory
        self._bootstrap = bootstrap_servers
        self._client_properties = dict(client_properties)
        self._commit_interval_ms = commit_interval_ms
        self._metadata_interval_ms = metadata_interval_ms
        self._retry_backoff_ms = retry_backoff_ms
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._materializer: Materializer | None = None   # set while its store is open
        self._state = "STARTING"
        self._error: str | None = None
        self._applied = 0
        self._rebuilds = 0
        self._running = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"pull-materializer-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    # --- the materializer thread ---------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._materialize()
            except Exception as exc:  # any failure: report it, back off, start again
                log.warning("table %s: materializer failed, restarting in %d ms: %s",
                            self.name, self._retry_backoff_ms, exc, exc_info=True)
                with self._lock:
                    self._state, self._error = "ERROR", f"{type(exc).__name__}: {exc}"
                self._stop.wait(self._retry_backoff_ms / 1000)
        with self._lock:
            self._state = "STOPPED"

    def _materialize(self) -> None:
        conf: dict[str, object] = dict(self._client_properties)
        source = KafkaChangelogSource(self._bootstrap, client_id=f"oncestream-pull-{self.name}", extra_conf=conf)
        materializer = Materializer(self.directory, self.topic, source,
                                    commit_interval_ms=self._commit_interval_ms,
                                    metadata_interval_ms=self._metadata_interval_ms)
        try:
            materializer.start()
            with self._lock:
                self._materializer = materializer
                self._state, self._error = "RUNNING", None
            self._running.set()
            while not self._stop.is_set():
                materializer.step(STEP_TIMEOUT_S)
        finally:
            with self._lock:
                self._materializer = None
                self._applied += materializer.applied_records
                self._rebuilds += materializer.rebuilds
            materializer.close()   # commits what was applied, closes the store and the consumer

    # --- any thread --------------------------------------------------------------------------

    def committed_offsets(self) -> dict[int, int] | None:
        """Offsets of the store's last commit per partition; None while the store is not open."""
        with self._lock:
            m = self._materializer
            if m is None:
                return None
            # The materializer replaces its dict on each commit: a copy of either one is whole.
            return {p: o for (_t, p), o in m.committed_offsets().items()}

    def wait_until_running(self, timeout_s: float) -> bool:
        return self._running.wait(timeout_s)

    def status(self) -> TableStatus:
        with self._lock:
            m = self._materializer
            applied = self._applied + (m.applied_records if m is not None else 0)
            rebuilds = self._rebuilds + (m.rebuilds if m is not None else 0)
            return TableStatus(self._state, self._error, applied, rebuilds)

    @contextmanager
    def reader(self) -> Iterator[CommittedReader]:
        with self._lock:
            m = self._materializer
            store = m.store if m is not None else None
            if store is None:
                detail = f": {self._error}" if self._error else ""
                raise TableNotReadyError(f"Table {self.name} is not materialized on this node yet{detail}")
            try:
                reader = store.reader("read_committed")
            except StateStoreError as exc:
                raise TableNotReadyError(f"Table {self.name} is not readable on this node: {exc}") from exc
        if not isinstance(reader, CommittedReader):
            raise TypeError(f"store.reader('read_committed') gave {type(reader).__name__}")
        try:
            yield reader
        except StateStoreError as exc:
            # The store was closed under the reader (table dropped, node stopping, changelog
            # rebuild): the query can be retried, it did not fail on its own.
            raise TableNotReadyError(f"Table {self.name} is not readable on this node right now: {exc}") from exc
        finally:
            reader.close()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(JOIN_TIMEOUT_S)


def _positions(committed: Mapping[int, int], marks: Mapping[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """``(position, end)`` per partition: a partition not committed yet is at its log start."""
    return {p: (min(committed.get(p, low), end), end) for p, (low, end) in sorted(marks.items())}


class TableMaterializations:
    """The materialized tables of one node (see the module docstring).

    ``state_dir`` is the node's ``--state-dir``; ``client_properties`` are librdkafka properties
    (security: ``security.protocol``, ``sasl.*``, ``ssl.*``) given to every consumer."""

    def __init__(self, state_dir: str | Path, bootstrap_servers: str,
                 client_properties: Mapping[str, str] | None = None, *,
                 commit_interval_ms: int = DEFAULT_COMMIT_INTERVAL_MS,
                 metadata_interval_ms: int = DEFAULT_METADATA_INTERVAL_MS,
                 retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS) -> None:
        self.root = Path(state_dir) / "tables"
        self._bootstrap = bootstrap_servers
        self._client_properties = dict(client_properties or {})
        self._settings: dict[str, Any] = {
            "commit_interval_ms": commit_interval_ms, "metadata_interval_ms": metadata_interval_ms,
            "retry_backoff_ms": retry_backoff_ms}
        self._workers: dict[str, _TableWorker] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._probe: KafkaChangelogSource | None = None   # end offsets for lag(), made on first use
        self._probe_lock = threading.Lock()
        # topic -> (monotonic time asked, {partition: (log start, end)}): snapshot_lag's end offsets
        self._marks: dict[str, tuple[float, dict[int, tuple[int, int]]]] = {}

    def ensure(self, source: SourceInfo) -> bool:
        """Materialize ``source`` if it is a TABLE not materialized yet (or its topic changed, as
        after ``CREATE OR REPLACE``: the old store is dropped). Returns True if a materializer
        was started. Streams are ignored (False). Idempotent: call it for every table after
        each command and at startup."""
        if source.kind is not SourceKind.TABLE:
            return False
        with self._lock:
            if self._closed:
                raise StateStoreError("table materializations are closed")
            current = self._workers.get(source.name)
            if current is not None and current.topic == source.topic:
                return False
        if current is not None:
            self.drop(source.name)
        worker = _TableWorker(source.name, source.topic, self.root / directory_name(source.name), self._bootstrap,
                              self._client_properties, **self._settings)
        with self._lock:
            if source.name in self._workers:   # another thread won the race
                return False
            self._workers[source.name] = worker
        worker.start()
        return True

    def sync(self, sources: Mapping[str, SourceInfo] | list[SourceInfo]) -> None:
        """Make the materialized set equal the metastore's tables: ``ensure`` each table, ``drop``
        what is no longer one."""
        infos = list(sources.values()) if isinstance(sources, Mapping) else list(sources)
        tables = {s.name for s in infos if s.kind is SourceKind.TABLE}
        for info in infos:
            self.ensure(info)
        for name in self.names():
            if name not in tables:
                self.drop(name)

    def drop(self, name: str) -> bool:
        """Stop materializing ``name`` and delete its store (``DROP TABLE``). False if unknown."""
        with self._lock:
            worker = self._workers.pop(name, None)
        if worker is None:
            return False
        worker.stop()
        shutil.rmtree(worker.directory, ignore_errors=True)
        return True

    def names(self) -> list[str]:
        """The tables materialized (or being started) on this node."""
        with self._lock:
            return sorted(self._workers)

    def _worker(self, name: str) -> _TableWorker:
        with self._lock:
            worker = self._workers.get(name)
        if worker is None:
            raise TableNotMaterializedError(f"Table {name} is not materialized on this node.")
        return worker

    def reader(self, name: str) -> Any:
        """A context manager giving a ``read_committed`` reader of the table's store, frozen at
        its last commit: ``with mats.reader("T") as r: execute_pull(..., r)``. Raises
        ``TableNotMaterializedError`` for an unknown table, ``TableNotReadyError`` while the
        store is not open."""
        return self._worker(name).reader()

    def _watermarks(self, topic: str, max_age_ms: int) -> dict[int, tuple[int, int]]:
        """``{partition: (log start, end (LSO))}`` of ``topic``, asked of the broker unless the
        last answer is younger than ``max_age_ms`` (0: ask now; blocking, a few ms)."""
        with self._probe_lock:
            cached = self._marks.get(topic)
            if cached is not None and (time.monotonic() - cached[0]) * 1000 < max_age_ms:
                return cached[1]
            if self._probe is None:
                self._probe = KafkaChangelogSource(self._bootstrap, client_id="oncestream-pull-lag",
                                                   extra_conf=dict(self._client_properties))
            count = self._probe.partition_count(topic)
            marks = self._probe.watermarks(topic, list(range(count)))
            self._marks[topic] = (time.monotonic(), marks)
            return marks

    def positions(self, name: str) -> dict[int, tuple[int, int]]:
        """Per partition ``(offset of the store's last commit, changelog end (LSO))``, the end
        asked of the broker now (blocking, a few ms). While the store is not open, a
        partition's position is its log start."""
        worker = self._worker(name)
        marks = self._watermarks(worker.topic, 0)
        committed = worker.committed_offsets() or {}
        return _positions(committed, marks)

    def snapshot_lag(self, name: str, reader: CommittedReader) -> dict[int, int]:
        """Per partition, records between the commit ``reader`` is frozen at and the changelog's
        end (LSO, at most ``metadata_interval_ms`` old): the lag of a pull query's answer."""
        worker = self._worker(name)
        marks = self._watermarks(worker.topic, int(self._settings["metadata_interval_ms"]))
        committed = {p: o for (t, p), o in reader.committed_offsets().items() if t == worker.topic}
        return {p: end - current for p, (current, end) in _positions(committed, marks).items()}

    def lag(self, name: str) -> dict[int, int]:
        """Records between the store's last commit and the changelog's end (LSO), per partition
        (see ``positions``)."""
        return {p: end - current for p, (current, end) in self.positions(name).items()}

    def wait_until_running(self, name: str, timeout_s: float) -> bool:
        """Wait until ``name``'s store is open and its materializer running (True) or timeout."""
        return self._worker(name).wait_until_running(timeout_s)

    def status(self, name: str) -> TableStatus:
        """The table's materializer state (RUNNING, STARTING, ERROR with its error, STOPPED)."""
        return self._worker(name).status()

    def close(self) -> None:
        """Stop every materializer (each commits what it applied) and keep the stores on disk:
        the next start resumes from them."""
        with self._lock:
            self._closed = True
            workers = list(self._workers.values())
            self._workers.clear()
        for worker in workers:
            worker.stop()
        with self._probe_lock:
            if self._probe is not None:
                self._probe.close()
                self._probe = None
