"""Internal topics (__consumer_offsets, __transaction_state) kept through the ordinary log code.

Coordinators are sans-io and hand back (key, value) records to persist; this module appends them
as record batches to a partition of their internal topic and, at start-up, reads every record back
so the coordinator can rebuild its state. The topics are compacted, so the latest value per key is
what survives, exactly what the coordinators' ``load`` expects.

Each encoded batch reaches its partition through an ``InternalAppender``: the log's own append by
default; a caller (broker/seams.py) may wrap it, e.g. to make appends fail the way a full or broken
disk does and check that no coordinator answers for records that never reached the log.

In cluster mode the same records go to PostgreSQL instead (``AsyncInternalTopic``, implemented by
``cluster/leases/pg_internal_topic.PgInternalTopic``): the same operations as coroutines, each
append fenced by the lease of its partition. The coordinators' drivers take either; their
``*_async`` entry points await the cluster's appends and run the synchronous path unchanged for
this module's ``InternalTopic`` (see pg_internal_topic's docstring for why).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

from oncestream.cluster.leases.coordinator_leases import Lease
from oncestream.errors import UnknownTopicOrPartitionError
from oncestream.log.manager import LogManager
from oncestream.log.partition_log import PartitionLog
from oncestream.protocol.records import NewRecord, decode_batches, encode_batch

_READ_CHUNK_BYTES = 8 * 1024 * 1024
# The configs of the coordinators' internal topics (Kafka's: compacted, 100 MiB segments); in
# cluster mode their records are PostgreSQL rows, and DescribeConfigs still shows these.
INTERNAL_TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": "104857600"}
# Keep each appended batch well under the default max.message.bytes.
_MAX_RECORDS_PER_BATCH = 500


class InternalAppender(Protocol):
    """Appends one encoded batch of coordinator records to a partition of an internal topic;
    raises (KafkaError, OSError) when the batch did not reach the log."""

    def append(self, topic: str, partition: int, log: PartitionLog, batch: bytes, now_ms: int) -> None:
        """Append ``batch`` to ``log`` (partition ``partition`` of ``topic``)."""
        ...


class LogAppender:
    """The shipped appender: the partition log's own append, as for any produce."""

    def append(self, topic: str, partition: int, log: PartitionLog, batch: bytes, now_ms: int) -> None:
        """Append ``batch`` to ``log``; the log raises what went wrong."""
        log.append(batch, now_ms, from_client=False)


class AsyncInternalTopic(Protocol):
    """An internal compacted topic whose operations are coroutines (cluster mode). ``append``
    raises OnceStreamError (a lost lease: NotCoordinatorError) or OSError when the records were
    not stored; nothing of a failed append is kept."""

    name: str
    num_partitions: int

    async def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]], now_ms: int) -> None:
        """Append records to one partition, atomically."""
        ...

    async def read_records(self, partitions: Iterable[int] | None = None) -> list[tuple[int, int, bytes, bytes | None]]:
        """(partition, offset, key, value) of every record kept, in offset order per partition."""
        ...

    async def read_all(self, partitions: Iterable[int] | None = None) -> list[tuple[bytes, bytes | None]]:
        """Every kept (key, value) record of the given partitions, in offset order."""
        ...

    def own(self, partition: int, lease: Lease) -> None:
        """Appends to ``partition`` carry ``lease`` (its epoch fences them) from now on."""
        ...

    def disown(self, partition: int) -> None:
        """Appends to ``partition`` are refused from now on."""
        ...

    def lease_of(self, partition: int) -> Lease | None:
        """The lease appends to ``partition`` carry, if held."""
        ...


class InternalTopic:
    """One internal compacted topic: append coordinator records, replay them on start."""

    def __init__(self, logs: LogManager, name: str, num_partitions: int, configs: dict[str, str], now_ms: int,
                 appender: InternalAppender | None = None) -> None:
        self.name = name
        self._appender: InternalAppender = appender or LogAppender()
        self._logs = logs
        info = logs.topics().get(name)
        if info is None:
            info = logs.create_topic(name, num_partitions, configs, now_ms=now_ms)
        # An existing topic keeps its partition count: coordinators map keys onto it.
        self.num_partitions = info.num_partitions

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]], now_ms: int) -> None:
        """Append records to one partition (synchronously, in the page cache like any produce)."""
        if not 0 <= partition < self.num_partitions:
            raise UnknownTopicOrPartitionError(f"{self.name} has no partition {partition}")
        log = self._logs.get(self.name, partition)
        for start in range(0, len(records), _MAX_RECORDS_PER_BATCH):
            chunk = records[start : start + _MAX_RECORDS_PER_BATCH]
            batch = encode_batch([NewRecord(value=v, key=k) for k, v in chunk], now_ms=now_ms)
            self._appender.append(self.name, partition, log, batch, now_ms)

    def read_all(self, partitions: Iterable[int] | None = None) -> Iterator[tuple[bytes, bytes | None]]:
        """Every (key, value) record of the given partitions in log order; control batches skipped."""
        for _partition, _offset, key, value in self.read_records(partitions):
            yield key, value

    def read_records(self, partitions: Iterable[int] | None = None) -> Iterator[tuple[int, int, bytes, bytes | None]]:
        """``read_all`` with each record's partition and offset (for a coordinator that prunes its
        topic below the oldest record it still needs, as the share coordinator does)."""
        for partition in range(self.num_partitions) if partitions is None else partitions:
            log = self._logs.get(self.name, partition)
            offset = log.log_start_offset
            end = log.log_end_offset
            while offset < end:
                result = log.read(offset, _READ_CHUNK_BYTES, upper_offset=end, min_one=True)
                if not result.size_bytes:
                    break
                for batch in decode_batches(b"".join(result.chunks)):
                    if not batch.header.is_control:
                        for record in batch.records:
                            if record.offset >= offset and record.key is not None:
                                yield partition, record.offset, record.key, record.value
                    offset = max(offset, batch.header.next_offset)
