"""Hand-written request encoders (the produce and fetch hot paths) produce exactly the bytes
kio's generated writers produce for the same request, for every version we send."""

from __future__ import annotations

import datetime
import io

import pytest
from kio.serial import entity_writer
from kio.static.protocol import Entity

from oncestream.client.common.network import fetch_request_body, produce_request_body
from oncestream.protocol.codec import build
from oncestream.protocol.schemas import request_module


def _kio_bytes(request: Entity) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(request))(buf, request)
    return buf.getvalue()


@pytest.mark.parametrize("version", range(4, 13))
def test_fetch_request_matches_kio(version: int) -> None:
    m = request_module(1, version)
    topics = [("orders", [(0, 17, 1048576), (3, 0, 4096)]), ("t", [(1, 2**40, 1)])]
    kio_request = build(
        m.FetchRequest,
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=1,
        max_bytes=52428800,
        isolation_level=1,
        session_id=0,
        session_epoch=-1,
        topics=tuple(
            build(m.FetchTopic, topic=name, partitions=tuple(
                build(m.FetchPartition, partition=p, current_leader_epoch=-1, fetch_offset=o,
                      last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=mb)
                for p, o, mb in parts))
            for name, parts in topics
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    ours = b"".join(fetch_request_body(version, 500, 1, 52428800, 1, topics))
    assert ours == _kio_bytes(kio_request)


@pytest.mark.parametrize("version", range(3, 12))
@pytest.mark.parametrize("transactional_id", [None, "txn-1"])
def test_produce_request_matches_kio(version: int, transactional_id: str | None) -> None:
    m = request_module(0, version)
    batches = {"a": [(0, b"H" * 61, b"records-0"), (2, b"h" * 61, b"r2")], "bb": [(1, b"x" * 61, b"")]}
    kio_request = build(
        m.ProduceRequest,
        transactional_id=transactional_id,
        acks=-1,
        timeout=datetime.timedelta(milliseconds=30000),
        topic_data=tuple(
            build(m.TopicProduceData, name=name, partition_data=tuple(
                build(m.PartitionProduceData, index=p, records=h + r) for p, h, r in parts))
            for name, parts in batches.items()
        ),
    )
    ours = b"".join(produce_request_body(version, transactional_id, -1, 30000, batches))
    assert ours == _kio_bytes(kio_request)
