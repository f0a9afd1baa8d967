"""Value types shared by producer and consumer: ``TopicPartition``, ``Message``,
``ConsumerGroupMetadata`` and the special offsets, shaped like confluent-kafka's.
"""

from __future__ import annotations

from typing import Any

from oncestream.client.common.errors import KafkaError

OFFSET_BEGINNING = -2
OFFSET_END = -1
OFFSET_STORED = -1000
OFFSET_INVALID = -1001

TIMESTAMP_NOT_AVAILABLE = 0
TIMESTAMP_CREATE_TIME = 1
TIMESTAMP_LOG_APPEND_TIME = 2


class TopicPartition:
    """A topic partition, optionally with an offset, metadata, leader epoch and error."""

    __slots__ = ("error", "leader_epoch", "metadata", "offset", "partition", "topic")

    def __init__(
        self,
        topic: str,
        partition: int = -1,
        offset: int = OFFSET_INVALID,
        metadata: str | None = None,
        leader_epoch: int | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.metadata = metadata
        self.leader_epoch = leader_epoch
        self.error: KafkaError | None = None

    def __repr__(self) -> str:
        return (
            f"TopicPartition{{topic={self.topic},partition={self.partition},offset={self.offset},"
            f"leader_epoch={self.leader_epoch},error={self.error}}}"
        )

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TopicPartition):
            return NotImplemented
        return (self.topic, self.partition) == (other.topic, other.partition)

    def __lt__(self, other: TopicPartition) -> bool:
        return (self.topic, self.partition) < (other.topic, other.partition)

    def __hash__(self) -> int:
        return hash((self.topic, self.partition))


class Message:
    """One consumed record or one delivery report (confluent-kafka's Message API).

    ``_info`` is a (topic, partition, timestamp type) tuple shared by every message of a
    decoded batch: three fewer stores per message on the consumer's hot path.
    """

    __slots__ = ("_error", "_headers", "_info", "_key", "_offset", "_timestamp", "_value")

    def __init__(
        self,
        topic: str | None,
        partition: int,
        offset: int,
        timestamp: int,
        ts_type: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]] | None = None,
        error: KafkaError | None = None,
    ) -> None:
        self._info = (topic, partition, ts_type)
        self._offset = offset
        self._timestamp = timestamp
        self._key = key
        self._value = value
        self._headers = headers
        self._error = error

    def topic(self) -> str | None:
        """Topic name."""
        return self._info[0]

    def partition(self) -> int:
        """Partition number (-1 if unknown)."""
        return self._info[1]

    def offset(self) -> int:
        """Offset in the partition (-1001 if not yet known)."""
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        """(timestamp type, milliseconds since the epoch)."""
        return (self._info[2], self._timestamp)

    def key(self) -> bytes | None:
        """Record key."""
        return self._key

    def value(self) -> bytes | None:
        """Record value."""
        return self._value

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        """Record headers as a list of (key, value), or None when the record has none."""
        return self._headers

    def error(self) -> KafkaError | None:
        """The error of a failed delivery or a consumer event, else None."""
        return self._error

    def leader_epoch(self) -> int | None:
        """Leader epoch of the record (not tracked: None)."""
        return None

    def latency(self) -> float | None:
        """Produce latency (not tracked: None)."""
        return None

    def set_key(self, key: bytes | None) -> None:
        """Replace the key (for serializers)."""
        self._key = key

    def set_value(self, value: bytes | None) -> None:
        """Replace the value (for deserializers)."""
        self._value = value

    def set_headers(self, headers: list[tuple[str, bytes | None]] | None) -> None:
        """Replace the headers."""
        self._headers = headers

    def set_topic(self, topic: str) -> None:
        """Replace the topic."""
        self._info = (topic, self._info[1], self._info[2])

    def set_error(self, error: KafkaError | None) -> None:
        """Replace the error."""
        self._error = error

    def __len__(self) -> int:
        return len(self._value) if self._value is not None else 0

    def __repr__(self) -> str:
        return (
            f"Message(topic={self._info[0]!r}, partition={self._info[1]}, offset={self._offset}, "
            f"key={self._key!r}, value={_short(self._value)}, error={self._error})"
        )


def _short(value: bytes | None) -> str:
    if value is None or len(value) <= 32:
        return repr(value)
    return repr(value[:32]) + f"...({len(value)} bytes)"


class ConsumerGroupMetadata:
    """What a transactional producer needs from a consumer (KIP-447): group id, generation,
    member id and static instance id."""

    __slots__ = ("generation_id", "group_id", "group_instance_id", "member_id")

    def __init__(
        self,
        group_id: str,
        generation_id: int = -1,
        member_id: str = "",
        group_instance_id: str | None = None,
    ) -> None:
        self.group_id = group_id
        self.generation_id = generation_id
        self.member_id = member_id
        self.group_instance_id = group_instance_id

    def __repr__(self) -> str:
        return (
            f"ConsumerGroupMetadata(group_id={self.group_id!r}, generation_id={self.generation_id}, "
            f"member_id={self.member_id!r}, group_instance_id={self.group_instance_id!r})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (ConsumerGroupMetadata,
                (self.group_id, self.generation_id, self.member_id, self.group_instance_id))
