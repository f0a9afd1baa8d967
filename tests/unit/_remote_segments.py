"""Remote segment metadata for the reader's unit tests: what segment_metadata.RemoteSegment
gives the reader (remote/reader.TieredSegment), built by hand beside segments copied by hand."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from oncestream.remote.reader import SegmentKey, remote_partition


@dataclass(frozen=True)
class Seg:
    """One copied segment: its id, offsets (last inclusive), max timestamp, whether a txnindex
    object was uploaded."""

    segment_id: uuid.UUID
    base_offset: int
    last_offset: int
    max_timestamp_ms: int
    has_txn_index: bool


def layout_keys(topic: str, topic_id: uuid.UUID, partition: int = 0) -> SegmentKey:
    """The object keys (layout.segment_key) of one partition's segments."""
    return remote_partition(topic, topic_id, partition, None).key_of
