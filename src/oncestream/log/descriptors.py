"""A bound on the file descriptors the logs keep open (issue 10 point 6).

A broker holding many partitions with many segments would otherwise keep one descriptor per
segment file open for its whole life and hit the process's open-files limit (1024 by default),
after which every new connection and every segment roll fails. Every segment (the active one
of each log included: a broker may hold more partitions than the bound) opens its ``.log`` file
on demand and is put in one least-recently-used list shared by every log of the broker; when the
list grows past ``max_open`` the least recently used one is closed. Index files are in memory and
opened only for each write or fsync (see ``index``, ``txn_index``), so they hold no descriptor.

Closing a descriptor of a file with unsynced data loses nothing: the pages belong to the inode,
and a later ``fdatasync`` on a new descriptor writes them (and reports an earlier writeback error
that nobody saw yet, Linux >= 4.16).

A segment in the middle of a walk over its file pins its descriptor (``Segment`` counts pins),
so an eviction caused by opening another file can never close a descriptor that is in use and
let the number be reused by an unrelated file. Not thread-safe: logs are used from one thread
(the broker's event loop); work on other threads gets duplicated descriptors.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Protocol

from oncestream.errors import InvalidConfigError

MAX_OPEN_PROPERTY = "oncestream.log.max.open.segment.files"
# Well under the usual soft limit of 1024 open files: the rest is left for client sockets, the
# active segments and their indexes, snapshots and the cleaner's duplicated descriptors.
DEFAULT_MAX_OPEN = 256


class Evictable(Protocol):
    """What the cache needs of a segment."""

    def evict_descriptor(self) -> bool:
        """Close the descriptor unless it is in use; whether it was closed."""
        ...


class SegmentDescriptors:
    """LRU of the segments with an open descriptor, closed beyond ``max_open``."""

    def __init__(self, max_open: int = DEFAULT_MAX_OPEN) -> None:
        if max_open < 1:
            raise InvalidConfigError(f"{MAX_OPEN_PROPERTY} must be at least 1, not {max_open}")
        self.max_open = max_open
        self._open: OrderedDict[Evictable, None] = OrderedDict()
        self.evictions = 0  # for tests and metrics

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> SegmentDescriptors:
        """The cache sized by the broker property ``oncestream.log.max.open.segment.files``."""
        raw = properties.get(MAX_OPEN_PROPERTY)
        if raw is None:
            return cls()
        try:
            max_open = int(raw)
        except ValueError:
            raise InvalidConfigError(f"{MAX_OPEN_PROPERTY}={raw!r} is not an integer") from None
        return cls(max_open)

    def __len__(self) -> int:
        return len(self._open)

    def opened(self, segment: Evictable) -> None:
        """``segment`` holds an open descriptor now (most recently used); evict beyond the bound."""
        self._open[segment] = None
        self._open.move_to_end(segment)
        if len(self._open) > self.max_open:
            self._evict()

    def used(self, segment: Evictable) -> None:
        """``segment``'s descriptor was used: it is now the most recently used."""
        if segment in self._open:
            self._open.move_to_end(segment)

    def forget(self, segment: Evictable) -> None:
        """``segment`` closed its descriptor itself, or keeps it for good (it became active)."""
        self._open.pop(segment, None)

    def _evict(self) -> None:
        # Oldest first; a pinned segment stays and the next one is tried. If every one is pinned
        # the bound is exceeded until the walks end (never more than the walks in progress).
        for segment in list(self._open):
            if len(self._open) <= self.max_open:
                return
            if segment.evict_descriptor():
                del self._open[segment]
                self.evictions += 1
