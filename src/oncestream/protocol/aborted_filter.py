"""The one read_committed filter (KIP-98 consumer-side filtering of aborted transactions).

A read_committed Fetch returns every batch below the last stable offset, aborted ones included,
plus the aborted transactions of the returned range as (producer id, first offset). The consumer
drops them itself, as Kafka's ``CompletedFetch`` does: walking batches in offset order, a
producer's aborted transaction becomes active once a batch reaches its first offset; from then on
that producer's transactional data batches are dropped until its ABORT marker. Control batches
(the markers) never reach the application, under either isolation level.

Used by every reader of fetched data: the client's fetch decoder (one filter per fetch response),
the Spark partition reader (one filter per input partition, fed each response's list) and
``records.committed_records`` (the CLI).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from oncestream.protocol import record_batch as rb
from oncestream.protocol.markers import CONTROL_ABORT, first_marker_type

_CONTROL = rb.ATTR_CONTROL
_TRANSACTIONAL = rb.ATTR_TRANSACTIONAL


class AbortedFilter:
    """Decides, batch by batch in offset order, which batches the application must not see.

    ``read_committed=False`` hides only control batches. Feed the fetch responses' aborted lists
    with ``add`` before offering the batches they cover to ``hides``.
    """

    __slots__ = ("_aborting", "_pending", "read_committed")

    def __init__(self, read_committed: bool, aborted: Iterable[tuple[int, int]] = ()) -> None:
        self.read_committed = read_committed
        self._pending: list[tuple[int, int]] = []  # heap of (first offset, producer id)
        self._aborting: set[int] = set()  # producers whose aborted transaction is being skipped
        self.add(aborted)

    def add(self, aborted: Iterable[tuple[int, int]]) -> None:
        """Learn aborted transactions, each (producer id, first offset), as a Fetch response
        lists them (ignored under read_uncommitted)."""
        if not self.read_committed:
            return
        for producer_id, first_offset in aborted:
            heapq.heappush(self._pending, (first_offset, producer_id))

    def hides(self, batch: bytes | bytearray | memoryview, start: int, end: int, attributes: int,
              producer_id: int, last_offset: int) -> bool:
        """Whether the batch ``batch[start:end]`` (with these header fields) is hidden: every
        control batch, and under read_committed every transactional data batch of an aborted
        transaction. An ABORT marker ends its producer's aborted transaction.

        Batches must be offered in offset order, including those below the reader's position
        (their markers still end aborted transactions).
        """
        if not self.read_committed:
            return bool(attributes & _CONTROL)
        pending = self._pending
        while pending and pending[0][0] <= last_offset:
            self._aborting.add(heapq.heappop(pending)[1])
        if attributes & _CONTROL:
            if producer_id in self._aborting and first_marker_type(batch, start, end, attributes) == CONTROL_ABORT:
                self._aborting.discard(producer_id)
            return True
        return bool(attributes & _TRANSACTIONAL) and producer_id in self._aborting

    def hides_header(self, header: rb.BatchHeader, batch: bytes | bytearray | memoryview) -> bool:
        """``hides`` for a batch already split out with its parsed header."""
        return self.hides(batch, 0, header.size_bytes, header.attributes, header.producer_id, header.last_offset)
