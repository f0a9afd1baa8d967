"""Pending (uncommitted) writes of a state store: KIP-892's indexed write batch, in Python.

rocksdict 0.3.29 has no ``WriteBatchWithIndex``, so the writes are kept here: a dict for point
reads plus a key list that is sorted lazily for scans. New keys are appended to an unsorted tail
and merged in on the next scan (Timsort merges the two sorted runs in linear time), so a long
run of puts costs O(1) each and a scan after them O(n), never O(n) per put.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from typing import Any

# A pending delete (tombstone); distinct from every bytes value.
DELETED = None
# Per-entry bookkeeping counted against statestore.uncommitted.max.bytes besides key and value,
# so a flood of tiny writes is bounded too.
ENTRY_OVERHEAD_BYTES = 16
_MISSING = object()


def entry_size_bytes(key: bytes, value: bytes | None) -> int:
    """Bytes an entry counts for against the uncommitted bound."""
    return len(key) + (len(value) if value is not None else 0) + ENTRY_OVERHEAD_BYTES


class PendingWrites:
    """Uncommitted puts and deletes, last write per key wins, scannable in key order."""

    def __init__(self) -> None:
        self._entries: dict[bytes, bytes | None] = {}
        self._sorted: list[bytes] = []
        self._unsorted: list[bytes] = []
        self.size_bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: bytes) -> bool:
        return key in self._entries

    def lookup(self, key: bytes) -> tuple[bool, bytes | None]:
        """``(found, value)``; value ``None`` with found True is a pending delete."""
        if key in self._entries:
            return True, self._entries[key]
        return False, None

    def size_after(self, key: bytes, value: bytes | None) -> int:
        """What ``size_bytes`` would be after writing ``key``."""
        size = self.size_bytes + entry_size_bytes(key, value)
        if key in self._entries:
            size -= entry_size_bytes(key, self._entries[key])
        return size

    def set(self, key: bytes, value: bytes | None) -> None:
        """Record a put (bytes) or a delete (``None``)."""
        self.size_bytes = self.size_after(key, value)
        if key not in self._entries:
            self._unsorted.append(key)
        self._entries[key] = value

    def set_many(self, pairs: Sequence[Any], start: int, soft_limit_bytes: int, hard_limit_bytes: int,
                 *, messages: bool = False) -> tuple[int, int]:
        """Apply ``pairs[start:]`` in order (None key: skipped) until ``size_bytes`` reaches
        ``soft_limit_bytes``; returns ``(next index, skipped)``. ``messages``: the items are
        Kafka messages (``key()``/``value()`` methods) instead of ``(key, value)`` tuples, which
        spares the materializer a tuple per record (allocation, and the collector runs it
        triggers). The hot path of a materializer, so the per-entry work of ``set`` is inlined.
        Raises ``OverflowError`` (that entry not applied) when an entry would take the size past
        ``hard_limit_bytes``.
        """
        entries = self._entries
        unsorted = self._unsorted
        size = self.size_bytes
        skipped = 0
        i = start
        n = len(pairs)
        missing = _MISSING
        try:
            while i < n:
                if messages:
                    message = pairs[i]
                    key = message.key()
                    value = message.value()
                else:
                    key, value = pairs[i]
                if key is None:
                    skipped += 1
                    i += 1
                    continue
                if type(key) is not bytes or (value is not None and type(value) is not bytes):
                    raise TypeError("keys and values must be bytes")
                old: Any = entries.get(key, missing)
                grown = size + (len(value) if value is not None else 0)
                if old is missing:
                    grown += len(key) + ENTRY_OVERHEAD_BYTES
                elif old is not None:
                    grown -= len(old)
                if grown > hard_limit_bytes:
                    raise OverflowError(f"{grown} uncommitted bytes would exceed {hard_limit_bytes}")
                if old is missing:
                    unsorted.append(key)
                entries[key] = value
                size = grown
                i += 1
                if size >= soft_limit_bytes:
                    break
        finally:
            self.size_bytes = size
        return i, skipped

    def items(self) -> Iterator[tuple[bytes, bytes | None]]:
        """Every entry in insertion order (the order of the write batch does not matter: one
        entry per key)."""
        return iter(self._entries.items())

    def clear(self) -> None:
        """Forget every pending write."""
        self._entries.clear()
        self._sorted.clear()
        self._unsorted.clear()
        self.size_bytes = 0

    def sorted_keys(self) -> list[bytes]:
        """Keys in byte order (RocksDB's default comparator)."""
        if self._unsorted:
            self._unsorted.sort()
            self._sorted.extend(self._unsorted)
            self._sorted.sort()
            self._unsorted.clear()
        return self._sorted

    def scan(self, start: bytes | None, end: bytes | None) -> Iterator[tuple[bytes, bytes | None]]:
        """Entries with ``start <= key < end`` in key order (``None`` bounds are open).

        A snapshot of the key list is taken first, so writes during the scan do not disturb it.
        """
        keys = self.sorted_keys()
        lo = 0 if start is None else bisect.bisect_left(keys, start)
        hi = len(keys) if end is None else bisect.bisect_left(keys, end)
        entries = self._entries
        for key in keys[lo:hi]:
            if key in entries:
                yield key, entries[key]
