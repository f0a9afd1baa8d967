"""Where a materializer reads its changelog from: a narrow interface and its Kafka implementation.

The materializer only needs partition counts, watermarks, manual assignment, a batch poll and
positions; keeping that behind ``ChangelogSource`` lets unit tests drive the materializer with an
in-memory log and an injected clock, and keeps the Kafka client out of the apply/commit logic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from oncestream.client.common.message import OFFSET_BEGINNING, OFFSET_END
from oncestream.client.common.message import TopicPartition as KafkaTopicPartition
from oncestream.client.consumer.batch_reader import ColumnConsumer
from oncestream.state.errors import StateStoreError

TopicPartition = tuple[str, int]


class ChangelogOffsetOutOfRangeError(StateStoreError):
    """The changelog no longer has the offset the store resumes from (topic deleted and
    recreated, or records deleted): the store must be rebuilt."""


class ChangelogError(StateStoreError):
    """The changelog could not be read (an error the materializer does not recover from)."""


class ChangelogRecord:
    """One record of a changelog partition (``value()`` None is a tombstone), with the method
    shape of ``oncestream.client.Message`` so the Kafka source hands its messages over as they
    are (no per-record copy on the hot path)."""

    __slots__ = ("_key", "_offset", "_partition", "_topic", "_value")

    def __init__(self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None) -> None:
        self._topic, self._partition, self._offset = topic, partition, offset
        self._key, self._value = key, value

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value


class ChangelogChunk(Protocol):
    """Records of one changelog partition, column-wise, in offset order (what ``poll`` returns;
    ``oncestream.client.consumer.batch_reader.PartitionColumns`` has this shape): ``keys[i]`` and
    ``values[i]`` (None value: a tombstone; None key: not a changelog record) at ``offsets[i]``;
    ``next_offset``: the partition's read position once all of them are applied (past trailing
    aborted records and markers too)."""

    topic: str
    partition: int
    keys: list[bytes | None]
    values: list[bytes | None]
    offsets: Sequence[int]
    next_offset: int

    def __len__(self) -> int: ...


class ChangelogColumns:
    """A ``ChangelogChunk`` built from records (in-memory sources and tests)."""

    __slots__ = ("keys", "next_offset", "offsets", "partition", "topic", "values")

    def __init__(self, topic: str, partition: int, records: Sequence[ChangelogRecord]) -> None:
        self.topic, self.partition = topic, partition
        self.keys = [r.key() for r in records]
        self.values = [r.value() for r in records]
        self.offsets = [r.offset() for r in records]
        self.next_offset = self.offsets[-1] + 1 if records else -1

    def __len__(self) -> int:
        return len(self.keys)


def chunks_of(records: Sequence[ChangelogRecord]) -> list[ChangelogColumns]:
    """Records cut into chunks, one per run of consecutive records of one partition."""
    chunks: list[ChangelogColumns] = []
    run: list[ChangelogRecord] = []
    for record in records:
        if run and (record.topic(), record.partition()) != (run[0].topic(), run[0].partition()):
            chunks.append(ChangelogColumns(run[0].topic(), run[0].partition(), run))
            run = []
        run.append(record)
    if run:
        chunks.append(ChangelogColumns(run[0].topic(), run[0].partition(), run))
    return chunks


class ChangelogSource(Protocol):
    """What a materializer reads (see module docstring)."""

    def partition_count(self, topic: str) -> int:
        """Current number of partitions of ``topic`` (0 if it does not exist)."""

    def watermarks(self, topic: str, partitions: list[int]) -> dict[int, tuple[int, int]]:
        """``(log start offset, end)`` per partition, ``end`` being the last stable offset (what a
        read_committed reader can reach; never past the high watermark)."""

    def assign(self, starts: dict[TopicPartition, int]) -> None:
        """Add partitions to the assignment, each read from the given offset."""

    def poll(self, max_records: int, timeout_s: float) -> list[ChangelogChunk]:
        """Committed records (read_committed) in chunks, about ``max_records`` of them (a source
        may hand out a fetched chunk whole), waiting up to ``timeout_s`` for the first."""

    def positions(self) -> dict[TopicPartition, int]:
        """Next offset to read per assigned partition, past every record returned by ``poll``
        (and past aborted records and transaction markers after them)."""

    def close(self) -> None:
        """Release connections."""


class KafkaChangelogSource:
    """``ChangelogSource`` over ``oncestream.client.Consumer`` with manual assignment, no group,
    ``isolation.level=read_committed`` and ``auto.offset.reset=error`` (an offset the log no
    longer has must rebuild the store, never silently skip or re-read records). It reads through
    ``client.consumer.batch_reader.ColumnConsumer``: keys and values come as lists, no message objects."""

    def __init__(self, bootstrap_servers: str, *, client_id: str = "oncestream-materializer",
                 extra_conf: dict[str, object] | None = None) -> None:
        conf: dict[str, object] = {
            "bootstrap.servers": bootstrap_servers,
            "client.id": client_id,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
            # A materializer must not create the changelog it is pointed at by mistake.
            "allow.auto.create.topics": False,
        }
        conf.update(extra_conf or {})
        self._consumer = ColumnConsumer(conf)

    def partition_count(self, topic: str) -> int:
        return self._consumer.list_topics(topic, timeout=30).get(topic, 0)

    def watermarks(self, topic: str, partitions: list[int]) -> dict[int, tuple[int, int]]:
        if not partitions:
            return {}
        # One ListOffsets per bound for all partitions (offsets_for_times takes the special
        # timestamps -2/-1 and, read_committed, answers the LSO for "latest").
        answers: dict[int, list[int]] = {}
        for stamp in (OFFSET_BEGINNING, OFFSET_END):
            for tp in self._consumer.offsets_for_times(
                    [KafkaTopicPartition(topic, p, stamp) for p in partitions], timeout=30):
                if tp.error is not None:
                    raise ChangelogError(f"ListOffsets {topic}[{tp.partition}]: {tp.error}")
                answers.setdefault(tp.partition, []).append(tp.offset)
        return {p: (low, end) for p, (low, end) in answers.items()}

    def assign(self, starts: dict[TopicPartition, int]) -> None:
        self._consumer.incremental_assign([KafkaTopicPartition(t, p, o) for (t, p), o in starts.items()])

    def poll(self, max_records: int, timeout_s: float) -> list[ChangelogChunk]:
        """One chunk per fetched partition response, each whole (so possibly more than
        ``max_records`` records: a response holds up to ``max.partition.fetch.bytes``); an error
        raises ``ChangelogOffsetOutOfRangeError`` or ``ChangelogError``."""
        items = self._consumer.consume_columns(1, timeout_s)
        if len(items) == 1:
            error = items[0].error()
            if error is not None:
                text = str(error)
                if "out of range" in text:
                    raise ChangelogOffsetOutOfRangeError(text)
                raise ChangelogError(text)
        return items  # type: ignore[return-value]

    def positions(self) -> dict[TopicPartition, int]:
        assigned = self._consumer.assignment()
        return {(tp.topic, tp.partition): tp.offset for tp in self._consumer.position(assigned)
                if tp.offset >= 0}

    def close(self) -> None:
        self._consumer.close()
