"""SASL refusals (issue 14 point 3): wrong password, unknown user and unknown mechanism fail
cleanly with Kafka's error codes and a closed connection, requests before authentication close
the connection, and the broker keeps serving authenticated clients throughout. Also
``connections.max.reauth.ms`` as reported to the client (KIP-368)."""

from __future__ import annotations

import struct
import time

import pytest
from confluent_kafka import KafkaError as CKafkaError
from confluent_kafka import Producer

from oncestream.client.common.connection import BrokerConnection
from oncestream.client.common.sasl import SaslClientError, SaslCredentials
from tests.support.clients import CLIENT_TIMEOUT_S, unique_topic
from tests.support.cluster_kind import processes_of
from tests.support.metrics import metrics_url_of, scrape, value
from tests.support.sasl import SASL_SUITES_EXTRA, kafka_python_conf, librdkafka_conf, sasl_broker_of_kind
from tests.support.wire import PeerClosed, ResponseReader, WireConnection, int16, int32

pytestmark = pytest.mark.interop

SASL_HANDSHAKE, SASL_AUTHENTICATE, METADATA = 17, 36, 3
UNSUPPORTED_SASL_MECHANISM, SASL_AUTHENTICATION_FAILED = 33, 58


@pytest.fixture(scope="module")
def sasl_broker(module_our_broker_factory):
    """Our single broker, or a cluster; the raw connections go to its first broker, whose
    /metrics count their failed authentications."""
    return sasl_broker_of_kind(module_our_broker_factory, SASL_SUITES_EXTRA)


def _connect(broker) -> WireConnection:
    return WireConnection(broker.host, broker.port)


def _handshake(conn: WireConnection, mechanism: str) -> tuple[int, list[str]]:
    body = conn.request(SASL_HANDSHAKE, 1, 1, int16(len(mechanism)) + mechanism.encode())
    r = ResponseReader(body)
    r.take(">i")
    error = r.take(">h")
    return error, [str(r.string()) for _ in range(r.take(">i"))]


def _authenticate_v1(conn: WireConnection, token: bytes) -> tuple[int, str | None, bytes | None, int]:
    body = conn.request(SASL_AUTHENTICATE, 1, 2, int32(len(token)) + token)
    r = ResponseReader(body)
    r.take(">i")
    return r.take(">h"), r.string(), r.nullable_bytes(), r.take(">q")


def _assert_closed(conn: WireConnection) -> None:
    conn.finish_sending()
    assert conn.drain_until_closed() == []


def _good_client_still_served(broker) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, **librdkafka_conf("SCRAM-SHA-512")})
    producer.produce(unique_topic("still-served"), b"ok")
    assert producer.flush(CLIENT_TIMEOUT_S) == 0


def _failed_authentications(broker) -> float:
    """The counter of the broker ``_connect`` reaches (a cluster's first)."""
    return value(scrape(metrics_url_of(processes_of(broker)[0])),
                 "kafka_server_socket_server_metrics_failed_authentication_total", listener="PLAINTEXT")


def test_unknown_mechanism_gets_33_with_enabled_list_then_close(sasl_broker):
    with _connect(sasl_broker) as conn:
        error, mechanisms = _handshake(conn, "GSSAPI")
        assert error == UNSUPPORTED_SASL_MECHANISM
        assert mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        _assert_closed(conn)
    _good_client_still_served(sasl_broker)


@pytest.mark.parametrize("token", [b"\0alice\0wrong-password", b"\0nobody\0alice-secret"],
                         ids=["wrong-password", "unknown-user"])
def test_failed_plain_authentication_gets_58_then_close(sasl_broker, token):
    before = _failed_authentications(sasl_broker)
    with _connect(sasl_broker) as conn:
        assert _handshake(conn, "PLAIN")[0] == 0
        error, message, _, _ = _authenticate_v1(conn, token)
        assert error == SASL_AUTHENTICATION_FAILED
        assert message
        _assert_closed(conn)
    _good_client_still_served(sasl_broker)
    assert _failed_authentications(sasl_broker) == before + 1  # /metrics: failed-authentication-total


def test_request_before_authentication_closes_the_connection(sasl_broker):
    with _connect(sasl_broker) as conn:
        metadata_v1_all_topics = int32(-1)
        conn.send(struct.pack(">i", 10 + 4 + len(metadata_v1_all_topics))
                  + int16(METADATA) + int16(1) + int32(7) + int16(4) + b"fuzz" + metadata_v1_all_topics)
        with pytest.raises(PeerClosed):
            conn.recv_frame()


def test_session_lifetime_reported_from_connections_max_reauth_ms(sasl_broker):
    with _connect(sasl_broker) as conn:
        assert _handshake(conn, "PLAIN")[0] == 0
        error, _, _, lifetime_ms = _authenticate_v1(conn, b"\0alice\0alice-secret")
        assert error == 0
        assert 0 < lifetime_ms <= 3600000


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_clients_with_a_wrong_password_fail_cleanly(sasl_broker, mechanism, caplog):
    errors: list[CKafkaError] = []
    producer = Producer({"bootstrap.servers": sasl_broker.bootstrap, "error_cb": errors.append,
                         **librdkafka_conf(mechanism, password="not-it")})
    producer.produce(unique_topic("denied"), b"x")
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while not any(e.code() == CKafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
        producer.poll(0.2)
    assert any(e.code() == CKafkaError._AUTHENTICATION for e in errors), errors
    producer.purge()
    # Ended here, not by the garbage collector at some later test: its threads still retry the
    # brokers (three of them on a cluster). Two cluster-kind runs ended in a segfault of pytest a
    # few tests after this one, with such producers left to the collector (not diagnosed further).
    producer.flush(1)
    del producer

    from kafka import KafkaProducer
    from kafka.errors import KafkaError as KpError
    with caplog.at_level("ERROR", logger="kafka"), pytest.raises(KpError):
        KafkaProducer(bootstrap_servers=sasl_broker.bootstrap, bootstrap_timeout_ms=2000,
                      **kafka_python_conf(mechanism, password="not-it"))
    assert any("Authentication failed" in r.getMessage() for r in caplog.records)

    user = "alice" if mechanism == "PLAIN" else "scram-alice"
    with pytest.raises(SaslClientError):
        BrokerConnection(sasl_broker.host, sasl_broker.port, sasl=SaslCredentials(mechanism, user, "not-it"))
    with pytest.raises(SaslClientError):
        BrokerConnection(sasl_broker.host, sasl_broker.port, sasl=SaslCredentials(mechanism, "no-such-user", "x"))
    _good_client_still_served(sasl_broker)


def _raw_token(conn: WireConnection, token: bytes) -> bytes:
    """Send a bare token, read the bare answer (may be empty: recv_frame would refuse size 0)."""
    conn.send(int32(len(token)) + token)
    (size,) = struct.unpack(">i", conn._recv_exactly(4))
    return conn._recv_exactly(size) if size else b""


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_handshake_v0_then_bare_tokens_as_kafka(sasl_broker, mechanism):
    """SaslHandshake v0: the tokens follow as bare size-prefixed frames (no request header), then
    the connection serves requests; a bad bare token just closes the connection."""
    from oncestream.client.common.sasl import ScramClient

    with _connect(sasl_broker) as conn:
        body = conn.request(SASL_HANDSHAKE, 0, 1, int16(len(mechanism)) + mechanism.encode())
        assert struct.unpack_from(">ih", body) == (1, 0)
        if mechanism == "PLAIN":
            assert _raw_token(conn, b"\0alice\0alice-secret") == b""
        else:
            client = ScramClient(mechanism, "scram-alice", "scram-secret")
            server_first = _raw_token(conn, client.first())
            client.verify(_raw_token(conn, client.final(server_first)))
        metadata_v1_no_topics = int32(0)
        body = conn.request(METADATA, 1, 5, metadata_v1_no_topics)
        assert struct.unpack_from(">i", body)[0] == 5
    with _connect(sasl_broker) as conn:
        conn.request(SASL_HANDSHAKE, 0, 1, int16(5) + b"PLAIN")
        conn.send(int32(len(b"\0alice\0nope-nope")) + b"\0alice\0nope-nope")
        with pytest.raises(PeerClosed):
            conn.recv_frame()


@pytest.fixture(scope="module")
def short_sessions_broker(module_our_broker_factory):
    """A broker (or cluster) announcing 1.5 s SASL sessions (KIP-368)."""
    return sasl_broker_of_kind(module_our_broker_factory, {"connections.max.reauth.ms": "1500"})


def test_librdkafka_reauthenticates_before_the_session_expires(short_sessions_broker):
    """KIP-368 with a real client: librdkafka re-authenticates on its connection before the
    session lifetime we announce runs out, so producing keeps working across several lifetimes
    on the same connections (a request on an expired session would close them)."""
    broker = short_sessions_broker
    errors: list[CKafkaError] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "error_cb": errors.append,
                         "linger.ms": 0, **librdkafka_conf("SCRAM-SHA-512")})
    topic = unique_topic("reauth")
    for _ in range(4):
        producer.produce(topic, b"v")
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
        time.sleep(1.0)  # spans the 1.5 s lifetime: not a timing assertion, the work must go on
    assert not [e for e in errors if e.code() == CKafkaError._AUTHENTICATION], errors
    log = broker.output_tail()
    assert "expired session" not in log, log


def test_our_client_reauthenticates_before_the_session_expires(short_sessions_broker):
    """KIP-368 with our client: it re-authenticates at 85% of the announced lifetime on the same
    connection, so the broker never sees a request on an expired session."""
    import oncestream.client

    broker = short_sessions_broker
    producer = oncestream.client.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0,
                                           **librdkafka_conf("SCRAM-SHA-256")})
    topic = unique_topic("reauth-ours")
    for _ in range(4):
        producer.produce(topic, b"v")
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
        time.sleep(1.0)  # spans the 1.5 s lifetime: not a timing assertion
    producer.close(CLIENT_TIMEOUT_S)
    log = broker.output_tail()
    assert "expired session" not in log, log
