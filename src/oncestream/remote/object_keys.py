"""What an object key may be, checked the same way by every ``ObjectStore`` implementation.

Its own module so that the stores and ``object_store`` (which opens them) do not import each other.
"""

from __future__ import annotations

from oncestream.errors import RemoteStorageError


def check_key(key: str, store: str) -> None:
    """RemoteStorageError unless ``key`` is a relative ``/``-separated path of plain names: no
    empty, ``.`` or ``..`` part (a directory store would leave its root; S3 would normalise
    it differently), no control characters."""
    parts = key.split("/")
    if not key or any(part in ("", ".", "..") for part in parts):
        raise RemoteStorageError(f"object key {key!r} on {store}: not a relative path of names")
    if any(ord(char) < 0x20 or char in "\\\x7f" for char in key):
        raise RemoteStorageError(f"object key {key!r} on {store}: control character or backslash")
