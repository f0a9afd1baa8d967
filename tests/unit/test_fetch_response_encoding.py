"""The zero-copy Fetch response encoder must match kio's schema encoding byte for byte."""

from __future__ import annotations

import datetime

import pytest
from kio.schema.errors import ErrorCode

from oncestream.protocol.codec import build, encode_response
from oncestream.protocol.fetch_response import PartitionFetchResult, encode_fetch_response
from oncestream.protocol.records import NewRecord, encode_batch
from oncestream.protocol.schemas import response_module


def _kio_frame(version: int, correlation_id: int, topics, error_code: int, session_id: int) -> bytes:
    m = response_module(1, version)
    responses = tuple(
        build(
            m.FetchableTopicResponse,
            topic=name,
            partitions=tuple(
                build(
                    m.PartitionData,
                    partition_index=p.partition_index,
                    error_code=ErrorCode(p.error_code),
                    high_watermark=p.high_watermark,
                    last_stable_offset=p.last_stable_offset,
                    log_start_offset=p.log_start_offset,
                    aborted_transactions=None
                    if p.aborted_transactions is None
                    else tuple(build(m.AbortedTransaction, producer_id=a, first_offset=b) for a, b in p.aborted_transactions),
                    preferred_read_replica=-1,
                    records=b"".join(bytes(c) for c in p.chunks),
                )
                for p in parts
            ),
        )
        for name, parts in topics
    )
    resp = build(
        m.FetchResponse,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode(error_code),
        session_id=session_id,
        responses=responses,
    )
    return encode_response(1, version, correlation_id, resp)


@pytest.mark.parametrize("version", range(4, 13))
def test_matches_kio_encoding(version: int) -> None:
    b1 = encode_batch([NewRecord(value=b"a" * 100)], now_ms=1)
    b2 = encode_batch([NewRecord(value=b"b")], now_ms=2, base_offset=1)
    topics = [
        (
            "orders",
            [
                PartitionFetchResult(0, 0, 2, 2, 0, None, [b1, memoryview(b2)], len(b1) + len(b2)),
                PartitionFetchResult(1, ErrorCode.offset_out_of_range, -1, -1, -1, None),
            ],
        ),
        ("payments", [PartitionFetchResult(3, 0, 10, 5, 1, [(7, 3), (9, 4)], [b1], len(b1))]),
    ]
    ours = b"".join(bytes(b) for b in encode_fetch_response(version, 99, topics))
    assert ours == _kio_frame(version, 99, topics, 0, 0)


def test_session_error_matches_kio() -> None:
    ours = b"".join(
        bytes(b) for b in encode_fetch_response(12, 5, (), error_code=ErrorCode.fetch_session_id_not_found)
    )
    assert ours == _kio_frame(12, 5, [], ErrorCode.fetch_session_id_not_found, 0)


def test_every_advertised_fetch_version_has_an_encoder() -> None:
    """The API-key table is the one place versions are advertised; raising Fetch's maximum there
    without teaching this hand-written encoder the new version must fail here, not on the wire."""
    from oncestream.protocol import fetch_response
    from oncestream.protocol.api_keys import API_VERSIONS, FETCH

    low, high = API_VERSIONS[FETCH]
    assert fetch_response.MIN_VERSION <= low
    assert high <= fetch_response.MAX_VERSION
