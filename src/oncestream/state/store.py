"""``StateStore``: a transactional key-value store on RocksDB (KIP-892).

Writes (``put``/``delete``/``write``) go to an in-memory indexed batch (``PendingWrites``: a
dict index plus the RocksDB ``WriteBatch`` the writes are added to as they come) and never touch
RocksDB until ``commit(offsets)``, which adds the given changelog offsets (their own column
family) to that batch and writes it, data and offsets together, with a synced WAL.
RocksDB applies a batch atomically and recovers a synced batch after any crash, so the data on
disk is always exactly some commit: reopening after a crash gives the last commit back, the
uncommitted writes are simply gone and nothing is replayed.

Readers:

- the writer itself (``get``/``range``/``prefix`` on the store, or ``reader("read_uncommitted")``)
  sees its pending writes over the committed data, as KIP-892's processing thread does;
- ``reader("read_committed")`` sees committed data only, frozen at one commit: it holds RocksDB
  iterators created together under the commit lock (each pins an implicit snapshot), so a reader
  racing with commits sees the state before or after a batch, never part of one. rocksdict's own
  ``Snapshot.iter`` does not honour the snapshot (0.3.29: it iterates the live DB), which is why
  the reader seeks one pinned iterator for point reads and scans alike.

``statestore.uncommitted.max.bytes``: once the pending writes reach it, ``commit_needed`` turns
True (and ``on_commit_needed`` is called once); the owner commits at its next step. A write that
would take the pending writes past twice the bound raises ``UncommittedLimitError`` and is not
applied: memory stays bounded even when the owner ignores the flag.

Sans-io: no threads and no clock inside. The store is driven by one writer thread; readers may
live on other threads (the lock only orders iterator creation against commits).
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Self, overload

import rocksdict

from oncestream.state import format as fmt
from oncestream.state.errors import (
    CommitFailedError,
    OffsetRegressionError,
    StateStoreError,
    StoreCorruptedError,
    StoreFailedError,
    StoreLockedError,
    UncommittedLimitError,
)
from oncestream.state.pending import PendingWrites, entry_size_bytes

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
FaultHook = Callable[[str], None]

DB_DIR_NAME = "rocksdb"
OFFSETS_CF = "offsets"
DEFAULT_UNCOMMITTED_MAX_BYTES = 64 * 1024 * 1024
# Flush memtables once this many bytes were committed since the last flush: RocksDB replays the
# WAL written since the last flush when it opens after a crash (and writes it out to SST files),
# so this bounds recovery time (about 50 ms at 4 MiB for a 1M-key store, bench/state_store.py
# open); without it the WAL grows to the 64 MiB write buffer, and further (see _flush_memtables).
DEFAULT_FLUSH_AFTER_BYTES = 4 * 1024 * 1024
# The hard bound is this many times statestore.uncommitted.max.bytes (see module docstring).
HARD_LIMIT_FACTOR = 2
# Fault points reached by every commit, in order (test-only crash injection, see fault_hook).
COMMIT_FAULT_POINTS = ("before-batch", "inside-batch", "write", "after-batch")

_OFFSET_PREFIX = b"o"
_SENTINEL_KEY = b"s:format"
_SENTINEL_VALUE = str(fmt.FORMAT_VERSION).encode()
_OFFSET_VALUE = struct.Struct(">q")
_PARTITION = struct.Struct(">i")

ISOLATION_LEVELS = ("read_committed", "read_uncommitted")


def _offset_key(topic: str, partition: int) -> bytes:
    return _OFFSET_PREFIX + topic.encode() + b"\x00" + _PARTITION.pack(partition)


def _parse_offset_key(key: bytes) -> TopicPartition:
    body = key[len(_OFFSET_PREFIX):]
    if len(body) < _PARTITION.size + 1 or body[-_PARTITION.size - 1] != 0:
        raise StoreCorruptedError(f"malformed offsets key {key!r}")
    return body[:-_PARTITION.size - 1].decode(), _PARTITION.unpack(body[-_PARTITION.size:])[0]


def prefix_end(prefix: bytes) -> bytes | None:
    """Smallest key greater than every key starting with ``prefix`` (None: no such key)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


def _check_bytes(name: str, value: object) -> None:
    if not isinstance(value, bytes):
        raise TypeError(f"{name} must be bytes, got {type(value).__name__}")


def _iterate(it: rocksdict.RdictIter, start: bytes | None, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
    """Scan an iterator over ``[start, end)``."""
    if start is None:
        it.seek_to_first()
    else:
        it.seek(start)
    while it.valid():
        key = it.key()
        if end is not None and key >= end:
            return
        yield key, it.value()
        it.next()


def _merge(pending: Iterator[tuple[bytes, bytes | None]],
           committed: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
    """Merge pending writes over committed data in key order; a pending entry shadows the
    committed one with the same key and a pending delete hides it."""
    p = next(pending, None)
    c = next(committed, None)
    while p is not None or c is not None:
        if c is None or (p is not None and p[0] <= c[0]):
            if p is None:  # unreachable: c is None here only while p is not
                raise StoreFailedError("merge of pending and committed keys lost its place")
            if c is not None and c[0] == p[0]:
                c = next(committed, None)
            if p[1] is not None:
                yield p[0], p[1]
            p = next(pending, None)
        else:
            yield c
            c = next(committed, None)


class WriteBatch:
    """Writes applied to a store together by ``StateStore.write`` (all or none reach the pending
    writes; they become durable with the next commit like any other write)."""

    def __init__(self) -> None:
        self.ops: list[tuple[bytes, bytes | None]] = []

    def put(self, key: bytes, value: bytes) -> WriteBatch:
        """Add a put."""
        _check_bytes("key", key)
        _check_bytes("value", value)
        self.ops.append((key, value))
        return self

    def delete(self, key: bytes) -> WriteBatch:
        """Add a delete."""
        _check_bytes("key", key)
        self.ops.append((key, None))
        return self

    def __len__(self) -> int:
        return len(self.ops)


class StateStore:
    """A transactional bytes -> bytes store in ``directory`` (see the module docstring).

    ``uncommitted_max_bytes`` is KIP-892's ``statestore.uncommitted.max.bytes``;
    ``on_commit_needed`` is called once each time the pending writes reach it.
    ``flush_after_bytes``: memtables are flushed after that many committed bytes, which bounds
    the WAL RocksDB replays when it opens after a crash.
    ``fault_hook`` (tests only) is called with each name in ``COMMIT_FAULT_POINTS`` during every
    commit; an exception it raises at ``write`` is treated as a failed RocksDB write.
    """

    def __init__(self, directory: str | os.PathLike[str], *,
                 uncommitted_max_bytes: int = DEFAULT_UNCOMMITTED_MAX_BYTES,
                 on_commit_needed: Callable[[], None] | None = None,
                 flush_after_bytes: int = DEFAULT_FLUSH_AFTER_BYTES,
                 fault_hook: FaultHook | None = None) -> None:
        if uncommitted_max_bytes <= 0:
            raise ValueError("uncommitted_max_bytes must be positive")
        self.directory = Path(directory)
        self.uncommitted_max_bytes = uncommitted_max_bytes
        self._on_commit_needed = on_commit_needed
        self._flush_after_bytes = flush_after_bytes
        self._unflushed_bytes = 0
        self._fault = fault_hook or (lambda point: None)
        self._pending = PendingWrites()
        self._commit_signalled = False
        self._failure: str | None = None
        self._lock = threading.Lock()
        # Readers pin RocksDB iterators, which keep the DB (and its LOCK) alive: close drops them.
        self._readers: weakref.WeakSet[CommittedReader] = weakref.WeakSet()
        self._sync = rocksdict.WriteOptions()
        self._sync.sync = True
        self._db, self._offsets_cf = self._open()
        self._offsets_handle = self._db.get_column_family_handle(OFFSETS_CF)
        self._offsets = self._load_offsets()
        self._batch = self._start_batch()
        self.commits = 0

    # --- opening ------------------------------------------------------------------------------

    @staticmethod
    def _options(*, create: bool) -> tuple[rocksdict.Options, dict[str, rocksdict.Options]]:
        opts = rocksdict.Options(raw_mode=True)
        opts.create_if_missing(create)
        opts.create_missing_column_families(create)
        # Flush both column families together: the SST files alone (a lost WAL) are still one
        # commit, data and offsets from the same batch.
        opts.set_atomic_flush(True)
        opts.set_paranoid_checks(True)
        # RocksDB's own bound on live WAL files (flushes the column families pinning old ones),
        # in case the owner never reaches flush_after_bytes in one store object's lifetime.
        opts.set_max_total_wal_size(4 * DEFAULT_FLUSH_AFTER_BYTES)
        # Open time is recovery time: skip reading SST table properties that only feed
        # compaction heuristics (what is read and recovered is unchanged).
        opts.set_skip_stats_update_on_db_open(True)
        return opts, {OFFSETS_CF: rocksdict.Options(raw_mode=True)}

    def _open(self) -> tuple[rocksdict.Rdict, rocksdict.Rdict]:
        directory = self.directory
        directory.mkdir(parents=True, exist_ok=True)
        entries = set(os.listdir(directory))
        if not entries - {fmt.MARKER_NAME + ".tmp"}:
            # Empty, or a crash while the very first marker was being written.
            return self._create()
        marker = fmt.read_marker(directory)
        if marker.status == fmt.STATUS_CREATING:
            # Creation never finished, so nothing was ever committed here: start again.
            log.warning("state store %s: creation was interrupted; creating it again", directory)
            return self._create()
        db_dir = directory / DB_DIR_NAME
        if not (db_dir / "CURRENT").exists():
            raise StoreCorruptedError(f"{db_dir}: RocksDB files missing (no CURRENT)")
        opts, cfs = self._options(create=False)
        try:
            db = rocksdict.Rdict(str(db_dir), opts, column_families=cfs)
        except Exception as exc:  # noqa: BLE001 - rocksdict raises plain Exception for RocksDB errors
            if "/LOCK" in str(exc):
                raise StoreLockedError(f"{db_dir}: in use by another store object or process") from None
            raise StoreCorruptedError(f"{db_dir}: RocksDB refused to open: {exc}") from None
        try:
            offsets_cf = db.get_column_family(OFFSETS_CF)
            sentinel = offsets_cf.get(_SENTINEL_KEY)
        except Exception as exc:  # noqa: BLE001 - as above
            db.close()
            raise StoreCorruptedError(f"{db_dir}: offsets column family unreadable: {exc}") from None
        if sentinel != _SENTINEL_VALUE:
            db.close()
            raise StoreCorruptedError(f"{db_dir}: creation sentinel missing (RocksDB files lost?)")
        return db, offsets_cf

    def _create(self) -> tuple[rocksdict.Rdict, rocksdict.Rdict]:
        directory = self.directory
        fmt.write_marker(directory, fmt.STATUS_CREATING)
        db_dir = directory / DB_DIR_NAME
        if db_dir.exists():
            shutil.rmtree(db_dir)
        opts, cfs = self._options(create=True)
        try:
            db = rocksdict.Rdict(str(db_dir), opts, column_families=cfs)
            batch = rocksdict.WriteBatch(raw_mode=True)
            batch.put(_SENTINEL_KEY, _SENTINEL_VALUE, db.get_column_family_handle(OFFSETS_CF))
            db.write(batch, self._sync)
            # The sentinel goes into SST files, so later it does not depend on any WAL file.
            db.flush()
            db.get_column_family(OFFSETS_CF).flush()
        except Exception as exc:  # rocksdict raises plain Exception
            # The marker still says "creating": the next open starts over.
            raise StateStoreError(f"{db_dir}: creating the store failed: {exc}") from exc
        fmt.write_marker(directory, fmt.STATUS_READY)
        return db, db.get_column_family(OFFSETS_CF)

    def _load_offsets(self) -> dict[TopicPartition, int]:
        offsets: dict[TopicPartition, int] = {}
        it = self._offsets_cf.iter()
        for key, value in _iterate(it, _OFFSET_PREFIX, prefix_end(_OFFSET_PREFIX)):
            if len(value) != _OFFSET_VALUE.size:
                raise StoreCorruptedError(f"{self.directory}: malformed offset value for {key!r}")
            offsets[_parse_offset_key(key)] = _OFFSET_VALUE.unpack(value)[0]
        del it
        return offsets

    @staticmethod
    def destroy(directory: str | os.PathLike[str]) -> None:
        """Delete a (closed) store directory and everything in it."""
        shutil.rmtree(directory, ignore_errors=False)

    # --- writes ------------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise StoreFailedError(f"{self.directory}: {self._failure}; close and reopen the store")

    def _set(self, key: bytes, value: bytes | None) -> None:
        size = self._pending.size_after(key, value)
        if size > self.uncommitted_max_bytes * HARD_LIMIT_FACTOR:
            raise UncommittedLimitError(
                f"{size} uncommitted bytes would exceed {HARD_LIMIT_FACTOR} x "
                f"statestore.uncommitted.max.bytes={self.uncommitted_max_bytes}; commit first")
        self._pending.set(key, value)
        self._after_write()

    def _start_batch(self) -> rocksdict.WriteBatch:
        """A new WriteBatch that every following write is added to (the next commit's batch)."""
        batch = rocksdict.WriteBatch(raw_mode=True)
        self._pending.clear(batch)
        return batch

    def _after_write(self) -> None:
        if self._pending.sink_rebuild_needed():
            # Overwrites of the same keys grew the batch past twice the entries: rebuild it
            # from the index (last write per key), so memory stays within the bound's reach.
            batch = rocksdict.WriteBatch(raw_mode=True)
            self._pending.refill(batch)
            self._batch = batch
        if self._pending.size_bytes >= self.uncommitted_max_bytes and not self._commit_signalled:
            self._commit_signalled = True
            if self._on_commit_needed is not None:
                self._on_commit_needed()

    def put(self, key: bytes, value: bytes) -> None:
        """Write ``key`` (pending until the next commit)."""
        self._check_usable()
        _check_bytes("key", key)
        _check_bytes("value", value)
        self._set(key, value)

    def delete(self, key: bytes) -> None:
        """Delete ``key`` (pending until the next commit)."""
        self._check_usable()
        _check_bytes("key", key)
        self._set(key, None)

    def put_many(self, pairs: Sequence[tuple[bytes | None, bytes | None]], start: int = 0) -> tuple[int, int]:
        """Apply ``(key, value)`` pairs from ``pairs[start]`` on, in order (value None deletes,
        key None is skipped), stopping right after the write that makes ``commit_needed`` true.
        Returns ``(next index, skipped)``: the caller commits and continues from the index.
        The bulk path (one call per poll instead of one per record)."""
        return self._put_many(pairs, start, messages=False)

    def apply_messages(self, messages: Sequence[Any], start: int = 0) -> tuple[int, int]:
        """``put_many`` over changelog messages (objects with ``key()`` and ``value()``, as
        ``oncestream.client`` and confluent-kafka return them): the materializer's hot path."""
        return self._put_many(messages, start, messages=True)

    def apply_columns(self, keys: Sequence[bytes | None], values: Sequence[bytes | None],
                      start: int = 0) -> tuple[int, int]:
        """``put_many`` over two lists (``keys[i]`` written with ``values[i]``; a None value
        deletes, a None key is skipped), as ``client.consumer.batch_reader.PartitionColumns`` holds them:
        the materializer's hot path. Applied in bulk (no Python code per entry) while the lists
        fit below ``statestore.uncommitted.max.bytes``; every write is then counted in full (see
        ``PendingWrites.set_columns``). Returns ``(next index, skipped)`` as ``put_many`` does."""
        self._check_usable()
        try:
            return self._pending.set_columns(keys, values, start, self.uncommitted_max_bytes,
                                             self.uncommitted_max_bytes * HARD_LIMIT_FACTOR)
        except OverflowError as exc:
            raise UncommittedLimitError(f"{exc}; commit first") from None
        finally:
            self._after_write()

    def _put_many(self, items: Sequence[Any], start: int, *, messages: bool) -> tuple[int, int]:
        self._check_usable()
        try:
            return self._pending.set_many(items, start, self.uncommitted_max_bytes,
                                          self.uncommitted_max_bytes * HARD_LIMIT_FACTOR, messages=messages)
        except OverflowError as exc:
            raise UncommittedLimitError(f"{exc}; commit first") from None
        finally:
            self._after_write()

    def write(self, batch: WriteBatch) -> None:
        """Apply every write of ``batch`` to the pending writes, or none of them (hard limit)."""
        self._check_usable()
        projected = PendingWrites()  # last write per key: a key written twice counts once
        for key, value in batch.ops:
            projected.set(key, value)
        size = self._pending.size_bytes
        for key, value in projected.items():
            size += entry_size_bytes(key, value)
            found, old = self._pending.lookup(key)
            if found:
                size -= entry_size_bytes(key, old)
        if size > self.uncommitted_max_bytes * HARD_LIMIT_FACTOR:
            raise UncommittedLimitError(
                f"write batch would take uncommitted bytes to {size}, over {HARD_LIMIT_FACTOR} x "
                f"statestore.uncommitted.max.bytes={self.uncommitted_max_bytes}; commit first")
        for key, value in projected.items():
            self._pending.set(key, value)
        self._after_write()

    @property
    def uncommitted_bytes(self) -> int:
        """Bytes held by pending writes (keys, values and a fixed per-entry overhead)."""
        return self._pending.size_bytes

    @property
    def uncommitted_count(self) -> int:
        """Number of keys with a pending write."""
        return len(self._pending)

    @property
    def uncommitted_batch_bytes(self) -> int:
        """Bytes of the RocksDB WriteBatch holding the pending writes (every write since the last
        commit, overwrites included, until overwrites make it rebuild from the index)."""
        return int(self._batch.size_in_bytes())

    @property
    def commit_needed(self) -> bool:
        """True once the pending writes reached ``statestore.uncommitted.max.bytes``."""
        return self._pending.size_bytes >= self.uncommitted_max_bytes

    def rollback(self) -> None:
        """Discard every pending write (what a crash would do, without the crash)."""
        self._batch = self._start_batch()
        self._commit_signalled = False

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Make every pending write and ``offsets`` (next changelog offset to read, per
        partition) durable in one atomic, WAL-synced RocksDB batch.

        Raises ``OffsetRegressionError`` (nothing written) for an offset below the committed one
        and ``CommitFailedError`` when RocksDB could not write: the previous commit is intact
        and the store must be reopened.
        """
        self._check_usable()
        offsets = dict(offsets or {})
        for (topic, partition), offset in offsets.items():
            if not isinstance(offset, int) or offset < 0:
                raise ValueError(f"offset for {topic}[{partition}] must be a non-negative int")
            previous = self._offsets.get((topic, partition), -1)
            if offset < previous:
                raise OffsetRegressionError(
                    f"offset {offset} for {topic}[{partition}] is below the committed {previous}")
        # The pending writes are in the batch already (added as they were written); the offsets
        # go in now, so the batch is whole only once they are all in.
        batch = self._batch
        self._fault("before-batch")
        offset_items = list(offsets.items())
        half = len(offset_items) // 2
        for (topic, partition), offset in offset_items[:half]:
            batch.put(_offset_key(topic, partition), _OFFSET_VALUE.pack(offset), self._offsets_handle)
        self._fault("inside-batch")
        for (topic, partition), offset in offset_items[half:]:
            batch.put(_offset_key(topic, partition), _OFFSET_VALUE.pack(offset), self._offsets_handle)
        batch_bytes = batch.size_in_bytes()
        with self._lock:
            try:
                self._fault("write")
                self._db.write(batch, self._sync)
            except Exception as exc:
                self._failure = f"commit failed: {exc}"
                raise CommitFailedError(f"{self.directory}: commit failed, previous commit kept: {exc}") from exc
        self._fault("after-batch")
        self._unflushed_bytes += batch_bytes
        if self._unflushed_bytes >= self._flush_after_bytes:
            self._flush_memtables()
        self._offsets.update(offsets)
        self._batch = self._start_batch()
        self._commit_signalled = False
        self.commits += 1

    def _flush_memtables(self) -> None:
        """Write both column families' memtables out so a crash replays little WAL. The commit is
        already durable: a failed flush only costs recovery
        time later, so it is logged, not raised."""
        self._unflushed_bytes = 0
        try:
            # Both column families: the offsets one gets a few bytes per commit and, left
            # alone, would never flush and keep every WAL file since the store was created.
            # wait=False: RocksDB's background thread writes the SST files; the writer goes on.
            self._db.flush(False)
            self._offsets_cf.flush(False)
        except Exception as exc:  # noqa: BLE001 - rocksdict raises plain Exception
            log.warning("state store %s: memtable flush failed (commit is durable): %s", self.directory, exc)

    def committed_offsets(self) -> dict[TopicPartition, int]:
        """Changelog offsets stored by the last commit (next offset to read per partition)."""
        return dict(self._offsets)

    # --- writer's reads (read_uncommitted) ---------------------------------------------------

    def get(self, key: bytes) -> bytes | None:
        """Value of ``key`` including this writer's pending writes, or None."""
        self._check_usable()
        found, value = self._pending.lookup(key)
        if found:
            return value
        return self._db.get(key)

    def range(self, start: bytes | None = None, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` for ``start <= key < end`` in key order, pending writes included."""
        self._check_usable()
        return _merge(self._pending.scan(start, end), self._committed_scan(start, end))

    def _committed_scan(self, start: bytes | None, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        # The iterator is made on the first next(), so an unstarted scan pins nothing.
        yield from _iterate(self._db.iter(), start, end)

    def prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Every ``(key, value)`` whose key starts with ``prefix``, pending writes included."""
        return self.range(prefix, prefix_end(prefix))

    # --- readers -----------------------------------------------------------------------------

    @overload
    def reader(self, isolation: Literal["read_committed"] = ...) -> CommittedReader: ...
    @overload
    def reader(self, isolation: Literal["read_uncommitted"]) -> UncommittedReader: ...
    @overload
    def reader(self, isolation: str) -> CommittedReader | UncommittedReader: ...

    def reader(self, isolation: str = "read_committed") -> CommittedReader | UncommittedReader:
        """A reader at ``isolation`` (``read_committed`` or ``read_uncommitted``)."""
        self._check_usable()
        if isolation == "read_committed":
            return CommittedReader(self)
        if isolation == "read_uncommitted":
            return UncommittedReader(self)
        raise ValueError(f"isolation must be one of {ISOLATION_LEVELS}")

    def _pin(self) -> tuple[rocksdict.RdictIter, rocksdict.RdictIter]:
        """Two iterators (data, offsets) pinned at the same commit."""
        with self._lock:
            self._check_usable()
            return self._db.iter(), self._offsets_cf.iter()

    # --- closing -----------------------------------------------------------------------------

    def close(self) -> None:
        """Close RocksDB; pending writes are discarded (commit first to keep them)."""
        with self._lock:
            if self._failure == "closed":
                return
            self._batch = self._start_batch()  # drops the pending writes and their batch
            self._failure = "closed"
            for reader in list(self._readers):
                reader.close()
            # The column family view and handle share the DB: RocksDB's LOCK is only released
            # once every one of them is gone.
            self._offsets_handle = None  # type: ignore[assignment]
            try:
                self._offsets_cf.close()
                self._db.close()
            except Exception as exc:
                raise StateStoreError(f"{self.directory}: close failed: {exc}") from exc
            finally:
                self._offsets_cf = self._db = None  # type: ignore[assignment]

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CommittedReader:
    """read_committed view of a store, frozen at the commit that was last when it was made
    (``refresh`` moves it to the newest commit). One iterator pinned under the commit lock serves
    point reads and scans, so everything read through one reader is from one commit."""

    def __init__(self, store: StateStore) -> None:
        self._store = store
        self._data, self._offsets = store._pin()
        self._cursor_owner: object = None
        store._readers.add(self)

    def refresh(self) -> None:
        """Move to the newest commit."""
        self._data, self._offsets = self._store._pin()
        self._cursor_owner = None

    def _iterator(self) -> rocksdict.RdictIter:
        if self._data is None:
            raise StoreFailedError("reader closed (or its store was closed)")
        return self._data

    def get(self, key: bytes) -> bytes | None:
        """Committed value of ``key`` at this reader's commit, or None."""
        self._cursor_owner = None
        it = self._iterator()
        it.seek(key)
        if it.valid() and it.key() == key:
            return it.value()
        return None

    def range(self, start: bytes | None = None, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Committed ``(key, value)`` for ``start <= key < end`` in key order."""
        token = object()
        it = self._iterator()
        self._cursor_owner = token
        if start is None:
            it.seek_to_first()
        else:
            it.seek(start)
        last: bytes | None = None
        while True:
            if self._cursor_owner is not token:
                # Someone else moved the shared iterator: go back to where this scan was.
                self._cursor_owner = token
                if last is None:
                    it.seek_to_first() if start is None else it.seek(start)
                else:
                    it.seek(last)
                    if it.valid() and it.key() == last:
                        it.next()
            if not it.valid():
                return
            key = it.key()
            if end is not None and key >= end:
                return
            last = key
            value = it.value()
            it.next()
            yield key, value

    def prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Committed ``(key, value)`` whose key starts with ``prefix``."""
        return self.range(prefix, prefix_end(prefix))

    def committed_offsets(self) -> dict[TopicPartition, int]:
        """The changelog offsets of this reader's commit."""
        self._iterator()
        out = {}
        for key, value in _iterate(self._offsets, _OFFSET_PREFIX, prefix_end(_OFFSET_PREFIX)):
            out[_parse_offset_key(key)] = _OFFSET_VALUE.unpack(value)[0]
        return out

    def close(self) -> None:
        """Release the pinned iterators (and the files they keep alive)."""
        self._data = self._offsets = None  # type: ignore[assignment]


class UncommittedReader:
    """read_uncommitted view: the writer's own pending writes over the committed data, live.
    Use it on the writer's thread (it reads the pending batch without a lock)."""

    def __init__(self, store: StateStore) -> None:
        self._store = store

    def get(self, key: bytes) -> bytes | None:
        """Value of ``key`` including pending writes."""
        return self._store.get(key)

    def range(self, start: bytes | None = None, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Scan including pending writes."""
        return self._store.range(start, end)

    def prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Prefix scan including pending writes."""
        return self._store.prefix(prefix)

    def close(self) -> None:
        """Nothing to release."""
