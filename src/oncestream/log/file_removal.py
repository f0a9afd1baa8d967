"""Removing files and directories the logs no longer use, on any thread.

Deleting a large segment (or a topic's directories, thousands of files) can keep ``unlink`` busy
for long on a slow or busy disk, so the log forgets the files on its own thread (a deleted
segment is out of the segment list and its descriptor closed before its files are handed here:
no reader of the log can reach them any more) and the owner runs the removal wherever it likes
(the broker: its disk threads). Nothing here is fsynced: a deletion that a crash undoes leaves
files that are deleted again after the next open (segments below the durable log start or
expired by retention, orphan directories), as when the unlink ran inline and the directory was
not synced yet.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from oncestream.errors import StorageError


@dataclass(eq=False)
class FileRemoval:
    """Files to unlink, in order (a segment's ``.log`` before its indexes: a crash in between
    leaves orphan indexes, which the next open removes), and directories to remove whole."""

    files: list[Path] = field(default_factory=list)
    directories: list[Path] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.files or self.directories)

    def run(self) -> None:
        """Remove everything (missing files are fine); StorageError naming the first file that
        could not be removed, after trying the rest."""
        first_error: OSError | None = None
        failed: Path | None = None
        for path in self.files:
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                first_error, failed = first_error or exc, failed or path
        for directory in self.directories:
            try:
                shutil.rmtree(directory)
            except FileNotFoundError:
                continue
            except OSError as exc:  # left as an orphan: the next start removes it
                first_error, failed = first_error or exc, failed or directory
        if first_error is not None:
            raise StorageError(f"cannot remove {failed}: {first_error}") from first_error
