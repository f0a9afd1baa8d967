"""The indexes of remote log segments, fetched from the object store and kept in a bounded LRU
cache (Kafka's RemoteIndexCache, ``remote.log.index.file.cache.total.size.bytes``).

A read below the local log start needs the segment's offset index (where to start the ranged
read of the ``.log`` object), a timestamp lookup its time index, and a read_committed fetch the
transaction indexes of the segment and the ones after it. Each is one object (layout.py's
``index``, ``timeindex`` and ``txnindex`` suffixes) fetched whole with ``ObjectStore.get`` on a
remote reader thread, validated, and cached under (segment id, suffix) while the cached bytes
stay within the bound: the least recently used entries are dropped first. Unlike Kafka, which
fetches the three indexes of a segment together, each is fetched when first needed (a plain
fetch never needs the time index).

A segment without aborted transactions has no ``txnindex`` object (the copier uploads none, and
the segment's metadata says so: the reader does not ask for it). A missing or damaged index is a
``RemoteStorageError`` naming the key (the fetch answers UNKNOWN_SERVER_ERROR).
"""

from __future__ import annotations

import struct
import threading
from array import array
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from pathlib import PurePosixPath
from typing import TypeVar, cast

from oncestream.errors import RemoteStorageError
from oncestream.log.index import OFFSET_ENTRY, TIME_ENTRY
from oncestream.log.txn_index import AbortedTxn, decode_entries

OFFSET_INDEX_SUFFIX = "index"
TIME_INDEX_SUFFIX = "timeindex"
TXN_INDEX_SUFFIX = "txnindex"
# What an empty (or negative) cache entry is charged, so that a cache of them is bounded too.
_ENTRY_OVERHEAD_BYTES = 64


@dataclass(frozen=True, slots=True)
class RemoteOffsetIndex:
    """A remote segment's sparse offset index: batch base offsets (relative) -> ``.log`` positions."""

    relative_offsets: array[int]
    positions: array[int]

    def position_for(self, relative_offset: int) -> int:
        """Position of the last indexed batch whose base offset <= ``relative_offset`` (or 0)."""
        slot = bisect_right(self.relative_offsets, relative_offset) - 1
        return self.positions[slot] if slot >= 0 else 0


@dataclass(frozen=True, slots=True)
class RemoteTimeIndex:
    """A remote segment's time index: rising max timestamps -> the batch (relative base offset)."""

    timestamps: array[int]
    relative_offsets: array[int]

    def lookup(self, timestamp_ms: int) -> int | None:
        """Relative base offset of the first batch whose max timestamp >= ``timestamp_ms``."""
        slot = bisect_left(self.timestamps, timestamp_ms)
        return self.relative_offsets[slot] if slot < len(self.timestamps) else None


@dataclass(frozen=True, slots=True)
class RemoteTxnIndex:
    """A remote segment's aborted transactions, marker order (empty if the segment has none)."""

    entries: tuple[AbortedTxn, ...]

    def collect(self, fetch_offset: int, upper_offset: int, out: list[AbortedTxn]) -> bool:
        """Add the aborts overlapping [``fetch_offset``, ``upper_offset``) to ``out``; True once
        no later segment can hold one (Kafka's TransactionIndex.collectAbortedTxns; the same
        rule as the local TxnIndex.collect)."""
        first = bisect_left(self.entries, fetch_offset, key=lambda entry: entry.last_offset)
        for entry in self.entries[first:]:
            if entry.first_offset < upper_offset:
                out.append(entry)
            if entry.last_stable_offset >= upper_offset:
                return True
        return False


RemoteIndex = RemoteOffsetIndex | RemoteTimeIndex | RemoteTxnIndex


def _strictly_increasing(column: array[int]) -> bool:
    return all(a < b for a, b in pairwise(column))


def _two_columns(
    raw: bytes, entry: struct.Struct, typecodes: str, key: str, what: str, *, first_may_be_negative: bool
) -> tuple[array[int], array[int]]:
    """The two columns of an index object of ``entry``-sized records (array typecodes
    ``typecodes``), each strictly increasing and not starting below zero (the first column may,
    if ``first_may_be_negative``); RemoteStorageError naming ``key`` if truncated or damaged."""
    if len(raw) % entry.size:
        raise RemoteStorageError(f"remote {what} {key} is truncated ({len(raw)} bytes)")
    first, second = array(typecodes[0]), array(typecodes[1])
    for a, b in entry.iter_unpack(raw):
        first.append(a)
        second.append(b)
    negative = bool(second) and (second[0] < 0 or (first[0] < 0 and not first_may_be_negative))
    if negative or not (_strictly_increasing(first) and _strictly_increasing(second)):
        raise RemoteStorageError(f"remote {what} {key} is damaged (entries out of order)")
    return first, second


def parse_offset_index(raw: bytes, key: str) -> RemoteOffsetIndex:
    """The entries of an ``.index`` object (relative offset, position); RemoteStorageError
    (naming ``key``) if damaged."""
    return RemoteOffsetIndex(*_two_columns(raw, OFFSET_ENTRY, "ii", key, "offset index", first_may_be_negative=False))


def parse_time_index(raw: bytes, key: str) -> RemoteTimeIndex:
    """The entries of a ``.timeindex`` object (timestamp, relative offset); RemoteStorageError
    (naming ``key``) if damaged."""
    return RemoteTimeIndex(*_two_columns(raw, TIME_ENTRY, "qi", key, "time index", first_may_be_negative=True))


def parse_txn_index(raw: bytes, key: str) -> RemoteTxnIndex:
    """The entries of a ``.txnindex`` object; RemoteStorageError (naming ``key``) if damaged."""
    entries = decode_entries(raw)
    if entries is None:
        raise RemoteStorageError(f"remote transaction index {key} is damaged or truncated")
    return RemoteTxnIndex(tuple(entries))


_IndexT = TypeVar("_IndexT", RemoteOffsetIndex, RemoteTimeIndex, RemoteTxnIndex)


class RemoteIndexCache:
    """LRU cache of parsed remote indexes, bounded by the bytes of the objects it holds.

    Thread-safe: the remote reader threads share one. An index larger than the whole bound is
    returned but not kept. Two threads missing the same entry at once may both fetch it (the
    second insert wins); that costs one extra GET and keeps the lock off the network.
    """

    def __init__(self, get_object: Callable[[str], bytes], max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"remote index cache bound must be >= 0 bytes, got {max_bytes}")
        self._get_object = get_object
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[str, str], tuple[RemoteIndex, int]] = OrderedDict()
        self._size_bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def size_bytes(self) -> int:
        """Bytes the cached entries are charged (object size + a small overhead each)."""
        with self._lock:
            return self._size_bytes

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def offset_index(self, segment_id: str, key: str) -> RemoteOffsetIndex:
        """The offset index of a segment (object ``key``), cached."""
        return self._lookup(segment_id, OFFSET_INDEX_SUFFIX, key, parse_offset_index)

    def time_index(self, segment_id: str, key: str) -> RemoteTimeIndex:
        """The time index of a segment (object ``key``), cached."""
        return self._lookup(segment_id, TIME_INDEX_SUFFIX, key, parse_time_index)

    def txn_index(self, segment_id: str, key: str) -> RemoteTxnIndex:
        """The transaction index of a segment (object ``key``), cached."""
        return self._lookup(segment_id, TXN_INDEX_SUFFIX, key, parse_txn_index)

    def _lookup(self, segment_id: str, suffix: str, key: str, parse: Callable[[bytes, str], _IndexT]) -> _IndexT:
        cache_key = (segment_id, suffix)
        with self._lock:
            found = self._entries.get(cache_key)
            if found is not None:
                self._entries.move_to_end(cache_key)
                self.hits += 1
                return cast(_IndexT, found[0])  # stored by the same suffix's parser
            self.misses += 1
        raw = self._get_object(key)
        if PurePosixPath(key).suffix != "." + suffix:
            raise RemoteStorageError(f"remote index key {key} does not end in .{suffix}")
        index = parse(raw, key)
        self._insert(cache_key, index, len(raw) + _ENTRY_OVERHEAD_BYTES)
        return index

    def _insert(self, cache_key: tuple[str, str], index: RemoteIndex, charged: int) -> None:
        if charged > self.max_bytes:
            return
        with self._lock:
            previous = self._entries.pop(cache_key, None)
            if previous is not None:
                self._size_bytes -= previous[1]
            self._entries[cache_key] = (index, charged)
            self._size_bytes += charged
            while self._size_bytes > self.max_bytes:
                _key, (_index, evicted) = self._entries.popitem(last=False)
                self._size_bytes -= evicted

