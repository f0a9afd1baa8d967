"""Durable small files: the one place oncestream writes a file atomically or fsyncs a directory.

``write_file_atomically`` is the classic sequence: write a ``<name>.tmp`` sibling, fsync it,
rename it over the target, fsync the directory. A crash at any point leaves either the old file
or the new one, never a torn one, and once it returns the new one survives a power loss. Leftover
``.tmp`` files are removed when a log directory is opened (``PartitionLog``, ``LogManager``).

Used for the log's checkpoints, producer snapshots, aborted-transaction indexes, topic metadata
and compaction manifest, the broker's ``meta.properties``, producer-id blocks, ACLs, SCRAM
credentials, dynamic broker configs and state-store format markers. Below every layer (it imports
nothing of oncestream), so each of them uses this one sequence.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
TMP_SUFFIX = ".tmp"


def fsync_directory(directory: Path, *, fsync: Callable[[int], None] | None = None) -> None:
    """Make creations, renames and deletions inside ``directory`` durable (``fsync`` replaces
    ``os.fsync``: a flush job's injected disk)."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)
    try:
        (os.fsync if fsync is None else fsync)(fd)
    finally:
        os.close(fd)


def tmp_path_for(path: Path) -> Path:
    """The temporary sibling ``write_file_atomically`` writes before renaming."""
    return path.with_name(path.name + TMP_SUFFIX)


def write_file_atomically(
    path: Path,
    data: bytes,
    *,
    sync_directory: bool = True,
    rename: Callable[[Path, Path], None] | None = None,
    fsync: Callable[[int], None] | None = None,
    mode: int = 0o644,
) -> None:
    """Replace ``path`` with ``data`` all at once and durably; OSError on failure (the old file,
    if any, is then untouched). ``sync_directory=False`` leaves the directory fsync to a caller
    that renames several files and syncs once; ``rename`` and ``fsync`` (default: ``os``'s) let a
    caller observe those steps. ``mode``: the new file's permissions (before the umask; 0o600 for
    files only their owner may read)."""

    def write(fd: int) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    write_file_atomically_with(path, write, sync_directory=sync_directory, rename=rename, fsync=fsync, mode=mode)


def write_file_atomically_with(
    path: Path,
    write: Callable[[int], None],
    *,
    tmp_path: Path | None = None,
    sync_directory: bool = True,
    rename: Callable[[Path, Path], None] | None = None,
    fsync: Callable[[int], None] | None = None,
    mode: int = 0o644,
) -> None:
    """``write_file_atomically`` with the content streamed by ``write(fd)`` into the temporary
    file (tiered storage's directory store copies whole segments that way, too large to hold in
    memory). ``tmp_path`` (default ``tmp_path_for(path)``) lets writers that may run at once on
    the same directory use names of their own. On failure the temporary file stays, as with
    ``write_file_atomically``; the caller removes it or the next open does."""
    if tmp_path is None:
        tmp_path = tmp_path_for(path)
    with_mode = os.path.exists(tmp_path)
    fd = os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _CLOEXEC, mode)
    if with_mode:  # a leftover temporary file keeps its own permissions otherwise
        os.fchmod(fd, mode)
    try:
        write(fd)
        (os.fsync if fsync is None else fsync)(fd)
    finally:
        os.close(fd)
    (os.replace if rename is None else rename)(tmp_path, path)
    if sync_directory:
        fsync_directory(path.parent, fsync=fsync)
