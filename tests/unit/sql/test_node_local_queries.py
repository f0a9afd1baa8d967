"""The node's local query lifecycle (oncestream.sql.server.local_queries): it starts what is assigned,
stops what is taken away, keeps a failed query owned (shown as ERROR) and notices queries that fail
while running. The runtime here is a small recorder with the QueryRuntime methods the lifecycle
calls; the lifecycle is the thing under test."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import pytest

from oncestream.sql.server.local_queries import IllegalQueryTransition, LocalQueries, LocalState, StartSpec


class RecordingRuntime:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started: list[str] = []
        self.stopped: list[str] = []
        self.fail_start: set[str] = set()
        self.states: dict[str, Any] = {}

    def start_persistent(self, info: Any, analyzed: Any, sink: Any, properties: Any) -> None:
        if info.query_id in self.fail_start:
            raise RuntimeError(f"cannot compile {info.query_id}")
        with self.lock:
            self.started.append(info.query_id)
            self.states[info.query_id] = type("S", (), {"state": "RUNNING", "error": None})()

    def stop_persistent(self, query_id: str) -> None:
        with self.lock:
            self.stopped.append(query_id)

    def status(self, query_id: str) -> Any:
        return self.states[query_id]


def wait(check: Any) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


@dataclass(frozen=True)
class Info:
    query_id: str
    command_offset: int


@pytest.fixture
def local() -> Any:
    runtime = RecordingRuntime()
    known = {"Q1": 1, "Q2": 2, "Q3": 3}   # query id -> offset of the command defining it
    changes: list[int] = []
    paused: set[str] = set()   # the metastore's PAUSEd queries
    # Recording fakes stand in for the runtime and the query specs: only what LocalQueries reads.
    queries = LocalQueries(runtime,  # type: ignore[arg-type]
                           lambda q: StartSpec(Info(q, known[q]), None, None, {}, q in paused)  # type: ignore[arg-type]
                           if q in known else None,
                           lambda: changes.append(1))
    queries.start()
    yield queries, runtime, known, changes, paused
    queries.stop()


def test_starts_assigned_and_stops_unassigned(local: Any) -> None:
    queries, runtime, _known, changes, _paused = local
    queries.set_desired({"Q1", "Q2"})
    wait(lambda: queries.owned() == ["Q1", "Q2"] and queries.state("Q2") == ("RUNNING", None))
    assert sorted(runtime.started) == ["Q1", "Q2"]
    assert changes
    queries.set_desired({"Q2"})
    wait(lambda: queries.owned() == ["Q2"])
    assert runtime.stopped == ["Q1"]
    assert queries.state("Q1") is None


def test_unknown_queries_wait_for_the_metastore(local: Any) -> None:
    queries, runtime, known, _changes, _paused = local
    queries.set_desired({"Q9"})
    time.sleep(0.1)
    assert queries.owned() == []
    assert runtime.started == []
    known["Q9"] = 9
    queries.poke()
    wait(lambda: queries.owned() == ["Q9"])


def test_failed_start_and_failure_while_running_show_error(local: Any) -> None:
    queries, runtime, _known, _changes, _paused = local
    runtime.fail_start.add("Q3")
    queries.set_desired({"Q1", "Q3"})
    wait(lambda: queries.state("Q3") is not None and queries.state("Q3")[0] == "ERROR")
    assert "cannot compile Q3" in queries.errors()["Q3"]
    assert queries.owned() == ["Q1", "Q3"]  # a failed query stays here (not bounced around)
    wait(lambda: queries.state("Q1") == ("RUNNING", None))
    runtime.states["Q1"] = type("S", (), {"state": "ERROR", "error": "boom in batch 7"})()
    queries.poke()
    wait(lambda: queries.state("Q1") == ("ERROR", "boom in batch 7"))


def test_a_failed_query_the_runtime_started_again_is_running_again(local: Any) -> None:
    """The runtime restarts a query Spark failed to start (runtime.SPARK_START_FAILURES): ERROR
    while it waits, RUNNING (without the error) once the runtime reports it running again."""
    queries, runtime, _known, changes, _paused = local
    queries.set_desired({"Q1"})
    wait(lambda: queries.state("Q1") == ("RUNNING", None))
    runtime.states["Q1"] = type("S", (), {"state": "ERROR", "error": "Python worker failed to connect back."})()
    queries.poke()
    wait(lambda: queries.state("Q1") == ("ERROR", "Python worker failed to connect back."))
    notified = len(changes)
    runtime.states["Q1"] = type("S", (), {"state": "RUNNING", "error": None})()
    queries.poke()
    wait(lambda: queries.state("Q1") == ("RUNNING", None))
    assert queries.errors() == {}
    assert len(changes) > notified   # the group metadata's errors change with it
    assert runtime.started == ["Q1"]  # the runtime restarted it, not the lifecycle


def test_terminated_or_replaced_queries_stop_or_restart(local: Any) -> None:
    queries, runtime, known, _changes, _paused = local
    queries.set_desired({"Q1", "Q2"})
    wait(lambda: queries.state("Q1") == ("RUNNING", None) and queries.state("Q2") == ("RUNNING", None))
    known["Q1"] = 10          # CREATE OR REPLACE: same id, new definition
    del known["Q2"]           # TERMINATE: gone from the metastore (still in the stale assignment)
    queries.poke()
    wait(lambda: runtime.started.count("Q1") == 2 and queries.state("Q1") == ("RUNNING", None))
    assert sorted(runtime.stopped) == ["Q1", "Q2"]
    assert queries.owned() == ["Q1"]


def test_state_table_refuses_illegal_transitions(local: Any) -> None:
    queries, _runtime, _known, _changes, _paused = local
    with pytest.raises(IllegalQueryTransition):
        queries._set("QX", LocalState.RUNNING)  # RUNNING only from STARTING or FAILED


def test_paused_query_stops_stays_owned_and_resumes_from_its_checkpoint(local: Any) -> None:
    """PAUSE stops the Spark query at a batch boundary (its checkpoint kept) and the node keeps
    owning it, shown PAUSED; RESUME starts it again here, from that checkpoint (runtime's job)."""
    queries, runtime, _known, _changes, paused = local
    queries.set_desired({"Q1", "Q2"})
    wait(lambda: queries.state("Q1") == ("RUNNING", None) and queries.state("Q2") == ("RUNNING", None))
    paused.add("Q1")
    queries.poke()
    wait(lambda: queries.state("Q1") == ("PAUSED", None))
    assert runtime.stopped == ["Q1"]
    assert queries.owned() == ["Q1", "Q2"]
    paused.discard("Q1")
    queries.poke()
    wait(lambda: runtime.started.count("Q1") == 2 and queries.state("Q1") == ("RUNNING", None))
    assert runtime.stopped == ["Q1"]
    assert queries.state("Q2") == ("RUNNING", None)


def test_query_assigned_while_paused_is_owned_not_started_and_terminates(local: Any) -> None:
    """A query placed on this node while paused (a restarted node replaying PAUSE, or a rebalance)
    is owned but never started; TERMINATE of it has no Spark query to stop."""
    queries, runtime, known, _changes, paused = local
    paused.add("Q3")
    queries.set_desired({"Q3"})
    wait(lambda: queries.state("Q3") == ("PAUSED", None))
    assert runtime.started == []
    assert queries.owned() == ["Q3"]
    del known["Q3"]   # TERMINATE
    queries.poke()
    wait(lambda: queries.owned() == [])
    assert runtime.stopped == []


def test_state_table_refuses_resuming_what_is_not_paused(local: Any) -> None:
    queries, _runtime, _known, _changes, _paused = local
    with pytest.raises(IllegalQueryTransition):
        queries._set("QX", LocalState.PAUSING)  # PAUSING only from RUNNING or FAILED
    queries._set("QY", LocalState.STARTING)
    with pytest.raises(IllegalQueryTransition):
        queries._set("QY", LocalState.PAUSED)   # PAUSED only once PAUSING stopped it (or when new)
