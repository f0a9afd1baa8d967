"""The format marker of a state store directory.

``STATE_FORMAT`` is a small JSON file written atomically by ``oncestream.durable_files`` (temp
file, fsync, rename, fsync of the directory). It says which format version wrote the directory and
whether creation finished:

- ``creating``: the marker is written *before* RocksDB is created, so a crash during creation
  leaves a directory that is known to hold nothing committed and may be recreated;
- ``ready``: creation finished (the RocksDB sentinel is durable). From then on a missing RocksDB
  file or sentinel is corruption, never "a new empty store".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from oncestream.durable_files import write_file_atomically
from oncestream.state.errors import IncompatibleFormatError, StoreCorruptedError

MARKER_NAME = "STATE_FORMAT"
MAGIC = "oncestream-state-store"
FORMAT_VERSION = 1
STATUS_CREATING = "creating"
STATUS_READY = "ready"
_STATUSES = (STATUS_CREATING, STATUS_READY)
# A marker is a few dozen bytes; anything much larger is not ours.
_MAX_MARKER_BYTES = 4096


@dataclass(frozen=True)
class FormatMarker:
    """Parsed contents of ``STATE_FORMAT``."""

    version: int
    status: str


def marker_path(directory: Path) -> Path:
    """Path of the marker file inside a store directory."""
    return directory / MARKER_NAME


def write_marker(directory: Path, status: str) -> None:
    """Atomically (re)write the marker with the current format version and ``status``."""
    if status not in _STATUSES:
        raise ValueError(f"unknown marker status {status!r}")
    body = json.dumps({"magic": MAGIC, "format_version": FORMAT_VERSION, "status": status}).encode()
    write_file_atomically(marker_path(directory), body)


def read_marker(directory: Path) -> FormatMarker:
    """Read and check the marker.

    Raises ``StoreCorruptedError`` when it is missing, torn or not ours, and
    ``IncompatibleFormatError`` when another format version wrote it.
    """
    path = marker_path(directory)
    try:
        with open(path, "rb") as f:
            raw = f.read(_MAX_MARKER_BYTES + 1)
    except FileNotFoundError:
        raise StoreCorruptedError(f"{directory}: not empty but has no {MARKER_NAME} marker") from None
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise StoreCorruptedError(f"{path}: torn or unreadable format marker") from None
    if not isinstance(doc, dict) or doc.get("magic") != MAGIC:
        raise StoreCorruptedError(f"{path}: not an oncestream state store marker")
    version = doc.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise StoreCorruptedError(f"{path}: format_version missing or not an integer")
    if version != FORMAT_VERSION:
        raise IncompatibleFormatError(
            f"{directory}: written in state store format {version}, this code reads format {FORMAT_VERSION}")
    status = doc.get("status")
    if status not in _STATUSES:
        raise StoreCorruptedError(f"{path}: unknown status {status!r}")
    return FormatMarker(version=version, status=status)

