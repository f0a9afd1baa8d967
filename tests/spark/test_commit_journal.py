"""The sink's commit journal: the last record of a query is found however many records of other
queries follow it, and a query without records has none."""

from __future__ import annotations

import pytest

from oncestream.spark.commit_journal import CommitJournal, CommitRecord
from tests.support.narrow import present

pytestmark = pytest.mark.spark


def test_last_record_per_query_survives_interleaving(eos_broker):
    journal = CommitJournal(eos_broker.bootstrap)
    try:
        assert journal.last("never-ran") is None
        journal.append(CommitRecord("q-target", 1, {"p-q-target-0-0": "5:1"}))
        journal.append(CommitRecord("q-target", 2, {"p-q-target-0-0": "5:3", "p-q-target-1-0": "6:3"}))
        for i in range(300):  # more than the first backwards window (64 records)
            journal.append(CommitRecord(f"q-other-{i % 7}", i, {}))
        record = journal.last("q-target")
        assert record == CommitRecord("q-target", 2, {"p-q-target-0-0": "5:3", "p-q-target-1-0": "6:3"})
        assert present(journal.last("q-other-3"), "last record of q-other-3").batch_id == 297
    finally:
        journal.close()
