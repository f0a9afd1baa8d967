"""Object keys of tiered storage (Kafka's RemoteStorageManager shape) and their parsing."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oncestream.remote import layout
from oncestream.remote.layout import InvalidRemoteKeyError

TOPIC_ID = uuid.UUID("4f3b1c2a-9d8e-4f70-a1b2-c3d4e5f60718")
SEGMENT_ID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")


def test_key_shape_and_one_function_per_object_kind() -> None:
    topic_text = layout.uuid_text(TOPIC_ID)
    segment_text = layout.uuid_text(SEGMENT_ID)
    assert len(topic_text) == 22
    assert segment_text == "ABEiM0RVZneImaq7zN3u_w"  # Kafka's Uuid.toString: URL-safe base64, no padding
    prefix = f"orders-{topic_text}/3/00000000000000001234-{segment_text}"
    args = ("orders", TOPIC_ID, 3, 1234, SEGMENT_ID)
    assert layout.log_key(*args) == prefix + ".log"
    assert layout.index_key(*args) == prefix + ".index"
    assert layout.time_index_key(*args) == prefix + ".timeindex"
    assert layout.txn_index_key(*args) == prefix + ".txnindex"
    assert layout.snapshot_key(*args) == prefix + ".snapshot"
    assert layout.leader_epoch_key(*args) == prefix + ".leader-epoch-checkpoint"
    assert sorted(layout.segment_keys(*args)) == sorted(layout.SEGMENT_SUFFIXES)
    assert all(key.startswith(layout.partition_prefix("orders", TOPIC_ID, 3)) for key in layout.segment_keys(*args).values())
    assert layout.partition_prefix("orders", TOPIC_ID, 3).startswith(layout.topic_prefix("orders", TOPIC_ID))
    # Partition 3 never matches partition 30's prefix.
    assert not layout.log_key("orders", TOPIC_ID, 30, 0, SEGMENT_ID).startswith(layout.partition_prefix("orders", TOPIC_ID, 3))


@given(
    topic=st.text(alphabet="abcXYZ09._-", min_size=1, max_size=40).filter(lambda t: t not in (".", "..")),
    topic_id=st.uuids(),
    partition=st.integers(0, 10_000),
    base_offset=st.integers(0, 2**63 - 1),
    segment_id=st.uuids(),
    suffix=st.sampled_from(layout.SEGMENT_SUFFIXES),
)
def test_every_key_parses_back(
    topic: str, topic_id: uuid.UUID, partition: int, base_offset: int, segment_id: uuid.UUID, suffix: str
) -> None:
    key = layout.segment_key(topic, topic_id, partition, base_offset, segment_id, suffix)
    parsed = layout.parse_segment_key(key)
    assert parsed == layout.SegmentObjectKey(topic, topic_id, partition, base_offset, segment_id, suffix)
    assert layout.parse_topic_folder(layout.topic_folder(topic, topic_id)) == (topic, topic_id)


@pytest.mark.parametrize(
    "key",
    [
        "",
        "orders/3/00000000000000001234-ABEiM0RVZneImaq7zN3u_w.log",  # no topic id
        f"orders-{layout.uuid_text(TOPIC_ID)}/3/1234-ABEiM0RVZneImaq7zN3u_w.log",  # offset not 20 digits
        f"orders-{layout.uuid_text(TOPIC_ID)}/03/00000000000000001234-ABEiM0RVZneImaq7zN3u_w.log",
        f"orders-{layout.uuid_text(TOPIC_ID)}/3/00000000000000001234-ABEiM0RVZneImaq7zN3u_w.parquet",
        f"orders-{layout.uuid_text(TOPIC_ID)}/3/00000000000000001234-ABEiM0RVZneImaq7zN3u_x.log",  # not canonical
        f"orders-{layout.uuid_text(TOPIC_ID)}/3/00000000000000001234-ABEiM0RVZneImaq7zN3u_w.log/extra",
    ],
)
def test_foreign_keys_are_refused(key: str) -> None:
    with pytest.raises(InvalidRemoteKeyError):
        layout.parse_segment_key(key)


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(InvalidRemoteKeyError):
        layout.segment_key("orders", TOPIC_ID, 0, 0, SEGMENT_ID, "parquet")
    with pytest.raises(InvalidRemoteKeyError):
        layout.segment_key("orders", TOPIC_ID, -1, 0, SEGMENT_ID, "log")
    with pytest.raises(InvalidRemoteKeyError):
        layout.segment_key("orders", TOPIC_ID, 0, -1, SEGMENT_ID, "log")
    with pytest.raises(InvalidRemoteKeyError):
        layout.topic_folder("a/b", TOPIC_ID)
    for name in ("orders", "x-short", f"-{layout.uuid_text(TOPIC_ID)}", f"orders_{layout.uuid_text(TOPIC_ID)}"):
        with pytest.raises(InvalidRemoteKeyError):
            layout.parse_topic_folder(name)
