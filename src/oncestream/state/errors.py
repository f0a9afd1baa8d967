"""Typed errors of the transactional state store (``oncestream.state``).

They are not Kafka errors: a state store is local to one process and never answers a client
directly. Every one of them means "the store did not change" or "the store cannot be trusted and
was not opened"; none of them is raised after a partial change.
"""

from __future__ import annotations


class StateStoreError(Exception):
    """Base of every error raised by ``oncestream.state``."""


class IncompatibleFormatError(StateStoreError):
    """The directory holds a store written in another format version (its marker says which)."""


class StoreCorruptedError(StateStoreError):
    """The directory is not a readable store: marker missing or torn, RocksDB files missing or
    torn, or the creation sentinel gone. Nothing was opened; the directory was not touched."""


class CommitFailedError(StateStoreError):
    """``commit`` could not make its batch durable (full disk, I/O error).

    RocksDB applies a write batch atomically, so the previous commit is intact. The store refuses
    every further write and commit: the owner closes it and opens it again, which recovers the
    last commit (the pending writes are lost, as after a crash)."""


class StoreFailedError(StateStoreError):
    """The store was poisoned by an earlier ``CommitFailedError`` (or closed) and must be reopened."""


class UncommittedLimitError(StateStoreError):
    """A write would take the pending writes past the hard limit (twice
    ``statestore.uncommitted.max.bytes``): the owner ignored ``commit_needed``. The write was not
    applied."""


class OffsetRegressionError(StateStoreError):
    """``commit`` was given a changelog offset lower than the one already committed. Offsets only
    grow; a changelog that went backwards (topic recreated) is handled by wiping the store."""


class StoreLockedError(StateStoreError):
    """Another store object or process has the directory open (RocksDB's LOCK file)."""
