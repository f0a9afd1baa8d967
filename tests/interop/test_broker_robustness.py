"""Connection handling rules of the broker, checked over raw sockets and with librdkafka:
pipelined requests answered in order (also Produce requests appended while an earlier one waits
for its fsync round), a stalled or non-reading client never blocks others, acks=0 produce, one
log line (with the peer address, no traceback) per bad connection, producer ids never repeat
across restarts, and the fsync-before-ack flush policy."""

from __future__ import annotations

import datetime
import socket
import time
import uuid

import pytest
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode

from oncestream.client.common.connection import BrokerConnection
from oncestream.protocol.api_keys import DELETE_TOPICS
from tests.support.brokers import BrokerFaults
from tests.support.clients import confluent_consume, confluent_end_offsets, create_topic, unique_topic
from tests.support.wire import (
    WireConnection,
    api_versions_v3_body,
    correlation_id_of,
    frame,
    produce_request_body,
    record_batch,
    request_header,
)

pytestmark = pytest.mark.interop

API_PRODUCE, API_METADATA, API_VERSIONS, API_INIT_PRODUCER_ID = 0, 3, 18, 22


def _host_port(bootstrap: str) -> tuple[str, int]:
    """(host, port) of the first broker of a bootstrap string (any broker of a cluster serves
    every partition)."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    return host, int(port)


def _produce_values(bootstrap: str, topic: str, values: list[bytes], **conf: object) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **conf})
    for v in values:
        producer.produce(topic, v, partition=0)
    assert producer.flush(30) == 0


def test_pipelined_requests_are_answered_in_order(broker) -> None:
    """Protocol guide: responses on one connection come back in request order."""
    topic = unique_topic("pipeline")
    create_topic(broker.bootstrap, topic, partitions=1)
    with WireConnection(*_host_port(broker.bootstrap)) as conn:
        burst = b""
        for correlation_id in range(1, 41):
            if correlation_id % 2:
                payload = request_header(API_VERSIONS, 3, correlation_id, flexible=True) + api_versions_v3_body()
            else:
                batch = record_batch([b"p%d" % correlation_id], timestamp_ms=int(time.time() * 1000))
                payload = request_header(API_PRODUCE, 7, correlation_id, flexible=False) + produce_request_body(topic, 0, batch)
            burst += frame(payload)
        assert conn.send(burst)
        assert [correlation_id_of(conn.recv_frame()) for _ in range(40)] == list(range(1, 41))
    assert [r.value for r in confluent_consume(broker.bootstrap, topic, 1)] == [b"p%d" % i for i in range(2, 41, 2)]


def test_stalled_and_non_reading_clients_do_not_block_others(broker) -> None:
    """A client that sends half a frame and stalls, and one that pipelines requests without ever
    reading the answers, only stall their own connections."""
    topic = unique_topic("stalled")
    create_topic(broker.bootstrap, topic, partitions=1)
    host, port = _host_port(broker.bootstrap)
    half = socket.create_connection((host, port))
    half.sendall(b"\x00\x00\x01\x00" + b"\x00\x12\x00\x03")  # 256-byte frame, 4 bytes sent
    deaf = socket.create_connection((host, port))
    deaf.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    request = frame(request_header(API_METADATA, 1, 7, flexible=False) + b"\xff\xff\xff\xff")
    deaf.setblocking(False)
    sent = 0
    try:
        for _ in range(20000):  # fill the broker's send buffer towards this client
            sent += deaf.send(request)
    except BlockingIOError:
        pass
    assert sent > 0
    try:
        values = [b"v%d" % i for i in range(200)]
        _produce_values(broker.bootstrap, topic, values, **{"enable.idempotence": True})
        assert [r.value for r in confluent_consume(broker.bootstrap, topic, 1)] == values
    finally:
        half.close()
        deaf.close()


def test_acks_zero_produce_gets_no_response_but_is_stored(broker) -> None:
    topic = unique_topic("acks0")
    create_topic(broker.bootstrap, topic, partitions=1)
    with WireConnection(*_host_port(broker.bootstrap)) as conn:
        batch = record_batch([b"fire", b"forget"], timestamp_ms=int(time.time() * 1000))
        payload = request_header(API_PRODUCE, 7, 1, flexible=False) + produce_request_body(topic, 0, batch, acks=0)
        api = request_header(API_VERSIONS, 3, 2, flexible=True) + api_versions_v3_body()
        assert conn.send(frame(payload) + frame(api))
        # The next frame answers the ApiVersions request: the acks=0 produce got none.
        assert correlation_id_of(conn.recv_frame()) == 2
    _produce_values(broker.bootstrap, topic, [b"after"], acks=0)
    deadline = time.monotonic() + 10
    while True:
        values = [r.value for r in confluent_consume(broker.bootstrap, topic, 1)]
        if len(values) == 3 or time.monotonic() > deadline:
            break
    assert values == [b"fire", b"forget", b"after"]


def test_bad_connections_log_one_line_with_peer_and_no_traceback(broker_factory) -> None:
    broker = broker_factory()
    host, port = _host_port(broker.bootstrap)
    bad_frames = [
        b"\x7f\xff\xff\xff",  # oversize prefix
        frame(b"\x00\x63\x00\x00\x00\x00\x00\x01\xff\xff"),  # unknown api key 99
        frame(request_header(API_METADATA, 1, 1, flexible=False) + b"\x00\x00\x00\x05\x00"),  # truncated body
    ]
    peers = []
    for data in bad_frames:
        with WireConnection(host, port) as conn:
            peers.append(conn.sock.getsockname())
            conn.send(data)
            conn.finish_sending()
            conn.drain_until_closed()
    broker.stop()
    log = broker.stderr_tail()
    assert "Traceback" not in log
    for peer_host, peer_port in peers:
        lines = [line for line in log.splitlines() if f"'{peer_host}', {peer_port}" in line]
        assert len(lines) == 1, f"expected one line for {peer_port}: {lines}"


def test_producer_ids_never_repeat_across_restarts(broker_factory) -> None:
    """InitProducerId without a transactional id: a restarted (even SIGKILLed) broker never hands
    out an id it handed out before."""
    broker = broker_factory()
    seen: list[int] = []
    for round_number in range(3):
        with WireConnection(*_host_port(broker.bootstrap)) as conn:
            for correlation_id in range(5):
                body = b"\xff\xff" + b"\x00\x00\x75\x30"  # null transactional id, timeout 30 s (v0)
                response = conn.request(API_INIT_PRODUCER_ID, 0, correlation_id, body)
                producer_id = int.from_bytes(response[4 + 4 + 2 : 4 + 4 + 2 + 8], "big", signed=True)
                assert response[8:10] == b"\x00\x00", "error code NONE"
                seen.append(producer_id)
        broker.restart(crash=round_number % 2 == 0)
    assert len(set(seen)) == len(seen) == 15
    assert seen == sorted(seen)


def test_fsync_before_ack_flush_policy_acknowledges_and_keeps_everything(broker_factory) -> None:
    """flush.messages=1: acks=all waits for a (group-commit) fsync; everything acknowledged is there
    after a SIGKILL."""
    broker = broker_factory(config={"log.flush.interval.messages": "1"})
    topic = unique_topic("fsync")
    create_topic(broker.bootstrap, topic, partitions=1, config={"flush.messages": "1"})
    values = [b"d%d" % i for i in range(300)]
    _produce_values(broker.bootstrap, topic, values, acks="all", **{"enable.idempotence": True})
    broker.restart(crash=True)
    assert [r.value for r in confluent_consume(broker.bootstrap, topic, 1)] == values


def _end_offsets_once_at(bootstrap: str, topic: str, wanted: dict[int, int], timeout_s: float = 30.0) -> dict[int, int]:
    """The partitions' end offsets once they equal ``wanted``, or as they are after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        ends = confluent_end_offsets(bootstrap, topic, len(wanted))
        if ends == wanted or time.monotonic() > deadline:
            return ends
        time.sleep(0.05)


def test_produce_requests_behind_an_fsync_wait_are_appended_meanwhile_and_answered_in_order(
        broker_factory, tmp_path) -> None:
    """One connection whose last Produce waited for an fsync round, then five Produce requests
    sent at once, the first to a flush.messages=1 topic whose fsync rounds are held: the later
    ones are read and appended meanwhile (pipelined; a broker that reads one request at a time
    appends only the first), and the answers still come in the order of the requests, though the
    ones to the other topic were done first."""
    gate = tmp_path / "hold-fsync"
    broker = broker_factory(faults=BrokerFaults(hold_fsync_file=gate))
    durable, plain = unique_topic("fsynced"), unique_topic("behind-fsync")
    create_topic(broker.bootstrap, durable, partitions=1, config={"flush.messages": "1"})
    create_topic(broker.bootstrap, plain, partitions=1)
    now_ms = int(time.time() * 1000)

    def produce_frame(correlation_id: int, topic: str) -> bytes:
        return frame(request_header(API_PRODUCE, 7, correlation_id, flexible=False)
                     + produce_request_body(topic, 0, record_batch([b"r%d" % correlation_id], timestamp_ms=now_ms)))

    requests = [(1, durable), (2, plain), (3, plain), (4, durable), (5, plain)]
    burst = b"".join(produce_frame(correlation_id, topic) for correlation_id, topic in requests)
    try:
        with WireConnection(*_host_port(broker.bootstrap)) as conn:
            # The first Produce that waits for an fsync is handled alone; it makes the broker
            # pipeline this connection's next ones (server.py).
            assert conn.send(produce_frame(0, durable))
            assert correlation_id_of(conn.recv_frame()) == 0
            gate.touch()
            assert conn.send(burst)
            appended_plain = _end_offsets_once_at(broker.bootstrap, plain, {0: 3})
            appended_durable = _end_offsets_once_at(broker.bootstrap, durable, {0: 3})
            gate.unlink()
            answered = [correlation_id_of(conn.recv_frame()) for _ in requests]
    finally:
        gate.unlink(missing_ok=True)
    assert (appended_plain, appended_durable) == ({0: 3}, {0: 3})
    assert answered == [1, 2, 3, 4, 5]
    assert [r.value for r in confluent_consume(broker.bootstrap, durable, 1)] == [b"r0", b"r1", b"r4"]
    assert [r.value for r in confluent_consume(broker.bootstrap, plain, 1)] == [b"r2", b"r3", b"r5"]


def test_idempotent_librdkafka_producer_appends_behind_held_fsyncs_and_gets_every_answer_in_order(
        broker_factory, tmp_path) -> None:
    """librdkafka puts one partition in each Produce request: with the fsync rounds of a
    flush.messages=1 topic held (after one acknowledged record, which makes the broker pipeline
    the connection), its requests for all four partitions are appended on the one connection
    while none is answered; released, every record is acknowledged once, and a stream of
    requests in flight gets its answers in order (an answer out of order is fatal to librdkafka's
    idempotent producer) and lands in order, exactly once."""
    gate = tmp_path / "hold-fsync"
    broker = broker_factory(faults=BrokerFaults(hold_fsync_file=gate))
    topic = unique_topic("fsync-in-flight")
    partitions = 4
    create_topic(broker.bootstrap, topic, partitions=partitions, config={"flush.messages": "1"})
    failures: list[str] = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            failures.append(str(err))

    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 0, "on_delivery": on_delivery})
    producer.produce(topic, b"warm-up", partition=0)  # connection, producer id, one fsync before the gate
    assert producer.flush(30) == 0
    gate.touch()
    try:
        for partition in range(partitions):
            producer.produce(topic, b"held-%d" % partition, partition=partition)
        producer.poll(0)
        appended = _end_offsets_once_at(broker.bootstrap, topic, {0: 2, 1: 1, 2: 1, 3: 1})
        unanswered_while_held = len(producer)
    finally:
        gate.unlink(missing_ok=True)
    assert appended == {0: 2, 1: 1, 2: 1, 3: 1}
    assert unanswered_while_held == partitions
    values = [b"v%d" % i for i in range(400)]
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % partitions)
    assert producer.flush(30) == 0
    assert failures == []
    consumed = confluent_consume(broker.bootstrap, topic, partitions)
    for partition in range(partitions):
        mine = [r.value for r in consumed if r.partition == partition]
        warm_up = [b"warm-up"] if partition == 0 else []
        assert mine == [*warm_up, b"held-%d" % partition, *values[partition::partitions]]


def test_delete_topics_entry_with_neither_name_nor_id_is_an_invalid_request(broker) -> None:
    """DeleteTopics v6 (KIP-516) names a topic by name or by id; an entry with neither is refused
    as INVALID_REQUEST for that entry, the others still answered (found by typing the handler)."""
    topic = unique_topic("delete-by-nothing")
    create_topic(broker.bootstrap, topic, partitions=1)
    with BrokerConnection(*_host_port(broker.bootstrap), max_versions={DELETE_TOPICS: 6}) as conn:
        response = conn.call(DELETE_TOPICS, lambda m: m.DeleteTopicsRequest(
            topics=(m.DeleteTopicState(name=None, topic_id=uuid.UUID(int=0)),
                    m.DeleteTopicState(name=topic, topic_id=uuid.UUID(int=0))),
            timeout=datetime.timedelta(seconds=30)))
    codes = {r.name: r.error_code for r in response.responses}
    assert codes == {None: ErrorCode.invalid_request, topic: ErrorCode.none}
