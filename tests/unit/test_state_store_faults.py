"""Bad directories and faults (issue 13, part 4): another format version, a missing or torn
file, a full disk during commit. Always a typed error with the directory untouched and the
previous commit intact; never a silently empty or half-applied store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from oncestream.state import IncompatibleFormatError, StateStore, StoreCorruptedError
from oncestream.state.format import MARKER_NAME, STATUS_CREATING, write_marker
from oncestream.state.store import DB_DIR_NAME


def _committed_store(directory: Path, *, flush: bool = False) -> None:
    with StateStore(directory) as store:
        for i in range(100):
            store.put(b"k%03d" % i, b"v" * 100)
        store.commit({("t", 0): 100})
        if flush:
            store._db.flush()  # move the data into SST files


def _marker(directory: Path) -> dict:
    return json.loads((directory / MARKER_NAME).read_text())


def test_other_format_version_is_refused_and_left_alone(tmp_path):
    directory = tmp_path / "s"
    _committed_store(directory)
    doc = _marker(directory)
    doc["format_version"] = 2
    (directory / MARKER_NAME).write_text(json.dumps(doc))
    with pytest.raises(IncompatibleFormatError, match="format 2"):
        StateStore(directory)
    assert _marker(directory)["format_version"] == 2
    assert (directory / DB_DIR_NAME / "CURRENT").exists()


@pytest.mark.parametrize("body", [b"", b'{"magic": "oncestream-state-st', b"\x00" * 40, b"[1, 2]"])
def test_torn_or_foreign_marker_is_corruption(tmp_path, body):
    directory = tmp_path / "s"
    _committed_store(directory)
    (directory / MARKER_NAME).write_bytes(body)
    with pytest.raises(StoreCorruptedError):
        StateStore(directory)


def test_missing_marker_in_a_non_empty_directory_is_corruption(tmp_path):
    directory = tmp_path / "s"
    _committed_store(directory)
    (directory / MARKER_NAME).unlink()
    with pytest.raises(StoreCorruptedError, match="no STATE_FORMAT"):
        StateStore(directory)


def test_missing_rocksdb_directory_is_corruption_not_a_new_empty_store(tmp_path):
    directory = tmp_path / "s"
    _committed_store(directory)
    for name in os.listdir(directory / DB_DIR_NAME):
        os.unlink(directory / DB_DIR_NAME / name)
    with pytest.raises(StoreCorruptedError, match="missing"):
        StateStore(directory)
    assert not (directory / DB_DIR_NAME / "CURRENT").exists()  # nothing was recreated


@pytest.mark.parametrize("victim", ["sst", "manifest"])
def test_missing_rocksdb_file_is_corruption(tmp_path, victim):
    directory = tmp_path / "s"
    _committed_store(directory, flush=True)
    db_dir = directory / DB_DIR_NAME
    names = sorted(os.listdir(db_dir))
    target = [n for n in names if n.endswith(".sst")][-1] if victim == "sst" else \
        next(n for n in names if n.startswith("MANIFEST-"))
    os.unlink(db_dir / target)
    with pytest.raises(StoreCorruptedError):
        StateStore(directory)


def test_torn_sst_file_is_corruption(tmp_path):
    directory = tmp_path / "s"
    _committed_store(directory, flush=True)
    db_dir = directory / DB_DIR_NAME
    sst = max((n for n in os.listdir(db_dir) if n.endswith(".sst")), key=lambda n: (db_dir / n).stat().st_size)
    size = (db_dir / sst).stat().st_size
    os.truncate(db_dir / sst, size // 2)
    with pytest.raises(StoreCorruptedError), StateStore(directory) as store:
        list(store.range())  # if open did not notice, reading must not return partial data


def test_interrupted_creation_is_recreated_empty(tmp_path):
    """The marker says ``creating``: nothing was ever committed, so starting again loses nothing."""
    directory = tmp_path / "s"
    directory.mkdir()
    write_marker(directory, STATUS_CREATING)
    (directory / DB_DIR_NAME).mkdir()
    (directory / DB_DIR_NAME / "000001.log").write_bytes(b"half-written")
    with StateStore(directory) as store:
        assert list(store.range()) == []
        assert store.committed_offsets() == {}
        store.put(b"a", b"1")
        store.commit({("t", 0): 1})
    assert _marker(directory)["status"] == "ready"
    with StateStore(directory) as store:
        assert store.get(b"a") == b"1"


def test_real_write_failure_during_commit_keeps_the_previous_commit(tmp_path):
    """A real I/O failure, not an injected one: RLIMIT_FSIZE makes the WAL append fail (EFBIG,
    as a full disk fails with ENOSPC). The commit raises CommitFailedError; reopened (limit
    lifted), the store holds exactly the previous commit."""
    directory = tmp_path / "s"
    script = textwrap.dedent(f"""
        import resource, signal, sys
        from oncestream.state import StateStore, CommitFailedError
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        store = StateStore({str(directory)!r})
        store.put(b"a", b"committed")
        store.commit({{("t", 0): 1}})
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, hard))
        for i in range(200):
            store.put(b"big%03d" % i, b"x" * 20000)   # 4 MB: more than the 1 MB limit
        store.put(b"a", b"never")
        try:
            store.commit({{("t", 0): 2}})
        except CommitFailedError as exc:
            print("COMMIT-FAILED", exc)
        else:
            print("COMMIT-SUCCEEDED")
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        store.close()
    """)
    env = dict(os.environ)
    result = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True,
                            env=env, timeout=120)
    assert "COMMIT-FAILED" in result.stdout, (result.stdout, result.stderr[-2000:])
    with StateStore(directory) as store:
        assert store.committed_offsets() == {("t", 0): 1}
        assert list(store.range()) == [(b"a", b"committed")]


def test_crash_while_writing_the_first_marker_is_an_empty_directory(tmp_path):
    directory = tmp_path / "s"
    directory.mkdir()
    (directory / (MARKER_NAME + ".tmp")).write_bytes(b'{"magic": "onces')
    with StateStore(directory) as store:
        store.put(b"a", b"1")
        store.commit()
    assert _marker(directory)["status"] == "ready"
