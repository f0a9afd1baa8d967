"""A push or persistent query that Spark failed to start for the machine's sake (a Python process of
the connector did not connect back within Spark's fixed 10 s) is started again. A push query only
before its first micro-batch (its rows went to the client) and PUSH_START_RETRIES times
(``runtime.PushQuery``); a persistent query from its checkpoint, also after batches, with a pause
that doubles up to its cap, until it runs or is stopped (``QueryRuntime._restart_after_start_failure``).
Any other failure ends the query with its error. Spark's streaming writer is a fake here: the
chain ``writeStream.foreachBatch(f).outputMode(m).option(k, v).trigger(...).start()`` returns
handles that have failed or run as each test says; the persistent pauses go to a recording
``sleep``."""

from __future__ import annotations

import threading
from typing import Any

from oncestream.sql.engine.runtime import (
    ERROR,
    NOT_RUNNING,
    PENDING,
    PUSH_START_RETRIES,
    RUNNING,
    START_RETRY_BACKOFF_MAX_MS,
    START_RETRY_BACKOFF_MS,
    PushQuery,
    QueryRuntime,
    is_spark_start_failure,
)
from oncestream.sql.language.catalog import Column
from oncestream.sql.language.types import BaseType, primitive

START_FAILURE = "Python worker failed to connect back."
COLUMNS = (Column("V", primitive(BaseType.INTEGER)),)


class _Handle:
    def __init__(self, error: str | None) -> None:
        self.isActive = error is None
        self.error = error

    def exception(self) -> Exception | None:
        return None if self.error is None else RuntimeError(self.error)

    def stop(self) -> None:
        self.isActive = False


class _Writer:
    """``frame.writeStream``: each ``start()`` gives the next handle of ``outcomes`` (an error text,
    or None for a query that runs), and remembers the ``foreachBatch`` function and checkpoint."""

    def __init__(self, outcomes: list[str | None]) -> None:
        self.outcomes = outcomes
        self.handles: list[_Handle] = []
        self.checkpoints: list[str] = []
        self.deliver: Any = None

    def foreachBatch(self, deliver: Any) -> _Writer:
        self.deliver = deliver
        return self

    def outputMode(self, _mode: str) -> _Writer:
        return self

    def option(self, key: str, value: str) -> _Writer:
        if key == "checkpointLocation":
            self.checkpoints.append(value)
        return self

    def trigger(self, **_kwargs: Any) -> _Writer:
        return self

    def start(self) -> _Handle:
        handle = _Handle(self.outcomes[len(self.handles)])
        self.handles.append(handle)
        return handle


class _Frame:
    def __init__(self, outcomes: list[str | None]) -> None:
        self.writeStream = _Writer(outcomes)


class _Batch:
    def toLocalIterator(self) -> list[tuple[int]]:
        return [(1,)]


def _push(outcomes: list[str | None]) -> tuple[PushQuery, _Writer]:
    frame = _Frame(outcomes)
    push = PushQuery("transient_test", COLUMNS, None, 10)
    push.start(frame, "append", 100)
    return push, frame.writeStream


def test_a_start_failure_before_the_first_batch_is_started_again_with_a_fresh_checkpoint():
    push, writer = _push([START_FAILURE, None])
    assert push.poll(0.01) is None    # sees the failed start and starts the query again
    assert len(writer.handles) == 2
    assert writer.checkpoints[0] != writer.checkpoints[1]
    assert push.error is None
    assert not push.done
    writer.deliver(_Batch(), 0)
    assert push.poll(1.0) == [1]
    push.close_sync()


def test_start_failures_past_the_retries_end_the_query_with_the_error():
    push, writer = _push([START_FAILURE] * (PUSH_START_RETRIES + 1))
    for _ in range(PUSH_START_RETRIES + 1):
        push.poll(0.01)
    assert len(writer.handles) == PUSH_START_RETRIES + 1
    assert push.error == START_FAILURE
    assert push.poll(0.01) is None   # the end marker
    assert push.done


def test_other_failures_and_start_failures_after_a_batch_are_not_retried():
    push, writer = _push(["Some error: the query is wrong"])
    push.poll(0.01)
    assert (len(writer.handles), push.error) == (1, "Some error: the query is wrong")

    push, writer = _push([None])
    writer.deliver(_Batch(), 0)
    assert push.poll(1.0) == [1]
    writer.handles[0].isActive, writer.handles[0].error = False, START_FAILURE
    push.poll(0.01)
    assert (len(writer.handles), push.error) == (1, START_FAILURE)


def test_start_failures_are_told_by_their_text():
    assert is_spark_start_failure("Python worker failed to connect back.")
    assert not is_spark_start_failure("Some error")
    assert not is_spark_start_failure(None)


class _Ended:
    """A persistent query's Spark handle: ended with ``error`` (None: stopped), after a micro-batch
    or not; or, with ``running``, one that runs (its watcher returns: no failure to read)."""

    def __init__(self, error: str | None, progressed: bool = False, running: bool = False) -> None:
        self.error = error
        self.lastProgress = {"batchId": 0} if progressed else None
        self.isActive = running
        self.status = {"isTriggerActive": False}
        self.stopped = False

    def awaitTermination(self) -> None:
        if self.error is not None:
            raise RuntimeError(self.error)

    def exception(self) -> Exception | None:
        return None if self.error is None else RuntimeError(self.error)

    def stop(self) -> None:
        self.stopped, self.isActive = True, False


def _runtime(first: _Ended) -> QueryRuntime:
    """A runtime holding query Q as started with ``first`` (the restart logic alone: no Spark
    session behind it)."""
    runtime = object.__new__(QueryRuntime)
    runtime._lock = threading.RLock()
    runtime._queries = {}
    runtime._set("Q", PENDING)
    runtime._set("Q", RUNNING, handle=first)
    return runtime


def _persistent(first: _Ended, starts: list[_Ended]) -> tuple[QueryRuntime, list[_Ended], list[float]]:
    """Run Q's watcher on ``first``: ``starts`` are what each new start gives; returns the
    runtime, the handles started and the pauses (seconds) taken before each start."""
    runtime = _runtime(first)
    started: list[_Ended] = []
    pauses: list[float] = []

    def start() -> _Ended:
        started.append(starts[len(started)])
        return started[-1]

    runtime._restart_after_start_failure("Q", first, start, sleep=pauses.append)
    return runtime, started, pauses


def test_a_persistent_query_spark_failed_to_start_is_started_again_until_it_runs():
    """More failures in a row than a push query is allowed: the pauses double up to the cap."""
    failures = 7
    running = _Ended(None, running=True)
    runtime, started, pauses = _persistent(_Ended(START_FAILURE), [_Ended(START_FAILURE)] * (failures - 1) + [running])
    assert started[-1] is running
    assert len(started) == failures
    expected = [min(START_RETRY_BACKOFF_MS * 2 ** n, START_RETRY_BACKOFF_MAX_MS) / 1000 for n in range(failures)]
    assert pauses == expected
    assert pauses[-1] == START_RETRY_BACKOFF_MAX_MS / 1000   # the cap was reached
    assert runtime.status("Q").state == RUNNING


def test_a_start_failure_after_batches_is_started_again_with_the_first_pause():
    """Spark starts a Python process for each batch's commit too: a failure there, after batches,
    restarts the query from its checkpoint, and a run that made progress resets the pauses."""
    running = _Ended(None, running=True)
    runtime, started, pauses = _persistent(
        _Ended(START_FAILURE), [_Ended(START_FAILURE, progressed=True), _Ended(START_FAILURE), running])
    assert started[-1] is running
    first = START_RETRY_BACKOFF_MS / 1000
    assert pauses == [first, first, 2 * first]
    assert runtime.status("Q").state == RUNNING


def test_a_persistent_query_ending_otherwise_is_not_started_again():
    for first in (_Ended("Some error: the query is wrong"), _Ended(None)):
        runtime, started, _ = _persistent(first, [])
        assert started == []
        assert runtime.status("Q").state == (ERROR if first.error else NOT_RUNNING)


def test_a_query_waiting_to_be_started_again_shows_the_error_and_stays_stopped_once_stopped():
    runtime = _runtime(_Ended(START_FAILURE))
    seen: list[tuple[str, str | None]] = []

    def stop_during_pause(_seconds: float) -> None:
        status = runtime.status("Q")
        seen.append((status.state, status.error))
        runtime.stop_persistent("Q")

    runtime._restart_after_start_failure("Q", runtime._queries["Q"].handle, lambda: _Ended(None, running=True),
                                         sleep=stop_during_pause)
    assert seen == [(ERROR, START_FAILURE)]   # as ksqlDB shows a query it will restart
    assert runtime.status("Q").state == NOT_RUNNING


def test_a_query_stopped_while_spark_started_it_again_is_stopped():
    runtime = _runtime(_Ended(START_FAILURE))
    again = _Ended(None, running=True)

    def start() -> _Ended:
        runtime.stop_persistent("Q")
        return again

    runtime._restart_after_start_failure("Q", runtime._queries["Q"].handle, start, sleep=lambda _s: None)
    assert again.stopped
    assert runtime.status("Q").state == NOT_RUNNING
