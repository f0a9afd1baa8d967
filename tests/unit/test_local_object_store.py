"""The directory store's own promises beyond the shared contract (tests/interop/test_object_store_s3.py):
a put that fails half-way leaves the previous object whole and no temporary file behind, and a
temporary file a crash left is never listed or readable as a key."""

from __future__ import annotations

import io
from pathlib import Path
from typing import BinaryIO, cast

import pytest

from oncestream.errors import RemoteObjectNotFoundError, RemoteStorageError
from oncestream.remote.local_store import LocalObjectStore


class _FailingFile(io.RawIOBase):
    """A file whose disk fails after ``good_bytes`` (EIO from readinto)."""

    def __init__(self, good_bytes: int) -> None:
        self.remaining = good_bytes

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self.remaining == 0:
            raise OSError(5, "Input/output error")
        count = min(len(buffer), self.remaining)
        buffer[:count] = b"n" * count
        self.remaining -= count
        return count


def test_a_put_that_fails_half_way_keeps_the_old_object_and_leaves_no_temporary(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "store")
    store.put("t-0/0/seg.log", b"old object")
    with pytest.raises(RemoteStorageError, match="Input/output error") as raised:
        store.put_file("t-0/0/seg.log", cast(BinaryIO, _FailingFile(3 << 20)), 4 << 20)
    assert "'t-0/0/seg.log'" in str(raised.value)
    assert store.get("t-0/0/seg.log") == b"old object"
    assert sorted(path.name for path in (tmp_path / "store" / "t-0" / "0").iterdir()) == ["seg.log"]


def test_a_temporary_file_left_by_a_crash_is_not_an_object(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "store")
    store.put("t-0/0/seg.log", b"whole")
    leftover = tmp_path / "store" / "t-0" / "0" / ".oncestream-put-0123abcd"
    leftover.write_bytes(b"torn")
    assert store.list("") == ["t-0/0/seg.log"]
    with pytest.raises(RemoteStorageError, match="reserved name"):
        store.put("t-0/0/.oncestream-put-0123abcd", b"x")


def test_keys_are_files_below_the_root(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "store")
    store.put("a/b/c.index", b"abc")
    assert (tmp_path / "store" / "a" / "b" / "c.index").read_bytes() == b"abc"
    with pytest.raises(RemoteObjectNotFoundError):
        store.get("a/b")  # a directory is not an object
    store.delete("a/b/c.index")
    assert store.list("") == []
