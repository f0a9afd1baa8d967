"""An object store in a local directory (``file:///path``): for tests and shared file systems.

Keys map to files below the root (``a/b/c`` is ``ROOT/a/b/c``). A put is durable_files' sequence
(``write_file_atomically_with``): it writes a temporary sibling (``.oncestream-put-<random>``, a
name of its own so that puts may run at once, never listed), fsyncs it, renames it over the key and
fsyncs the directory: a reader sees the old object or the whole new one, and once ``put`` returns the object
survives a power loss, as an S3 PUT does. Directories created for a key are fsynced into their
parents too. Ranged reads use ``os.pread`` (no shared file offset, so threads need no lock).
Empty directories left by deletes are kept: removing them would race with a concurrent put into
the same directory.
"""

from __future__ import annotations

import builtins
import errno
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, NoReturn

from oncestream.durable_files import fsync_directory, write_file_atomically_with
from oncestream.errors import (
    RemoteAccessDeniedError,
    RemoteObjectNotFoundError,
    RemoteStorageError,
)
from oncestream.remote.object_keys import check_key

_TMP_PREFIX = ".oncestream-put-"
_COPY_CHUNK_BYTES = 1 << 20
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class LocalObjectStore:
    """The ``ObjectStore`` of a directory (created when missing); thread-safe, no shared state."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.description = self.root.as_uri()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self._raise(exc, "", "create the store directory")

    # --- writes -----------------------------------------------------------------------------

    def put(self, key: str, data: bytes | memoryview) -> None:
        """Store ``data`` under ``key`` atomically and durably."""

        def write(fd: int) -> None:
            view = memoryview(data).cast("B")
            while view:
                view = view[os.write(fd, view) :]

        self._put_with(key, write)

    def put_file(self, key: str, file: BinaryIO, size: int) -> None:
        """Store the next ``size`` bytes of ``file`` under ``key``, copied in 1 MiB chunks."""
        if size < 0:
            raise ValueError(f"put_file of {key!r}: size {size} is negative")

        def write(fd: int) -> None:
            buffer = bytearray(min(_COPY_CHUNK_BYTES, size))
            remaining = size
            while remaining:
                chunk = memoryview(buffer)[: min(len(buffer), remaining)]
                got = file.readinto(chunk)  # type: ignore[attr-defined]
                if not got:
                    raise RemoteStorageError(
                        f"put_file of {key!r} on {self.description}: the file ended"
                        f" {remaining} bytes before the {size} bytes promised"
                    )
                view = chunk[:got]
                while view:
                    view = view[os.write(fd, view) :]
                remaining -= got

        self._put_with(key, write)

    def delete(self, key: str) -> None:
        """Remove the object (durably); a missing key is fine."""
        check_key(key, self.description)
        path = self.root / key
        try:
            path.unlink()
        except FileNotFoundError:
            return
        except NotADirectoryError:  # a parent "directory" is a file: the key cannot exist
            return
        except OSError as exc:
            self._raise(exc, key, "delete")
        try:
            fsync_directory(path.parent)
        except OSError as exc:
            self._raise(exc, key, "delete")

    # --- reads ------------------------------------------------------------------------------

    def get(self, key: str) -> bytes:
        """The whole object."""
        check_key(key, self.description)
        try:
            return (self.root / key).read_bytes()
        except OSError as exc:
            self._raise(exc, key, "read")

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)``; short (or empty) where the object ends first."""
        check_key(key, self.description)
        if start < 0 or end < start:
            raise ValueError(f"get_range of {key!r}: bad range [{start}, {end})")
        try:
            fd = os.open(self.root / key, os.O_RDONLY | _CLOEXEC)
        except OSError as exc:
            self._raise(exc, key, "read")
        try:
            chunks = []
            position = start
            while position < end:
                chunk = os.pread(fd, end - position, position)
                if not chunk:
                    break
                chunks.append(chunk)
                position += len(chunk)
            return b"".join(chunks)
        except OSError as exc:
            self._raise(exc, key, "read")
        finally:
            os.close(fd)

    def size(self, key: str) -> int:
        """The object's length in bytes."""
        check_key(key, self.description)
        try:
            return (self.root / key).stat().st_size
        except OSError as exc:
            self._raise(exc, key, "stat")

    def list(self, prefix: str) -> builtins.list[str]:
        """Keys starting with ``prefix``, sorted; walks only the directory the prefix names."""
        directory, _, _ = prefix.rpartition("/")
        start = self.root / directory if directory else self.root
        keys: builtins.list[str] = []

        def on_error(exc: OSError) -> None:
            if not isinstance(exc, (FileNotFoundError, NotADirectoryError)):
                self._raise(exc, prefix, "list")

        for dirpath, _dirnames, filenames in os.walk(start, onerror=on_error):
            relative = Path(dirpath).relative_to(self.root).as_posix()
            for name in filenames:
                if name.startswith(_TMP_PREFIX):
                    continue
                key = name if relative == "." else f"{relative}/{name}"
                if key.startswith(prefix):
                    keys.append(key)
        keys.sort()
        return keys

    # --- helpers ----------------------------------------------------------------------------

    def _put_with(self, key: str, write: Callable[[int], None]) -> None:
        check_key(key, self.description)
        if key.rsplit("/", 1)[-1].startswith(_TMP_PREFIX):
            raise RemoteStorageError(f"object key {key!r} on {self.description}: reserved name")
        path = self.root / key
        tmp = path.with_name(f"{_TMP_PREFIX}{uuid.uuid4().hex}")
        try:
            self._make_parents(path.parent)
            write_file_atomically_with(path, write, tmp_path=tmp)
        except BaseException as exc:
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass  # the failure that brought us here is the one to report
            if isinstance(exc, OSError):
                self._raise(exc, key, "write", missing_is_not_found=False)
            raise

    def _make_parents(self, directory: Path) -> None:
        """Create ``directory`` and its missing parents below the root, each one durable."""
        missing = []
        while directory != self.root and not directory.is_dir():
            missing.append(directory)
            directory = directory.parent
        for created in reversed(missing):
            try:
                created.mkdir()
            except FileExistsError:
                if not created.is_dir():
                    raise
            fsync_directory(created.parent)

    def _raise(
        self, exc: OSError, key: str, action: str, *, missing_is_not_found: bool = True
    ) -> NoReturn:
        where = f"{key!r} on {self.description}" if key else self.description
        message = f"{action} {where}: {exc.strerror or exc}"
        missing = (FileNotFoundError, NotADirectoryError, IsADirectoryError)
        if missing_is_not_found and isinstance(exc, missing):
            raise RemoteObjectNotFoundError(f"no object {where} ({action})") from exc
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise RemoteAccessDeniedError(message) from exc
        raise RemoteStorageError(message) from exc
