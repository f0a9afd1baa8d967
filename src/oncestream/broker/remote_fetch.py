"""Fetch below the local log start (tiered storage): the broker's side of remote reads.

PartitionLog.read raises OffsetMovedToTieredStorageError for an offset in [log start, local log
start); the Fetch handler then records a :class:`RemotePartRead` and, once every local partition
is read, :func:`complete_remote_reads` runs the remote reads on the ``remote.log.reader.threads``
pool (remote/reader.py) and waits for them up to ``remote.fetch.max.wait.ms`` (Kafka's
DelayedRemoteFetch):

- a read that finishes in time fills its partition (batches, and for read_committed the aborted
  transactions of the remote transaction indexes, then of the local segments above the remote
  ones when no remote index could end the search: Kafka's collectAbortedTransactions);
- a read still running answers that partition empty with no error (the client fetches again; the
  thread's result is dropped when it finishes);
- a failed read (``RemoteStorageError``: missing or damaged object, store down) answers that
  partition with its code, UNKNOWN_SERVER_ERROR (Kafka's mapping of RemoteStorageException), and
  logs the message, which names the object key. Other partitions are unaffected.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from oncestream.broker.state import BrokerState
from oncestream.errors import OffsetMovedToTieredStorageError, OnceStreamError
from oncestream.log.partition_log import PartitionLog
from oncestream.protocol.fetch_response import PartitionFetchResult
from oncestream.remote.reader import RemoteRead

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RemotePartRead:
    """One partition of a fetch to be read from the object store."""

    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int  # the part of the fetch's byte budget this partition may use
    min_one: bool  # first partition with data: owed at least one whole batch (KIP-74)
    upper_offset: int  # HW, or LSO for read_committed: nothing at/after it is returned
    read_committed: bool
    result: PartitionFetchResult  # filled in place


def remote_part(
    state: BrokerState,
    topic: str,
    plog: PartitionLog,
    moved: OffsetMovedToTieredStorageError,
    result: PartitionFetchResult,
    *,
    max_bytes: int,
    min_one: bool,
    upper_offset: int,
    read_committed: bool,
    partition: int,
) -> RemotePartRead | None:
    """The remote read a partition needs (its offsets filled in ``result`` now, as a local read
    would); None with ``result`` answering UNKNOWN_SERVER_ERROR if this broker reads no remote
    data (a tiered log on a broker whose tiered storage is off)."""
    result.high_watermark = plog.high_watermark
    result.last_stable_offset = plog.last_stable_offset
    result.log_start_offset = plog.log_start_offset
    if state.remote_reads is None:
        log.error("%s-%d: %s, but this broker has no remote log storage", topic, partition, moved)
        result.error_code = ErrorCode.unknown_server_error
        return None
    return RemotePartRead(topic, partition, moved.offset, max_bytes, min_one, upper_offset, read_committed, result)


async def complete_remote_reads(state: BrokerState, parts: list[RemotePartRead]) -> None:
    """Run the remote reads and fill their partitions (see the module docstring)."""
    reads = state.remote_reads
    if reads is None or not parts:
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + reads.fetch_max_wait_ms / 1000
    futures = [
        asyncio.wrap_future(
            reads.submit_read(
                part.topic,
                part.partition,
                part.fetch_offset,
                part.max_bytes,
                upper_offset=part.upper_offset,
                min_one=part.min_one,
                with_aborted=part.read_committed,
            )
        )
        for part in parts
    ]
    for part, future in zip(parts, futures, strict=True):
        if not await _finished(future, deadline - loop.time()):
            # Past remote.fetch.max.wait.ms: empty, no error; the late result is dropped.
            future.add_done_callback(_drop_result)
            log.debug("%s-%d: remote read at %d took over %d ms", part.topic, part.partition,
                      part.fetch_offset, reads.fetch_max_wait_ms)
            continue
        exc = future.exception()
        if exc is not None:
            log.error("%s-%d: remote read at offset %d failed: %s", part.topic, part.partition, part.fetch_offset, exc)
            part.result.error_code = exc.code if isinstance(exc, OnceStreamError) else ErrorCode.unknown_server_error
            continue
        _fill(state, part, future.result())


async def read_remote_once(
    state: BrokerState, topic: str, partition: int, fetch_offset: int, max_bytes: int, *, upper_offset: int,
    read_committed: bool,
) -> RemoteRead | None:
    """One remote read (at least one batch), awaited up to remote.fetch.max.wait.ms; None past
    it. Its failure (RemoteStorageError) is logged and raised."""
    reads = state.remote_reads
    if reads is None:
        raise OnceStreamError(f"{topic}-{partition}: offset {fetch_offset} is tiered, but this broker has no"
                              " remote log storage", code=ErrorCode.unknown_server_error)
    future = asyncio.wrap_future(reads.submit_read(topic, partition, fetch_offset, max_bytes, upper_offset=upper_offset,
                                                   min_one=True, with_aborted=read_committed))
    if not await _finished(future, reads.fetch_max_wait_ms / 1000):
        future.add_done_callback(_drop_result)
        return None
    exc = future.exception()
    if exc is not None:
        log.error("%s-%d: remote read at offset %d failed: %s", topic, partition, fetch_offset, exc)
        raise exc
    return future.result()


async def _finished(future: asyncio.Future[RemoteRead], timeout_s: float) -> bool:
    """Whether ``future`` finished (with a result or an error) within ``timeout_s``; it is never
    cancelled (asyncio.wait neither raises its error nor swallows our own cancellation)."""
    if not future.done():
        await asyncio.wait((future,), timeout=max(timeout_s, 0.0))
    return future.done()


def _drop_result(future: asyncio.Future[RemoteRead]) -> None:
    if not future.cancelled():
        future.exception()  # retrieved: a late failure is not "never retrieved"


def _fill(state: BrokerState, part: RemotePartRead, read: RemoteRead) -> None:
    result = part.result
    if part.read_committed:
        try:
            result.aborted_transactions = aborted_of(state, part.topic, part.partition, part.fetch_offset, read)
        except OnceStreamError as exc:  # the partition went away meanwhile
            result.error_code = exc.code
            return
    result.chunks = read.chunks
    result.size_bytes = read.size_bytes


def aborted_of(state: BrokerState, topic: str, partition: int, fetch_offset: int, read: RemoteRead) -> list[tuple[int, int]]:
    """The aborted transactions a read_committed remote read returns: those of the remote
    transaction indexes, then, when none of them ended the search, those of the local segments
    above the remote ones (called on the event loop: it reads the local log)."""
    aborted = list(read.aborted_transactions or ())
    if not read.aborted_complete and read.next_offset > fetch_offset:
        plog = state.logs.get(topic, partition)
        aborted += plog.aborted_transactions(read.local_aborts_from, fetch_offset, read.next_offset)
    # A segment kept locally after its copy is indexed twice; a client must see each abort once.
    return sorted(set(aborted), key=lambda entry: (entry[1], entry[0]))

