"""The persistent queries this node runs: it starts what the assignment gives it and stops what it
takes away (or what a command terminated), pauses and resumes what PAUSE / RESUME asked, on a
thread of its own because Spark starts and stops take seconds and neither the command runner nor
the group member may wait for them.

State per query id (one table, checked on every change):

=============  ==========================================  ==========================
state          entered from                                 means
=============  ==========================================  ==========================
STARTING       (absent), PAUSED                             assigned (or resumed), start under way
RUNNING        STARTING, FAILED                             runtime.start_persistent returned /
                                                            runtime restarted it (RUNNING again)
FAILED         STARTING, RUNNING                            start raised / runtime reports ERROR
PAUSING        RUNNING, FAILED                              paused, stop at a batch boundary under way
PAUSED         (absent), PAUSING                            paused: owned here, not running
STOPPING       STARTING, RUNNING, FAILED, PAUSING, PAUSED   no longer assigned or terminated
(absent)       STOPPING                                     runtime.stop_persistent returned
=============  ==========================================  ==========================

A paused query (the metastore's run state, ``StartSpec.paused``) is stopped the way an unassigned
one is, at a batch boundary, which keeps its checkpoint and its sink's transactional state; RESUME
starts it again from that checkpoint, so it goes on from where it stopped with nothing lost or
written twice. It stays owned by this node meanwhile, so RESUME starts it where it was. It shows
as PAUSED once it has stopped (RUNNING while PAUSING: its last batch may still be writing).

A STOPPING query is still owned (reported in the group metadata) until it has stopped, so the
group never gives it to another node while it runs here. A FAILED query stays owned by this node
(shown as ERROR with its error, as ksqlDB shows a failed query) until it is unassigned or
terminated, so the cluster does not bounce it from node to node. The runtime restarts a query
that Spark failed to start for the machine's sake (runtime.SPARK_START_FAILURES): it is FAILED
while it waits, RUNNING again once the runtime reports it so.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from oncestream.sql.engine.interface import PersistentQueryRunner
from oncestream.sql.language.analyzer import AnalyzedQuery
from oncestream.sql.language.catalog import QueryInfo, SourceInfo

log = logging.getLogger("oncestream.sql")

_STATUS_POLL_S = 2.0


class LocalState(Enum):
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    FAILED = "FAILED"
    PAUSING = "PAUSING"
    PAUSED = "PAUSED"
    STOPPING = "STOPPING"


_ALLOWED: dict[LocalState, tuple[LocalState | None, ...]] = {
    LocalState.STARTING: (None, LocalState.PAUSED),
    LocalState.RUNNING: (LocalState.STARTING, LocalState.FAILED),
    LocalState.FAILED: (LocalState.STARTING, LocalState.RUNNING),
    LocalState.PAUSING: (LocalState.RUNNING, LocalState.FAILED),
    LocalState.PAUSED: (None, LocalState.PAUSING),
    LocalState.STOPPING: (LocalState.STARTING, LocalState.RUNNING, LocalState.FAILED, LocalState.PAUSING,
                          LocalState.PAUSED),
}


class IllegalQueryTransition(RuntimeError):
    """A query state change the table above does not allow (a bug)."""


@dataclass(frozen=True)
class StartSpec:
    """What the runtime needs to start one query (resolved from this node's metastore), and
    whether PAUSE holds it stopped."""

    info: QueryInfo
    analyzed: AnalyzedQuery
    sink: SourceInfo
    properties: dict[str, Any]
    paused: bool = False


def _state_name(status: Any) -> Any:
    """The runtime's state of a query as its name (a QueryStatus's ``state``, or an enum's value)."""
    state = getattr(status, "state", None)
    return getattr(state, "value", state)


def _version(spec: StartSpec) -> int:
    """Which definition of a query ``spec`` is: the offset of the command that (re)defined it."""
    return int(getattr(spec.info, "command_offset", -1))


class LocalQueries:
    """Reconciles this node's running queries with ``desired`` (assigned and not terminated;
    paused ones owned but stopped).

    ``resolve(query_id)`` gives the StartSpec of a query of the metastore, or None when this
    node's metastore does not know it (yet: it retries after ``poke``). ``changed()`` is called
    when the set of owned queries or their errors changed (the assignment member rejoins)."""

    def __init__(self, runtime: PersistentQueryRunner, resolve: Callable[[str], StartSpec | None],
                 changed: Callable[[], None]) -> None:
        self._runtime = runtime
        self._resolve = resolve
        self._changed = changed
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._desired: set[str] = set()
        self._states: dict[str, LocalState] = {}
        self._errors: dict[str, str] = {}
        self._versions: dict[str, int] = {}   # command offset of the definition each query runs
        self._thread = threading.Thread(target=self._run, name="sql-local-queries", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _set(self, query_id: str, state: LocalState | None) -> None:
        current = self._states.get(query_id)
        if state is not None and current not in _ALLOWED[state]:
            raise IllegalQueryTransition(f"{query_id}: {current} -> {state}")
        if state is None:
            if current is not LocalState.STOPPING:
                raise IllegalQueryTransition(f"{query_id}: {current} -> (absent)")
            self._states.pop(query_id, None)
            self._errors.pop(query_id, None)
            self._versions.pop(query_id, None)
        else:
            self._states[query_id] = state

    # --- inputs -----------------------------------------------------------------------------------

    def set_desired(self, query_ids: set[str]) -> None:
        """The queries this node should run now."""
        with self._lock:
            self._desired = set(query_ids)
        self._wake.set()

    def poke(self) -> None:
        """The metastore changed (a query may be resolvable now, or terminated)."""
        self._wake.set()

    # --- outputs ----------------------------------------------------------------------------------

    def owned(self) -> list[str]:
        """Queries this node runs, is starting or still stopping, failed ones included: a query
        is only let go (for the group to give it to another node) once it has stopped here."""
        with self._lock:
            return sorted(self._states)

    def errors(self) -> dict[str, str]:
        """Error text of this node's failed queries."""
        with self._lock:
            return dict(self._errors)

    def state(self, query_id: str) -> tuple[str, str | None] | None:
        """(ksqlDB state, error) of a query this node owns; None if it does not own it."""
        with self._lock:
            local = self._states.get(query_id)
            error = self._errors.get(query_id)
        if local is None or local is LocalState.STOPPING:
            return None
        if local is LocalState.FAILED:
            return "ERROR", error
        if local is LocalState.STARTING:
            return "PENDING", None
        if local is LocalState.PAUSED:
            return "PAUSED", None
        return "RUNNING", None   # RUNNING, or PAUSING: its last batch may still be writing

    # --- the loop ---------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(_STATUS_POLL_S)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self._reconcile()
                self._watch_running()
            except IllegalQueryTransition:
                log.exception("oncestream sql: query state table violated")

    def _reconcile(self) -> None:
        with self._lock:
            desired = set(self._desired)
            current = dict(self._states)
            versions = dict(self._versions)
        changed = False
        specs = {q: self._resolve(q) for q in sorted(desired | set(current))}
        for query_id in sorted(current):
            spec = specs.get(query_id)
            # Not assigned here any more, terminated (gone from the metastore), or replaced by
            # CREATE OR REPLACE (same id, newer definition: restarted below).
            if query_id not in desired or spec is None or _version(spec) != versions.get(query_id):
                self._stop_one(query_id)
                changed = True
            elif spec.paused and current[query_id] in (LocalState.RUNNING, LocalState.FAILED):
                self._pause_one(query_id)
                changed = True
        with self._lock:
            present = dict(self._states)
        for query_id in sorted(desired):
            spec = specs.get(query_id)
            if spec is None:
                continue  # not in this node's metastore (yet, or terminated)
            local = present.get(query_id)
            if spec.paused:
                if local is None:   # assigned while paused: owned here, started on RESUME
                    with self._lock:
                        self._set(query_id, LocalState.PAUSED)
                        self._versions[query_id] = _version(spec)
                    changed = True
                continue
            if local not in (None, LocalState.PAUSED):
                continue  # running, failed or starting already
            with self._lock:
                self._set(query_id, LocalState.STARTING)
                self._versions[query_id] = _version(spec)
            changed = True
            self._changed()
            try:
                self._runtime.start_persistent(spec.info, spec.analyzed, spec.sink, spec.properties)
            except Exception as exc:  # noqa: BLE001 - a failing query must not take the node down
                log.warning("oncestream sql: query %s failed to start: %s", query_id, exc)
                with self._lock:
                    self._set(query_id, LocalState.FAILED)
                    self._errors[query_id] = f"{type(exc).__name__}: {exc}"
                continue
            with self._lock:
                self._set(query_id, LocalState.RUNNING)
        if changed:
            self._changed()

    def _stop_one(self, query_id: str) -> None:
        with self._lock:
            was = self._states.get(query_id)
            if was is None:
                return
            self._set(query_id, LocalState.STOPPING)
        if was is not LocalState.PAUSED:   # a paused query has no Spark query to stop
            self._stop_runtime(query_id)
        with self._lock:
            self._set(query_id, None)

    def _pause_one(self, query_id: str) -> None:
        """Stop a query at a batch boundary and keep it owned (its checkpoint is where RESUME
        starts it again)."""
        with self._lock:
            self._set(query_id, LocalState.PAUSING)
        self._stop_runtime(query_id)
        with self._lock:
            if self._states.get(query_id) is LocalState.PAUSING:   # not stopped by the node's stop meanwhile
                self._set(query_id, LocalState.PAUSED)
                self._errors.pop(query_id, None)

    def _stop_runtime(self, query_id: str) -> None:
        try:
            self._runtime.stop_persistent(query_id)
        except Exception as exc:  # noqa: BLE001 - stopping a broken query must not stop the others
            log.warning("oncestream sql: stopping query %s: %s", query_id, exc)

    def _watch_running(self) -> None:
        """Notice queries that failed while running (Spark reports them ERROR), and failed ones
        the runtime started again (it reports them RUNNING)."""
        with self._lock:
            running = [q for q, s in self._states.items() if s is LocalState.RUNNING]
            failed_ids = [q for q, s in self._states.items() if s is LocalState.FAILED]
        failed = self._recovered(failed_ids)
        for query_id in running:
            try:
                status = self._runtime.status(query_id)
            except Exception as exc:  # noqa: BLE001 - the status call itself failing is an error state
                status = None
                error = str(exc)
            else:
                error = getattr(status, "error", None) or ""
            if status is None or _state_name(status) == "ERROR":
                with self._lock:
                    if self._states.get(query_id) is LocalState.RUNNING:
                        self._set(query_id, LocalState.FAILED)
                        self._errors[query_id] = error or "the query stopped"
                        failed = True
        if failed:
            self._changed()

    def _recovered(self, failed_ids: list[str]) -> bool:
        """Move the FAILED queries the runtime reports RUNNING back to RUNNING; whether any was."""
        recovered = False
        for query_id in failed_ids:
            try:
                status = self._runtime.status(query_id)
            except Exception:  # noqa: BLE001 - still failed as far as this node can tell
                continue
            if _state_name(status) != "RUNNING":
                continue
            with self._lock:
                if self._states.get(query_id) is LocalState.FAILED:
                    self._set(query_id, LocalState.RUNNING)
                    self._errors.pop(query_id, None)
                    recovered = True
        return recovered

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stop every local query (at a batch boundary) and the loop."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        with self._lock:
            ids = list(self._states)
        for query_id in ids:
            self._stop_one(query_id)
