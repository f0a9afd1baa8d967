"""The exactly-once sink's commit outcome is checked by typed errors, not ``assert`` (which
``python -O`` strips): a recorded transaction that ends aborted instead of committed, or a
completion the coordinator turns into an abort, fails the batch with ``CommitResolutionError``.
No broker, no Spark session: the held transactions are replaced by fakes."""

from __future__ import annotations

import pytest

from oncestream.spark import sink
from oncestream.spark.errors import CommitResolutionError
from oncestream.spark.options import sink_options
from oncestream.spark.sink import SinkCommitMessage, _DriverCommit, require_outcomes
from oncestream.spark.txn_resolution import HeldTransactions, Outcome

pytestmark = pytest.mark.spark

STATE = "1000:3"


def _opts():
    return sink_options({"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "out"})


def _message(txn_id: str, query_id: str = "job-1") -> SinkCommitMessage:
    return SinkCommitMessage(query_id, txn_id, STATE, 0, 0, 1)


class _AbortingHeld:
    """Holds every id in the prepared state the task reported, then 'finishes' by aborting one:
    the outcome a coordinator bug or a fencing race would produce after the states were checked."""

    def __init__(self, *_args, **_kwargs) -> None:
        self.held: dict[str, str] = {}

    def open(self, ids):
        self.held = {t: STATE for t in ids}
        return dict(self.held)

    def finish(self, commit, observe=None):
        ids = sorted(commit)
        return {t: (Outcome.ABORTED if t == ids[0] else Outcome.COMMITTED) for t in ids}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


def test_batch_write_job_whose_recorded_transaction_aborted_fails_typed(monkeypatch) -> None:
    monkeypatch.setattr(sink, "HeldTransactions", _AbortingHeld)
    monkeypatch.setattr(_DriverCommit, "leftovers", lambda self, query_id, exclude: [])
    with pytest.raises(CommitResolutionError, match="did not commit as recorded"):
        _DriverCommit(_opts()).commit_job([_message("p-job-1-0-0"), _message("p-job-1-1-0")])


def test_require_outcomes_accepts_only_the_allowed_outcomes() -> None:
    require_outcomes({"a": Outcome.COMMITTED, "b": Outcome.NOTHING_OPEN}, (Outcome.COMMITTED, Outcome.NOTHING_OPEN),
                     "batch 3")
    with pytest.raises(CommitResolutionError, match=r"batch 3: .*'b': 'aborted'"):
        require_outcomes({"a": Outcome.COMMITTED, "b": Outcome.ABORTED}, (Outcome.COMMITTED, Outcome.NOTHING_OPEN),
                         "batch 3")


def test_messages_of_two_queries_in_one_batch_fail_typed() -> None:
    with pytest.raises(CommitResolutionError, match="several queries"):
        _DriverCommit(_opts()).commit_job([_message("t-a", "job-a"), _message("t-b", "job-b")])


def test_completion_that_aborts_the_held_transaction_fails_typed() -> None:
    """complete_transaction with the held state returning False (not committed) is an error."""

    class _Producer:
        def complete_transaction(self, state, timeout):
            return False

    held = HeldTransactions("127.0.0.1:1")
    held._producers["t-1"] = _Producer()
    held.held["t-1"] = STATE
    with pytest.raises(CommitResolutionError, match="aborted it"):
        held.finish({"t-1": STATE})
