"""A push or persistent query that Spark failed to start for the machine's sake (its Python data-source process
did not connect back within Spark's fixed 10 s) before its first micro-batch is started again
(``runtime.PushQuery``, ``PUSH_START_RETRIES``); any other failure, a start failure after a batch,
or one past the retries ends it with the error. Spark's streaming writer is a fake here: the
chain ``writeStream.foreachBatch(f).outputMode(m).option(k, v).trigger(...).start()`` returns
handles that have failed or run as each test says."""

from __future__ import annotations

import threading
from typing import Any

from oncestream.sql.engine.runtime import (
    ERROR,
    NOT_RUNNING,
    PENDING,
    PERSISTENT_START_RETRIES,
    PUSH_START_RETRIES,
    RUNNING,
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
    """A persistent query's Spark handle that has ended: with ``error`` (None: stopped), after a
    micro-batch or not."""

    def __init__(self, error: str | None, progressed: bool = False) -> None:
        self.error = error
        self.lastProgress = {"batchId": 0} if progressed else None
        self.isActive = False

    def awaitTermination(self) -> None:
        if self.error is not None:
            raise RuntimeError(self.error)

    def exception(self) -> Exception | None:
        return None if self.error is None else RuntimeError(self.error)


def _persistent(first: _Ended, starts: list[_Ended]) -> tuple[QueryRuntime, list[_Ended]]:
    """A runtime holding query Q as started with ``first``; ``starts`` are what each new start gives.
    (The restart logic alone: no Spark session behind the runtime.)"""
    runtime = object.__new__(QueryRuntime)
    runtime._lock = threading.RLock()
    runtime._queries = {}
    runtime._set("Q", PENDING)
    runtime._set("Q", RUNNING, handle=first)
    started: list[_Ended] = []

    def start() -> _Ended:
        started.append(starts[len(started)])
        return started[-1]

    runtime._restart_after_start_failure("Q", first, start)
    return runtime, started


def test_a_persistent_query_spark_failed_to_start_is_started_again_from_its_checkpoint():
    running = _Ended(None)
    running.isActive = True   # the second start runs (its awaitTermination is not reached: one retry left)
    runtime, started = _persistent(_Ended(START_FAILURE), [_Ended(START_FAILURE), running])
    assert started[-1] is running
    assert len(started) == PERSISTENT_START_RETRIES
    assert runtime.status("Q").state == RUNNING


def test_a_persistent_query_ending_otherwise_is_not_started_again():
    for first in (_Ended("Some error: the query is wrong"), _Ended(START_FAILURE, progressed=True), _Ended(None)):
        runtime, started = _persistent(first, [])
        assert started == []
        assert runtime.status("Q").state == (ERROR if first.error else NOT_RUNNING)
