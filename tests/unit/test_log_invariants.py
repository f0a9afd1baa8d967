"""Invariants of the partition log raise LogInvariantError, a StorageError, not AssertionError
(issue 10 point 7: ``python -O`` strips ``assert``, and an invariant that guards data must hold in
every build)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import oncestream.log
from oncestream.errors import LogInvariantError, StorageError
from oncestream.log.index import OffsetIndex, TimeIndex
from oncestream.log.segment import Segment
from oncestream.log.txn_index import AbortedTxn, TxnIndex

LOG_PACKAGE = Path(oncestream.log.__file__).parent
# The record decoder helper belongs to the codec (protocol/) work; its checks are not log invariants.
NOT_LOG_INVARIANTS = {"batch_records.py"}


def test_no_assert_statement_guards_the_log() -> None:
    found = []
    for path in sorted(LOG_PACKAGE.glob("*.py")):
        if path.name in NOT_LOG_INVARIANTS:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Assert):
                found.append(f"{path.name}:{node.lineno}")
    assert found == []


def test_index_entries_out_of_order_are_refused(tmp_path) -> None:
    offsets = OffsetIndex.empty(tmp_path / "0.index")
    offsets.append(5, 100)
    with pytest.raises(LogInvariantError, match="offset index must grow"):
        offsets.append(5, 200)
    times = TimeIndex.empty(tmp_path / "0.timeindex")
    times.append(1000, 1)
    with pytest.raises(LogInvariantError, match="timestamps must grow"):
        times.append(1000, 2)
    assert issubclass(LogInvariantError, StorageError)  # answered KAFKA_STORAGE_ERROR at the edge


def test_segment_refuses_reads_outside_its_file_and_appends_after_close(tmp_path) -> None:
    segment = Segment.create(tmp_path, 0, 0)
    with pytest.raises(LogInvariantError):
        segment.read(0, 10)  # beyond its (empty) size
    segment.close()
    with pytest.raises(LogInvariantError):
        segment.append([], 4096, 0)


def test_txn_index_markers_must_grow(tmp_path) -> None:
    index = TxnIndex.write_new(tmp_path, 0, [AbortedTxn(1, 0, 10, 11)])
    with pytest.raises(LogInvariantError, match="offset order"):
        index.append(AbortedTxn(2, 3, 9, 10))
    with pytest.raises(LogInvariantError):
        AbortedTxn(-1, 0, 0, 0)


def test_the_checks_survive_python_dash_o(tmp_path) -> None:
    """The same check in an interpreter that strips asserts."""
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from oncestream.errors import LogInvariantError\n"
        "from oncestream.log.index import OffsetIndex\n"
        "index = OffsetIndex.empty(Path(sys.argv[1]))\n"
        "index.append(5, 100)\n"
        "try:\n"
        "    index.append(4, 200)\n"
        "except LogInvariantError:\n"
        "    print('refused')\n"
        "else:\n"
        "    print('accepted')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-O", "-c", script, str(tmp_path / "0.index")],
        capture_output=True, text=True, check=True, env=env,
    )
    assert out.stdout.strip() == "refused"
