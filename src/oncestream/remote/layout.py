"""Where tiered storage puts things: object keys in the store, and the name of a topic's folder.

Object keys follow Kafka's RemoteStorageManager layout (one object per file of a segment):

    {topic}-{topic_id}/{partition}/{base_offset:020d}-{segment_id}.{suffix}

with ``suffix`` one of ``log index timeindex txnindex snapshot leader-epoch-checkpoint``. Ids are
written as Kafka prints a ``Uuid`` (22 characters of URL-safe base64, no padding), so a key can be
matched to the TopicId that ``kafka-topics --describe`` shows. A segment id is a fresh uuid4 per
copy attempt, so no key is ever written twice. The same ``{topic}-{topic_id}`` names a topic's
folder of remote log metadata journals (``metadata_journal``).

Parsing takes the fixed-length id from the end, since topic names may contain ``-`` (and
base64 ids ``-`` and ``_``).
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid
from dataclasses import dataclass

from oncestream.errors import OnceStreamError

LOG_SUFFIX = "log"
INDEX_SUFFIX = "index"
TIME_INDEX_SUFFIX = "timeindex"
TXN_INDEX_SUFFIX = "txnindex"
SNAPSHOT_SUFFIX = "snapshot"
LEADER_EPOCH_SUFFIX = "leader-epoch-checkpoint"
# Every object a segment may have, in upload order (the .log last would let a reader find indexes
# of a segment not yet readable; readers use only COPY_SEGMENT_FINISHED segments anyway).
SEGMENT_SUFFIXES: tuple[str, ...] = (
    LOG_SUFFIX,
    INDEX_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    SNAPSHOT_SUFFIX,
    LEADER_EPOCH_SUFFIX,
)

_UUID_TEXT_LENGTH = 22
_OFFSET_DIGITS = 20
_ID = r"[A-Za-z0-9_-]{22}"
_SEGMENT_KEY = re.compile(
    rf"^(?P<topic>.+)-(?P<topic_id>{_ID})/(?P<partition>0|[1-9][0-9]*)/"
    rf"(?P<base_offset>[0-9]{{{_OFFSET_DIGITS}}})-(?P<segment_id>{_ID})\.(?P<suffix>[a-z-]+)$"
)


class InvalidRemoteKeyError(OnceStreamError):
    """A key or folder name is not one tiered storage writes (a foreign object, a typo)."""


def uuid_text(value: uuid.UUID) -> str:
    """``value`` as Kafka prints a Uuid: URL-safe base64 of the 16 bytes without padding."""
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


def parse_uuid_text(text: str) -> uuid.UUID:
    """The inverse of ``uuid_text``; InvalidRemoteKeyError if ``text`` is not one."""
    if len(text) != _UUID_TEXT_LENGTH:
        raise InvalidRemoteKeyError(f"{text!r} is not a 22-character base64 id")
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (binascii.Error, ValueError) as exc:
        raise InvalidRemoteKeyError(f"{text!r} is not a base64 id: {exc}") from exc
    value = uuid.UUID(bytes=raw)
    if uuid_text(value) != text:  # non-canonical trailing bits
        raise InvalidRemoteKeyError(f"{text!r} is not a canonical base64 id")
    return value


def _check_topic(topic: str) -> None:
    if not topic or "/" in topic or topic in (".", ".."):
        raise InvalidRemoteKeyError(f"topic name {topic!r} cannot name a folder")


def topic_folder(topic: str, topic_id: uuid.UUID) -> str:
    """``{topic}-{topic_id}``: a topic's folder in the store and of its metadata journals."""
    _check_topic(topic)
    return f"{topic}-{uuid_text(topic_id)}"


def parse_topic_folder(name: str) -> tuple[str, uuid.UUID]:
    """(topic, topic id) from a ``topic_folder`` name; InvalidRemoteKeyError if it is not one."""
    if len(name) <= _UUID_TEXT_LENGTH + 1 or name[-_UUID_TEXT_LENGTH - 1] != "-":
        raise InvalidRemoteKeyError(f"{name!r} is not a <topic>-<topic id> folder name")
    topic, id_text = name[: -_UUID_TEXT_LENGTH - 1], name[-_UUID_TEXT_LENGTH:]
    _check_topic(topic)
    return topic, parse_uuid_text(id_text)


def topic_prefix(topic: str, topic_id: uuid.UUID) -> str:
    """The prefix of every object of a topic (``ObjectStore.list`` it to delete the topic)."""
    return topic_folder(topic, topic_id) + "/"


def partition_prefix(topic: str, topic_id: uuid.UUID, partition: int) -> str:
    """The prefix of every object of one partition."""
    if partition < 0:
        raise InvalidRemoteKeyError(f"partition {partition} is negative")
    return f"{topic_prefix(topic, topic_id)}{partition}/"


def segment_key(
    topic: str, topic_id: uuid.UUID, partition: int, base_offset: int, segment_id: uuid.UUID, suffix: str
) -> str:
    """The key of one object of a remote segment."""
    if suffix not in SEGMENT_SUFFIXES:
        raise InvalidRemoteKeyError(f"{suffix!r} is not a remote segment object suffix")
    if base_offset < 0:
        raise InvalidRemoteKeyError(f"base offset {base_offset} is negative")
    return f"{partition_prefix(topic, topic_id, partition)}{base_offset:0{_OFFSET_DIGITS}d}-{uuid_text(segment_id)}.{suffix}"


def log_key(topic: str, topic_id: uuid.UUID, partition: int, base_offset: int, segment_id: uuid.UUID) -> str:
    """The segment's records (``.log``)."""
    return segment_key(topic, topic_id, partition, base_offset, segment_id, LOG_SUFFIX)


def index_key(topic: str, topic_id: uuid.UUID, partition: int, base_offset: int, segment_id: uuid.UUID) -> str:
    """The segment's offset index."""
    return segment_key(topic, topic_id, partition, base_offset, segment_id, INDEX_SUFFIX)


def time_index_key(topic: str, topic_id: uuid.UUID, partition: int, base_offset: int, segment_id: uuid.UUID) -> str:
    """The segment's time index."""
    return segment_key(topic, topic_id, partition, base_offset, segment_id, TIME_INDEX_SUFFIX)


def txn_index_key(topic: str, topic_id: uuid.UUID, partition: int, base_offset: int, segment_id: uuid.UUID) -> str:
    """The segment's aborted-transaction index (only uploaded when it has entries)."""
    return segment_key(topic, topic_id, partition, base_offset, segment_id, TXN_INDEX_SUFFIX)


def snapshot_key(topic: str, topic_id: uuid.UUID, partition: int, base_offset: int, segment_id: uuid.UUID) -> str:
    """The producer snapshot taken at the segment's next base offset."""
    return segment_key(topic, topic_id, partition, base_offset, segment_id, SNAPSHOT_SUFFIX)


def leader_epoch_key(topic: str, topic_id: uuid.UUID, partition: int, base_offset: int, segment_id: uuid.UUID) -> str:
    """The leader-epoch checkpoint of the segment (one epoch on a single broker)."""
    return segment_key(topic, topic_id, partition, base_offset, segment_id, LEADER_EPOCH_SUFFIX)


def segment_keys(
    topic: str, topic_id: uuid.UUID, partition: int, base_offset: int, segment_id: uuid.UUID
) -> dict[str, str]:
    """suffix -> key of every object the segment may have (orphan cleanup deletes them all;
    missing ones are fine)."""
    return {suffix: segment_key(topic, topic_id, partition, base_offset, segment_id, suffix) for suffix in SEGMENT_SUFFIXES}


@dataclass(frozen=True, slots=True)
class SegmentObjectKey:
    """What a segment object's key says."""

    topic: str
    topic_id: uuid.UUID
    partition: int
    base_offset: int
    segment_id: uuid.UUID
    suffix: str


def parse_segment_key(key: str) -> SegmentObjectKey:
    """The parts of a ``segment_key``; InvalidRemoteKeyError for any other key."""
    match = _SEGMENT_KEY.match(key)
    if match is None or match["suffix"] not in SEGMENT_SUFFIXES:
        raise InvalidRemoteKeyError(f"{key!r} is not a remote segment object key")
    topic, topic_id = parse_topic_folder(f"{match['topic']}-{match['topic_id']}")
    return SegmentObjectKey(
        topic=topic,
        topic_id=topic_id,
        partition=int(match["partition"]),
        base_offset=int(match["base_offset"]),
        segment_id=parse_uuid_text(match["segment_id"]),
        suffix=match["suffix"],
    )
