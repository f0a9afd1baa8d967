"""Fetch long poll and fetch sessions, request by request over raw sockets.

The Fetch rules (protocol guide, FetchRequest): the broker answers once at least ``min_bytes``
of record data is available, or once ``max_wait_ms`` has passed, whichever comes first; until
then the request waits in the broker. KIP-227 fetch sessions: a full fetch (session epoch -1 or
0) is always answered and a nonzero session id in it names a session to close; an incremental
fetch (any other epoch) on a session the broker does not know gets FETCH_SESSION_ID_NOT_FOUND.

"Does not answer" is checked as "the socket did not become readable for QUIET_S while nothing
that satisfies the request was produced": that fails if the broker answers early and never
depends on the broker being fast. Every wait for an answer is bounded by RECV_TIMEOUT_S, far
below the request's max_wait_ms, so an answer can only come from the data arriving.
"""

from __future__ import annotations

import select
import time

import pytest
from confluent_kafka import Producer

from tests.support.clients import CLIENT_TIMEOUT_S, create_topic, unique_topic
from tests.support.wire import (
    API_FETCH,
    API_PRODUCE,
    ERROR_NONE,
    FINAL_EPOCH,
    INITIAL_EPOCH,
    WireConnection,
    decode_batches,
    fetch_request_body,
    frame,
    parse_fetch_response,
    parse_produce_response,
    produce_request_body,
    record_batch,
    request_header,
)

pytestmark = pytest.mark.interop

FETCH_VERSION = 11  # the newest non-flexible Fetch: session fields, rack id
PRODUCE_VERSION = 7
ERROR_FETCH_SESSION_ID_NOT_FOUND = 70
# Long enough that an answer can only come from produced data: the test waits at most
# RECV_TIMEOUT_S for any answer.
LONG_WAIT_MS = 120_000
RECV_TIMEOUT_S = 30.0
# How long a parked fetch must stay silent (a lower bound only: it fails if the broker answers
# early, never if the broker is slow).
QUIET_S = 0.3


def _host_port(bootstrap: str) -> tuple[str, int]:
    """(host, port) of the first broker of a ``host:port[,host:port...]`` bootstrap string (any
    broker of a cluster serves every partition)."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    return host, int(port)


def _send_fetch(conn: WireConnection, correlation_id: int, topic: str, **fields: object) -> None:
    """Send a Fetch v11 for partition 0 of ``topic`` from offset 0 without reading the answer."""
    body = fetch_request_body(FETCH_VERSION, topic, 0, 0, **fields)  # type: ignore[arg-type]
    assert conn.send(frame(request_header(API_FETCH, FETCH_VERSION, correlation_id, flexible=False) + body))


def _assert_no_answer_yet(conn: WireConnection, what: str) -> None:
    """The broker has sent nothing on ``conn`` for QUIET_S: the fetch is still parked."""
    readable, _, _ = select.select([conn.sock], [], [], QUIET_S)
    assert not readable, f"the broker answered the fetch {what}"


def _raw_produce(bootstrap: str, topic: str, values: list[bytes]) -> int:
    """Produce ``values`` as one batch to partition 0 on a connection of its own (acks=-1, so the
    records are in the log when this returns); returns the batch's base offset."""
    with WireConnection(*_host_port(bootstrap)) as conn:
        batch = record_batch(values, timestamp_ms=int(time.time() * 1000), key=b"k")
        body = produce_request_body(topic, 0, batch)
        _, (result,) = parse_produce_response(conn.request(API_PRODUCE, PRODUCE_VERSION, 1, body), PRODUCE_VERSION)
    assert result.error_code == ERROR_NONE, f"produce failed with error {result.error_code}"
    return result.base_offset


def _produce_with_librdkafka(bootstrap: str, topic: str, value: bytes) -> None:
    """Produce one record (key ``k``) to partition 0 with librdkafka, acks=all, and wait for its
    acknowledgement. The producer lives only in this call, so a test failing later does not
    leave it reconnecting to a stopped broker."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    producer.produce(topic, value, key=b"k", partition=0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0, "the record was not acknowledged"


def _new_topic(broker, prefix: str) -> str:
    """A fresh one-partition topic."""
    topic = unique_topic(prefix)
    create_topic(broker.bootstrap, topic, partitions=1)
    return topic


def test_min_bytes_1_fetch_on_empty_partition_waits_until_a_record_is_produced(broker) -> None:
    """Fetch min_bytes=1 on an empty partition: no answer while nothing is produced; a record
    produced by another client (librdkafka) wakes it, and the answer carries that record."""
    topic = _new_topic(broker, "lp-wake")
    with WireConnection(*_host_port(broker.bootstrap), timeout_s=RECV_TIMEOUT_S) as conn:
        _send_fetch(conn, 1, topic, max_wait_ms=LONG_WAIT_MS, min_bytes=1)
        _assert_no_answer_yet(conn, "of an empty partition before anything was produced")

        _produce_with_librdkafka(broker.bootstrap, topic, b"woken")
        response = parse_fetch_response(conn.recv_frame(), FETCH_VERSION)
    assert response.correlation_id == 1
    assert response.error_code == ERROR_NONE
    (part,) = response.partitions
    assert (part.topic, part.partition, part.error_code, part.high_watermark) == (topic, 0, ERROR_NONE, 1)
    assert decode_batches(part.records) == [(0, b"k", b"woken")]


def test_fetch_waits_until_min_bytes_are_available_then_answers_with_them(broker) -> None:
    """min_bytes above what the partition holds: a produce that stays below min_bytes does not
    answer the fetch; once enough more bytes are produced it answers with all of them."""
    topic = _new_topic(broker, "lp-minbytes")
    min_bytes = 4096
    with WireConnection(*_host_port(broker.bootstrap), timeout_s=RECV_TIMEOUT_S) as conn:
        _send_fetch(conn, 7, topic, max_wait_ms=LONG_WAIT_MS, min_bytes=min_bytes)
        _assert_no_answer_yet(conn, "of an empty partition")

        assert _raw_produce(broker.bootstrap, topic, [b"small"]) == 0
        # One small batch (well under 4096 bytes) is in the log now: still not enough.
        _assert_no_answer_yet(conn, f"with fewer than min_bytes={min_bytes} bytes available")

        big = b"B" * (min_bytes + 100)
        assert _raw_produce(broker.bootstrap, topic, [big]) == 1
        response = parse_fetch_response(conn.recv_frame(), FETCH_VERSION)
    assert (response.correlation_id, response.error_code) == (7, ERROR_NONE)
    (part,) = response.partitions
    assert (part.error_code, part.high_watermark) == (ERROR_NONE, 2)
    assert len(part.records) >= min_bytes
    assert decode_batches(part.records) == [(0, b"k", b"small"), (1, b"k", big)]


def test_fetch_with_nothing_to_read_answers_empty_when_max_wait_expires(broker) -> None:
    """Short max_wait_ms and no data: the broker must answer (empty, no error) once the wait is
    over instead of holding the request. A liveness check: only RECV_TIMEOUT_S bounds it."""
    topic = _new_topic(broker, "lp-empty")
    with WireConnection(*_host_port(broker.bootstrap), timeout_s=RECV_TIMEOUT_S) as conn:
        _send_fetch(conn, 3, topic, max_wait_ms=200, min_bytes=1)
        response = parse_fetch_response(conn.recv_frame(), FETCH_VERSION)
    assert (response.correlation_id, response.error_code) == (3, ERROR_NONE)
    (part,) = response.partitions
    assert (part.error_code, part.high_watermark, part.records) == (ERROR_NONE, 0, b"")


def test_fetch_below_min_bytes_answers_with_what_there_is_when_max_wait_expires(broker) -> None:
    """min_bytes never reached within max_wait_ms: the answer carries the records that are there
    (min_bytes is a reason to wait, not a filter)."""
    topic = _new_topic(broker, "lp-partial")
    assert _raw_produce(broker.bootstrap, topic, [b"only"]) == 0
    with WireConnection(*_host_port(broker.bootstrap), timeout_s=RECV_TIMEOUT_S) as conn:
        _send_fetch(conn, 4, topic, max_wait_ms=200, min_bytes=1024 * 1024)
        response = parse_fetch_response(conn.recv_frame(), FETCH_VERSION)
    assert response.error_code == ERROR_NONE
    (part,) = response.partitions
    assert (part.error_code, part.high_watermark) == (ERROR_NONE, 1)
    assert decode_batches(part.records) == [(0, b"k", b"only")]


def _fetch_once(bootstrap: str, topic: str, version: int, **fields: object):
    """One Fetch of partition 0 from offset 0 that is answerable at once (min_bytes=1 on a
    partition holding data); returns the parsed answer."""
    with WireConnection(*_host_port(bootstrap), timeout_s=RECV_TIMEOUT_S) as conn:
        body = fetch_request_body(version, topic, 0, 0, max_wait_ms=500, min_bytes=1, **fields)  # type: ignore[arg-type]
        return parse_fetch_response(conn.request(API_FETCH, version, 9, body), version)


@pytest.mark.parametrize(
    ("session_id", "session_epoch"),
    [
        (0, FINAL_EPOCH),  # sessionless full fetch: what librdkafka always sends
        (0, INITIAL_EPOCH),  # full fetch asking for a new session
        (1234, FINAL_EPOCH),  # full fetch closing session 1234 (a client shutting its session)
        (1234, INITIAL_EPOCH),  # full fetch closing 1234 and asking for a new session
    ],
)
def test_kip227_full_fetch_is_answered_with_session_id_zero(broker, session_id, session_epoch) -> None:
    """KIP-227: a full fetch (epoch -1 or 0) is always served in full, whatever session it names
    (a named session is closed, not looked up); session id 0 in the answer means "no session",
    which a broker may always answer, so the client keeps sending full fetches."""
    topic = _new_topic(broker, "sess-full")
    _raw_produce(broker.bootstrap, topic, [b"v"])
    response = _fetch_once(broker.bootstrap, topic, FETCH_VERSION, session_id=session_id, session_epoch=session_epoch)
    assert (response.error_code, response.session_id) == (ERROR_NONE, 0)
    (part,) = response.partitions
    assert part.error_code == ERROR_NONE
    assert decode_batches(part.records) == [(0, b"k", b"v")]


@pytest.mark.parametrize(("session_id", "session_epoch"), [(1234, 1), (1234, 7), (0, 1)])
def test_kip227_incremental_fetch_on_unknown_session_gets_fetch_session_id_not_found(
    broker, session_id, session_epoch
) -> None:
    """KIP-227: an incremental fetch (epoch > 0) continues a session; on a session the broker
    never created it gets the top-level error FETCH_SESSION_ID_NOT_FOUND, session id 0 and no
    partition data (session id 0 is never a real session, so it is not found either)."""
    topic = _new_topic(broker, "sess-incr")
    _raw_produce(broker.bootstrap, topic, [b"v"])
    response = _fetch_once(broker.bootstrap, topic, FETCH_VERSION, session_id=session_id, session_epoch=session_epoch)
    assert response.error_code == ERROR_FETCH_SESSION_ID_NOT_FOUND
    assert response.session_id == 0
    assert response.partitions == []


@pytest.mark.parametrize("version", [4, 5, 6])
def test_fetch_before_v7_has_no_session_fields_and_is_a_full_fetch(broker, version) -> None:
    """Fetch v4-v6 predate KIP-227 (no session id or epoch in the request or the response): every
    such fetch is a sessionless full fetch and is answered with the partition's records."""
    topic = _new_topic(broker, f"sess-v{version}")
    _raw_produce(broker.bootstrap, topic, [b"old"])
    response = _fetch_once(broker.bootstrap, topic, version)
    (part,) = response.partitions
    assert (part.error_code, part.high_watermark) == (ERROR_NONE, 1)
    assert decode_batches(part.records) == [(0, b"k", b"old")]


READ_COMMITTED = 1


def test_kip98_read_committed_fetch_parked_at_the_lso_is_woken_by_the_commit_marker(broker) -> None:
    """read_committed long poll (KIP-98): a transaction's record is in the log but past the LSO,
    so the fetch parks; the COMMIT marker moves the LSO and must wake it, with no further data
    produced. (A broker that wakes fetches only on produced data answers at max_wait_ms, which
    this test never waits for: a commit would cost read_committed readers up to max_wait_ms.)"""
    topic = _new_topic(broker, "lp-commit")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"{topic}-txn",
                         "linger.ms": 0})
    try:
        producer.init_transactions(CLIENT_TIMEOUT_S)
        producer.begin_transaction()
        producer.produce(topic, b"committed-later", key=b"k", partition=0)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0, "the transactional record was not acknowledged"
        with WireConnection(*_host_port(broker.bootstrap), timeout_s=RECV_TIMEOUT_S) as conn:
            _send_fetch(conn, 3, topic, max_wait_ms=LONG_WAIT_MS, min_bytes=1, isolation_level=READ_COMMITTED)
            _assert_no_answer_yet(conn, "while the only record belongs to an open transaction")

            producer.commit_transaction(CLIENT_TIMEOUT_S)
            response = parse_fetch_response(conn.recv_frame(), FETCH_VERSION)
    finally:
        del producer  # never left retrying against a stopped broker
    assert (response.correlation_id, response.error_code) == (3, ERROR_NONE)
    (part,) = response.partitions
    assert part.error_code == ERROR_NONE
    assert part.high_watermark == 2  # the record and its COMMIT marker
    assert decode_batches(part.records) == [(0, b"k", b"committed-later")]
