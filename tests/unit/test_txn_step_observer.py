"""The transaction coordinator's step observer (txn_service.TxnStepObserver): injected into
TxnService, it is told every step of a committing transaction in order, and nothing of an abort.
The chaos suite (tests/chaos/test_txn_crash_points.py) injects one that SIGKILLs the broker."""

from __future__ import annotations

import itertools
from pathlib import Path

from kio.schema.errors import ErrorCode

from oncestream.broker.group_service import GroupService
from oncestream.broker.txn_service import TXN_STEPS, TxnService
from oncestream.log.config import LogConfig
from oncestream.log.manager import LogManager
from oncestream.topic_partition import TopicPartition

T0 = 1_700_000_000_000
PROPS = {"offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1"}


class Recorder:
    def __init__(self) -> None:
        self.steps: list[str] = []

    def reached(self, step: str) -> None:
        self.steps.append(step)


def _run_transaction(tmp_path: Path, partitions: int, commit: bool) -> list[str]:
    logs = LogManager.open(tmp_path, LogConfig(), T0)
    logs.create_topic("orders", partitions, {}, now_ms=T0)
    groups = GroupService(logs, PROPS, lambda: T0)
    recorder = Recorder()
    pids = itertools.count(1000)
    txns = TxnService(logs, groups, PROPS, lambda: T0, lambda: next(pids), steps=recorder)
    coord = txns.coordinator
    init = txns.call(lambda now: coord.init_producer_id("t", 60_000, now))
    pid, epoch = init.producer_id, init.producer_epoch
    tps = [TopicPartition("orders", p) for p in range(partitions)]
    assert txns.call(lambda now: coord.add_partitions("t", pid, epoch, tps, now)).error == ErrorCode.none
    assert recorder.steps == []
    assert txns.call(lambda now: coord.end_txn("t", pid, epoch, commit, now)).error == ErrorCode.none
    (described,) = coord.describe_transactions(["t"])
    assert described.state == ("CompleteCommit" if commit else "CompleteAbort")
    logs.close()
    return recorder.steps


def test_observer_sees_every_step_of_a_commit_in_order(tmp_path: Path) -> None:
    assert _run_transaction(tmp_path, partitions=3, commit=True) == list(TXN_STEPS)


def test_one_partition_commit_has_no_between_markers_step(tmp_path: Path) -> None:
    assert _run_transaction(tmp_path, partitions=1, commit=True) == ["before-markers", "before-complete"]


def test_observer_hears_nothing_of_an_abort(tmp_path: Path) -> None:
    assert _run_transaction(tmp_path, partitions=2, commit=False) == []
