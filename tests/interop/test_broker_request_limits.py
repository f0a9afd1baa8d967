"""Limits one request cannot exceed, against a real broker process (Kafka's names and rules).

- ``fetch.max.bytes`` (broker, default 55 MiB) caps every Fetch response, whatever the request
  asks for; the first batch is still returned whole, so consumers make progress.
- CreateTopics / CreatePartitions asking for more than 10,000 partitions in one request get
  POLICY_VIOLATION (Kafka's controller refuses excessively large batches), and so does anything
  that would take the broker past ``oncestream.max.partitions`` (CreateTopics, CreatePartitions,
  auto-creation through Metadata). Nothing is created when refused.
- ``connections.max.idle.ms``: a connection that moved no byte for that long is closed, also one
  stopped in the middle of a frame; one that keeps making requests is not.
- ``max.connections`` / ``max.connections.per.ip`` (+ overrides): connections beyond them are
  closed at accept, the admitted ones keep being answered, and a slot freed is reusable.
- ``queued.max.request.bytes``: a frame whose announced size cannot be reserved from the one
  broker-wide pool closes its own connection; small requests are always answered, and a
  librdkafka producer refused that way reconnects and delivers everything once memory frees.
"""

from __future__ import annotations

import select
import socket
import time

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import NewPartitions, NewTopic

from oncestream.protocol.codec import build
from tests.support.clients import (
    CLIENT_TIMEOUT_S,
    admin_client,
    confluent_consume,
    create_topic,
    unique_topic,
)
from tests.support.txn import READ_UNCOMMITTED, read_to_end, start_txn_broker, values_of
from tests.support.wire import (
    PeerClosed,
    WireConnection,
    api_versions_v3_body,
    fetch_request_body,
    frame,
    parse_fetch_response,
    parse_produce_response,
    produce_request_body,
    record_batch,
    request_header,
)

pytestmark = pytest.mark.interop

API_PRODUCE, API_FETCH, API_METADATA, API_VERSIONS = 0, 1, 3, 18
FETCH_VERSION, PRODUCE_VERSION = 11, 7
FETCH_CAP_BYTES = 64 * 1024
RECORD_BYTES = 10_000
BATCHES = 20
POLICY_VIOLATION = 44
MIB = 1024 * 1024
# Hard caps for waiting on something the broker must eventually do (never a claim about speed).
CLOSE_CAP_S = 30.0
IDLE_MS = 1500
# The internal topics' partitions (offsets and transaction state, 10 each by default) count too.
MAX_PARTITIONS = 30


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    broker = start_txn_broker(
        tmp_path_factory.mktemp("request-limits") / "data",
        extra_config={"fetch.max.bytes": str(FETCH_CAP_BYTES), "oncestream.max.partitions": str(MAX_PARTITIONS)},
    )
    try:
        yield broker
    finally:
        broker.stop()


def _host_port(bootstrap: str) -> tuple[str, int]:
    host, port = bootstrap.rsplit(":", 1)
    return host, int(port)


def test_fetch_max_bytes_caps_a_response_that_asks_for_more(limited):
    topic = unique_topic("fetch-cap")
    create_topic(limited.bootstrap, topic)
    values = [bytes([65 + i]) * RECORD_BYTES for i in range(BATCHES)]
    with WireConnection(*_host_port(limited.bootstrap)) as conn:
        for i, value in enumerate(values):  # one batch per request: BATCHES batches of ~10 KB
            body = produce_request_body(topic, 0, record_batch([value], timestamp_ms=int(time.time() * 1000)))
            _, (result,) = parse_produce_response(conn.request(API_PRODUCE, PRODUCE_VERSION, i, body), PRODUCE_VERSION)
            assert result.error_code == 0
        body = fetch_request_body(FETCH_VERSION, topic, 0, 0, max_wait_ms=0, min_bytes=1,
                                  max_bytes=64 * 1024 * 1024, partition_max_bytes=64 * 1024 * 1024)
        response = parse_fetch_response(conn.request(API_FETCH, FETCH_VERSION, 99, body), FETCH_VERSION)
    (part,) = response.partitions
    assert part.error_code == 0
    assert part.high_watermark == BATCHES
    assert 0 < len(part.records) <= FETCH_CAP_BYTES  # asked for 64 MiB; ~200 KB were there
    # A real consumer still reads everything, FETCH_CAP_BYTES at a time.
    assert values_of(read_to_end(limited.bootstrap, topic, 1, isolation=READ_UNCOMMITTED)) == {0: values}


def test_a_first_batch_larger_than_fetch_max_bytes_is_still_returned(limited):
    topic = unique_topic("fetch-cap-big")
    create_topic(limited.bootstrap, topic)
    big = b"z" * (FETCH_CAP_BYTES * 2)
    with WireConnection(*_host_port(limited.bootstrap)) as conn:
        body = produce_request_body(topic, 0, record_batch([big], timestamp_ms=int(time.time() * 1000)))
        _, (result,) = parse_produce_response(conn.request(API_PRODUCE, PRODUCE_VERSION, 1, body), PRODUCE_VERSION)
        assert result.error_code == 0
        body = fetch_request_body(FETCH_VERSION, topic, 0, 0, max_wait_ms=0, min_bytes=1)
        (part,) = parse_fetch_response(conn.request(API_FETCH, FETCH_VERSION, 2, body), FETCH_VERSION).partitions
    assert len(part.records) > FETCH_CAP_BYTES


def _create_errors(bootstrap: str, topics: list[NewTopic], **options) -> dict[str, int | None]:
    """CreateTopics through librdkafka's AdminClient: the error code per topic (None: created)."""
    admin = admin_client(bootstrap)  # kept referenced: a collected client fails its futures
    futures = admin.create_topics(topics, request_timeout=CLIENT_TIMEOUT_S, **options)
    codes: dict[str, int | None] = {}
    for name, future in futures.items():
        try:
            future.result(CLIENT_TIMEOUT_S)
            codes[name] = None
        except KafkaException as exc:
            codes[name] = exc.args[0].code()
    return codes


def _grow_error(bootstrap: str, topic: str, total_partitions: int) -> int | None:
    """CreatePartitions through librdkafka's AdminClient: the error code (None: grown)."""
    admin = admin_client(bootstrap)
    (future,) = admin.create_partitions([NewPartitions(topic, total_partitions)], request_timeout=CLIENT_TIMEOUT_S).values()
    try:
        future.result(CLIENT_TIMEOUT_S)
    except KafkaException as exc:
        return exc.args[0].code()
    return None


def _topic_names(bootstrap: str) -> set[str]:
    return set(admin_client(bootstrap).list_topics(timeout=CLIENT_TIMEOUT_S).topics)


def test_more_than_ten_thousand_partitions_in_one_request_is_a_policy_violation(limited):
    names = [unique_topic("huge-a"), unique_topic("huge-b")]
    codes = _create_errors(limited.bootstrap, [NewTopic(n, num_partitions=6000, replication_factor=1) for n in names])
    assert codes == {n: POLICY_VIOLATION for n in names}
    assert not set(names) & _topic_names(limited.bootstrap)
    # Also in validate-only mode: the limit is on the request, not on what it would create.
    assert _create_errors(limited.bootstrap, [NewTopic(names[0], num_partitions=10_001, replication_factor=1)],
                          validate_only=True) == {names[0]: POLICY_VIOLATION}


def test_create_partitions_beyond_ten_thousand_in_one_request_is_a_policy_violation(limited):
    topic = unique_topic("grow-huge")
    create_topic(limited.bootstrap, topic)
    assert _grow_error(limited.bootstrap, topic, 10_002) == POLICY_VIOLATION


def test_the_broker_wide_partition_budget_refuses_creations_that_exceed_it(limited):
    """oncestream.max.partitions=30 with 20 internal partitions: each test above created 1-partition
    topics, so fill up to the limit exactly, then every way of adding one more is refused."""
    held = sum(len(t.partitions) for t in admin_client(limited.bootstrap).list_topics(timeout=CLIENT_TIMEOUT_S).topics.values())
    room = MAX_PARTITIONS - held
    assert room >= 3, f"the broker already holds {held} partitions"
    grown = unique_topic("budget-grown")
    create_topic(limited.bootstrap, grown, partitions=room - 1)
    refused = unique_topic("budget-refused")
    assert _create_errors(limited.bootstrap, [NewTopic(refused, num_partitions=2, replication_factor=1)]) == {
        refused: POLICY_VIOLATION}
    assert _grow_error(limited.bootstrap, grown, room + 1) == POLICY_VIOLATION
    last = unique_topic("budget-last")
    assert _create_errors(limited.bootstrap, [NewTopic(last, num_partitions=1, replication_factor=1)]) == {last: None}
    # Now full: auto-creation through Metadata is refused as well.
    from tests.support.txn import _connection

    with _connection(limited.bootstrap) as conn:
        resp = conn.call(API_METADATA, lambda m: build(m.MetadataRequest,
            topics=(build(m.MetadataRequestTopic, name=unique_topic("budget-auto"), topic_id=None),),
            allow_auto_topic_creation=True, include_topic_authorized_operations=False))
    assert [int(t.error_code) for t in resp.topics] == [POLICY_VIOLATION]
    assert refused not in _topic_names(limited.bootstrap)


# -- connection limits -------------------------------------------------------------------------
def _api_versions(conn: WireConnection, correlation_id: int) -> int:
    """One ApiVersions v3 round trip; returns the response's correlation id."""
    response = conn.request(API_VERSIONS, 3, correlation_id, api_versions_v3_body(), flexible_header=True)
    return int.from_bytes(response[:4], "big")


def _closed_by_peer(sock: socket.socket, timeout_s: float) -> bool:
    """True when the broker closed ``sock`` (EOF or reset) within ``timeout_s``; False if it is
    still open and silent."""
    readable, _, _ = select.select([sock], [], [], timeout_s)
    if not readable:
        return False
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _raw_socket(host: str, port: int, source_ip: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((source_ip, 0))
    sock.connect((host, port))
    return sock


class _SocketConnection(WireConnection):
    """A WireConnection over a socket we opened ourselves (bound to a chosen source address)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.settimeout(CLOSE_CAP_S)


def _admitted(host: str, port: int, source_ip: str = "127.0.0.1") -> WireConnection:
    """A connection that got an ApiVersions answer. Retried up to a cap: a connection that was
    just closed (the fixture's readiness probe, a test's own) holds its slot until the broker has
    read its EOF."""
    deadline = time.monotonic() + CLOSE_CAP_S
    while True:
        conn = _SocketConnection(_raw_socket(host, port, source_ip))
        try:
            assert _api_versions(conn, 1) == 1
            return conn
        except (PeerClosed, BrokenPipeError, ConnectionResetError):
            conn.close()
            if time.monotonic() > deadline:
                raise AssertionError(f"no connection from {source_ip} admitted within {CLOSE_CAP_S}s") from None
            time.sleep(0.05)


def test_a_connection_idle_in_the_middle_of_a_frame_is_closed_an_active_one_is_not(broker_factory):
    """connections.max.idle.ms: no byte in or out for that long closes the connection, even with
    half a frame read (the broker used to wait for the rest forever)."""
    broker = broker_factory({"connections.max.idle.ms": str(IDLE_MS)})
    host, port = _host_port(broker.bootstrap)
    active = _admitted(host, port)
    half = _raw_socket(host, port)
    silent = _raw_socket(host, port)
    try:
        half.sendall(b"\x00\x00\x01\x00" + b"\x00\x12\x00\x03")  # a 256-byte frame, 4 bytes of it
        started = time.monotonic()
        answered = 0
        # Keep the active connection busy, back to back, until both idle ones are closed, then for
        # as long again: it must never be taken for idle.
        while not (_closed_by_peer(half, 0) and _closed_by_peer(silent, 0)):
            answered += 1
            assert _api_versions(active, answered) == answered
            assert time.monotonic() - started < CLOSE_CAP_S, "idle connections were never closed"
        idle_closed_after_s = time.monotonic() - started
        while time.monotonic() - started < 2 * idle_closed_after_s:
            answered += 1
            assert _api_versions(active, answered) == answered
        assert idle_closed_after_s >= IDLE_MS / 1000 * 0.9  # closed for idleness, not at once
    finally:
        for sock in (half, silent):
            sock.close()
        active.close()


def test_max_connections_closes_the_connection_beyond_the_limit_at_accept(broker_factory):
    broker = broker_factory({"max.connections": "3"})
    host, port = _host_port(broker.bootstrap)
    first = [_admitted(host, port) for _ in range(3)]
    extra = _raw_socket(host, port)
    try:
        assert _closed_by_peer(extra, CLOSE_CAP_S), "the 4th connection must be closed at accept"
        for i, conn in enumerate(first):  # the admitted ones are still served
            assert _api_versions(conn, 10 + i) == 10 + i
        first.pop().close()
        replacement = _admitted(host, port)  # the freed slot is usable again
        first.append(replacement)
        assert _api_versions(replacement, 20) == 20
    finally:
        extra.close()
        for conn in first:
            conn.close()


def test_max_connections_per_ip_with_an_override(broker_factory):
    """Kafka's max.connections.per.ip and max.connections.per.ip.overrides: 127.0.0.1 and
    127.0.0.2 are both loopback on Linux, so each address gets its own count."""
    broker = broker_factory({"max.connections.per.ip": "2", "max.connections.per.ip.overrides": "127.0.0.2:3"})
    host, port = _host_port(broker.bootstrap)
    opened = [_admitted(host, port) for _ in range(2)]
    refused = []
    try:
        refused.append(_raw_socket(host, port))
        assert _closed_by_peer(refused[-1], CLOSE_CAP_S), "a 3rd connection from 127.0.0.1 is over its limit"
        opened += [_admitted(host, port, "127.0.0.2") for _ in range(3)]  # the override allows 3
        refused.append(_raw_socket(host, port, "127.0.0.2"))
        assert _closed_by_peer(refused[-1], CLOSE_CAP_S), "a 4th connection from 127.0.0.2 is over its override"
        for i, conn in enumerate(opened):
            assert _api_versions(conn, 30 + i) == 30 + i
    finally:
        for sock in refused:
            sock.close()
        for conn in opened:
            conn.close()


# -- queued.max.request.bytes ------------------------------------------------------------------
POOL_BYTES = 4 * MIB


def _large_produce_frame(topic: str, value_bytes: int) -> bytes:
    batch = record_batch([b"x" * value_bytes], timestamp_ms=int(time.time() * 1000))
    payload = request_header(API_PRODUCE, PRODUCE_VERSION, 7, flexible=False) + produce_request_body(topic, 0, batch)
    return frame(payload)


def _pool_refusals(broker) -> int:
    return sum("does not fit queued.max.request.bytes" in line for line in broker.stderr_tail().splitlines())


def test_a_frame_that_cannot_reserve_pool_memory_closes_only_its_own_connection(broker_factory):
    broker = broker_factory({"socket.request.max.bytes": str(POOL_BYTES), "queued.max.request.bytes": str(POOL_BYTES)})
    host, port = _host_port(broker.bootstrap)
    topic = unique_topic("pool")
    create_topic(broker.bootstrap, topic, config={"max.message.bytes": str(POOL_BYTES)})
    big = _large_produce_frame(topic, 3 * MIB)  # two of these do not fit in the pool together
    first, second = _raw_socket(host, port), _raw_socket(host, port)
    sockets = [first, second]
    try:
        for sock in sockets:  # the size prefix and part of the body: each asks for ~3 MiB
            sock.sendall(big[:64 * 1024])
        readable, _, _ = select.select(sockets, [], [], CLOSE_CAP_S)
        assert len(readable) == 1, "exactly one frame gets the memory"
        assert _closed_by_peer(readable[0], 0), "exactly one frame gets the memory"
        (holder,) = [sock for sock in sockets if sock is not readable[0]]
        # While 3 MiB are held, small requests on other connections are answered...
        with WireConnection(host, port) as small:
            assert _api_versions(small, 5) == 5
        # ...and a producer whose ~1.5 MiB requests do not fit is closed; it reconnects and retries.
        values = [bytes([65 + i]) * (3 * MIB // 2) for i in range(3)]
        producer = Producer({
            "bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 0,
            "message.max.bytes": POOL_BYTES - 64 * 1024, "batch.size": 2 * MIB,
        })
        for value in values:
            producer.produce(topic, value, partition=0)
        deadline = time.monotonic() + CLOSE_CAP_S
        while _pool_refusals(broker) < 2:  # the raw socket's, then the producer's
            producer.poll(0.05)
            assert time.monotonic() < deadline, "the producer's request was never refused"
        # The holder's request completes normally and gives its memory back.
        holder.sendall(big[64 * 1024:])
        _, (result,) = parse_produce_response(_SocketConnection(holder).recv_frame(), PRODUCE_VERSION)
        assert result.error_code == 0
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
    finally:
        for sock in sockets:
            sock.close()
    assert [r.value for r in confluent_consume(broker.bootstrap, topic, 1)] == [b"x" * (3 * MIB), *values]
