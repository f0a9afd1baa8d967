"""Coordinator invariants that guard data hold under ``python -O`` too (issue 10, point 7 /
coordinator part): they raise ``CoordinatorInvariantError`` instead of ``assert``, which -O strips,
and the group coordinator lets them propagate instead of turning them into an answer.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from oncestream.coordinator.group import GroupCoordinator
from oncestream.coordinator.group.config import GroupCoordinatorConfig
from oncestream.coordinator.group.messages import NO_MEMBER_ID, PartitionOffsetCommit
from oncestream.coordinator.txn.config import TxnCoordinatorConfig
from oncestream.errors import CoordinatorInvariantError, InvalidConfigError
from oncestream.topic_partition import TopicPartition

SRC = Path(__file__).resolve().parents[2] / "src"

# An epoch going backwards must never reach the transaction log, optimised or not.
_EPOCH_BACKWARDS = """
from oncestream.coordinator.txn.metadata import PendingTransition, TransactionMetadata, TxnSnapshot, WriteKind
from oncestream.errors import CoordinatorInvariantError
import dataclasses
current = dataclasses.replace(TxnSnapshot.fresh(7, 60_000, 0), producer_epoch=5)
older = dataclasses.replace(current, producer_epoch=4)
meta = TransactionMetadata("tid", current)
try:
    meta.prepare(PendingTransition(1, WriteKind.INIT_PRODUCER_ID, older, older.state))
except CoordinatorInvariantError:
    print("refused")
else:
    print("accepted")
"""


def test_invariants_are_checked_under_python_dash_o():
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run([sys.executable, "-O", "-c", _EPOCH_BACKWARDS], env=env, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "refused", out.stderr


def test_group_coordinator_does_not_answer_a_broken_invariant():
    """A transactional offset commit without a producer id is a broker bug: it propagates as
    CoordinatorInvariantError instead of becoming a per-partition error code."""
    coord = GroupCoordinator()
    with pytest.raises(CoordinatorInvariantError):
        coord.add_pending_txn_offsets("g", -1, {TopicPartition("t", 0): PartitionOffsetCommit(1)}, 0,
                                      member_id=NO_MEMBER_ID)


def test_invariant_errors_say_what_went_wrong_in_words_with_the_values() -> None:
    """Issue 19: no ``invariant violated: <python expression>``; the property and the value."""
    with pytest.raises(InvalidConfigError, match=r"^transaction\.max\.timeout\.ms must be between 1 and 2147483647, got 0$"):
        TxnCoordinatorConfig(transaction_max_timeout_ms=0)
    with pytest.raises(InvalidConfigError, match=r"^group\.max\.size must be positive, got -3$"):
        GroupCoordinatorConfig(group_max_size=-3)
    between = r"group\.min\.session\.timeout\.ms \(9\) .* group\.max\.session\.timeout\.ms \(5\)"
    with pytest.raises(InvalidConfigError, match=between):
        GroupCoordinatorConfig(group_min_session_timeout_ms=9, group_max_session_timeout_ms=5)
