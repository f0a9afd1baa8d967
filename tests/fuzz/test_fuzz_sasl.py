"""Hypothesis fuzzing of the SASL exchange against a live SASL_PLAINTEXT broker (issue 14).

Random and truncated SCRAM client-first / client-final messages (derived from a real exchange),
random PLAIN payloads and random mechanism names: every example must get a well-formed answer
with a SASL error code (or success for a real login) and a closed connection after a failure,
never a crash. Afterwards the broker must still authenticate and serve a real client.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncestream.client.common.sasl import ScramClient
from tests.support.clients import CLIENT_TIMEOUT_S, unique_topic
from tests.support.sasl import librdkafka_conf, start_sasl_broker
from tests.support.wire import PeerClosed, ResponseReader, WireConnection, int16, int32

pytestmark = pytest.mark.fuzz

FUZZ_SETTINGS = settings(max_examples=150, deadline=None, database=None,
                         suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
OK, UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED = 0, 33, 34, 58


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory):
    broker = start_sasl_broker(tmp_path_factory.mktemp("sasl-fuzz") / "data",
                               {"connection.failed.authentication.delay.ms": "0"})
    try:
        yield broker
    finally:
        broker.stop()


def _connect(broker) -> WireConnection:
    host, port = broker.bootstrap.rsplit(":", 1)
    return WireConnection(host, int(port))


def _handshake(conn: WireConnection, mechanism: bytes) -> int:
    body = conn.request(SASL_HANDSHAKE, 1, 1, int16(len(mechanism)) + mechanism)
    r = ResponseReader(body)
    assert r.take(">i") == 1
    return r.take(">h")


def _authenticate(conn: WireConnection, correlation_id: int, token: bytes) -> tuple[int, bytes | None]:
    body = conn.request(SASL_AUTHENTICATE, 1, correlation_id, int32(len(token)) + token)
    r = ResponseReader(body)
    assert r.take(">i") == correlation_id
    error = r.take(">h")
    r.string()
    auth_bytes = r.nullable_bytes()
    r.take(">q")
    assert r.remaining() == 0
    return error, auth_bytes


def _closed_after_failure(conn: WireConnection) -> None:
    conn.finish_sending()
    assert conn.drain_until_closed() == []


def _mutate(data: bytes, draw) -> bytes:
    """Truncate, splice random bytes into, or replace a real message."""
    kind = draw(st.sampled_from(["truncate", "splice", "random", "replace-attr"]))
    if kind == "truncate":
        return data[:draw(st.integers(0, max(0, len(data) - 1)))]
    if kind == "splice":
        at = draw(st.integers(0, len(data)))
        return data[:at] + draw(st.binary(max_size=40)) + data[at + draw(st.integers(0, 8)):]
    if kind == "random":
        return draw(st.binary(max_size=300))
    parts = data.split(b",")
    i = draw(st.integers(0, len(parts) - 1))
    parts[i] = draw(st.binary(max_size=30))
    return b",".join(parts)


@given(data=st.data(), mechanism=st.sampled_from(["SCRAM-SHA-256", "SCRAM-SHA-512"]),
       step=st.sampled_from(["first", "final"]))
@FUZZ_SETTINGS
def test_fuzzed_scram_messages_fail_cleanly(sasl_broker, data, mechanism, step):
    client = ScramClient(mechanism, "scram-alice", "scram-secret")
    with _connect(sasl_broker) as conn:
        assert _handshake(conn, mechanism.encode()) == OK
        first = client.first()
        if step == "first":
            token = _mutate(first, data.draw)
            error, _ = _authenticate(conn, 2, token)
            if error == OK:  # a mutation that is still a valid client-first for the user
                return
        else:
            error, server_first = _authenticate(conn, 2, first)
            assert error == OK
            assert server_first
            final = client.final(server_first)
            token = _mutate(final, data.draw)
            error, _ = _authenticate(conn, 3, token)
            if token == final:  # the mutation changed nothing
                assert error == OK
                return
        assert error == SASL_AUTHENTICATION_FAILED, error
        _closed_after_failure(conn)


@given(payload=st.one_of(st.binary(max_size=200),
                         st.lists(st.binary(max_size=40), min_size=0, max_size=5).map(b"\0".join)))
@FUZZ_SETTINGS
def test_fuzzed_plain_payloads_fail_cleanly(sasl_broker, payload):
    with _connect(sasl_broker) as conn:
        assert _handshake(conn, b"PLAIN") == OK
        error, _ = _authenticate(conn, 2, payload)
        assert error == SASL_AUTHENTICATION_FAILED
        _closed_after_failure(conn)


@given(mechanism=st.binary(max_size=60))
@FUZZ_SETTINGS
def test_fuzzed_mechanism_names_are_refused(sasl_broker, mechanism):
    with _connect(sasl_broker) as conn:
        try:
            error = _handshake(conn, mechanism)
        except PeerClosed:  # not UTF-8: an undecodable request closes the connection
            return
        if mechanism in (b"PLAIN", b"SCRAM-SHA-256", b"SCRAM-SHA-512"):
            assert error == OK
            return
        assert error == UNSUPPORTED_SASL_MECHANISM
        _closed_after_failure(conn)


def test_broker_still_authenticates_after_fuzzing(sasl_broker):
    assert sasl_broker.is_alive(), sasl_broker.stderr_tail()
    for mechanism in ("PLAIN", "SCRAM-SHA-512"):
        producer = Producer({"bootstrap.servers": sasl_broker.bootstrap, **librdkafka_conf(mechanism)})
        producer.produce(unique_topic("after-fuzz"), b"ok")
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
