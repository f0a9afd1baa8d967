"""The inter-broker keys of a cluster broker (broker/inter_broker.py): which listener a peer is
reached on, the SASL credentials and the TLS context of that connection, and the start-up
refusals of an incomplete configuration."""

from __future__ import annotations

import socket
import ssl
import threading

import pytest

from oncestream.broker.inter_broker import InterBrokerSecurity, inter_broker_security
from oncestream.broker.listeners import parse_listeners
from oncestream.broker.tls import server_ssl_context
from oncestream.errors import InvalidConfigError
from tests.support.certs import Pki

THREE = {
    "listeners": "CLIENT://127.0.0.1:1,PLAINTEXT://127.0.0.1:2,INTERNAL://127.0.0.1:3",
    "listener.security.protocol.map": "CLIENT:SASL_SSL,PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
}
WAIT_S = 30.0  # a bound on a hang only
SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="pw";'


def _security(props: dict[str, str]) -> InterBrokerSecurity:
    return inter_broker_security(props, parse_listeners(props, "127.0.0.1", 9092))


def test_without_keys_kafkas_default_listener_plaintext_else_the_first() -> None:
    assert _security(THREE).listener_name == "PLAINTEXT"
    single = {"listeners": "CLIENT://127.0.0.1:1", "listener.security.protocol.map": "CLIENT:PLAINTEXT"}
    assert _security(single).listener_name == "CLIENT"
    assert _security({}).listener_name == "PLAINTEXT"  # --listen alone


def test_listener_name_or_protocol_picks_the_listener() -> None:
    by_name = _security({**THREE, "inter.broker.listener.name": "internal", "sasl.mechanism.inter.broker.protocol":
                         "SCRAM-SHA-512", "listener.name.internal.scram-sha-512.sasl.jaas.config": SCRAM_JAAS})
    assert (by_name.listener_name, by_name.security_protocol) == ("INTERNAL", "SASL_PLAINTEXT")
    assert by_name.ssl_context is None
    by_protocol = _security({"listeners": "PLAINTEXT://127.0.0.1:1,SSL://127.0.0.1:2",
                             "security.inter.broker.protocol": "SSL"})
    assert by_protocol.listener_name == "SSL"


def test_sasl_credentials_from_the_listener_and_mechanism_prefixed_jaas_config() -> None:
    props = {**THREE, "inter.broker.listener.name": "INTERNAL", "sasl.mechanism.inter.broker.protocol": "scram-sha-512",
             "listener.name.internal.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
             "sasl.jaas.config": SCRAM_JAAS.replace('"broker"', '"unprefixed"')}
    sasl = _security(props).sasl
    assert sasl is not None
    assert (sasl.mechanism, sasl.username, sasl.password) == ("SCRAM-SHA-512", "broker", "pw")
    # A PLAIN JAAS config names the broker's own login next to the users it accepts, as in Kafka.
    plain = {**THREE, "inter.broker.listener.name": "INTERNAL", "sasl.mechanism.inter.broker.protocol": "PLAIN",
             "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                 'username="admin" password="a" user_admin="a" user_alice="b";'}
    plain_sasl = _security(plain).sasl
    assert plain_sasl is not None
    assert (plain_sasl.username, plain_sasl.password) == ("admin", "a")


@pytest.mark.parametrize(("extra", "message"), [
    ({"inter.broker.listener.name": "INTERNAL", "security.inter.broker.protocol": "PLAINTEXT"}, "only one of"),
    ({"inter.broker.listener.name": "NOPE"}, "no listener of that name"),
    ({"security.inter.broker.protocol": "SSL"}, "no listener of that name"),
    ({"inter.broker.listener.name": "INTERNAL"}, "sasl.mechanism.inter.broker.protocol"),
    ({"inter.broker.listener.name": "INTERNAL", "sasl.mechanism.inter.broker.protocol": "GSSAPI"}, "supported are"),
    ({"inter.broker.listener.name": "INTERNAL", "sasl.mechanism.inter.broker.protocol": "PLAIN",
      "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-512"}, "sasl.enabled.mechanisms"),
    ({"inter.broker.listener.name": "INTERNAL", "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
      "listener.name.internal.scram-sha-512.sasl.jaas.config": SCRAM_JAAS}, "username"),
])
def test_an_incomplete_configuration_is_refused_at_start(extra: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        _security({**THREE, **extra})


def test_tls_context_verifies_the_peer_with_the_listeners_truststore(pki: Pki) -> None:
    props = {"listeners": "INTERNAL://127.0.0.1:1", "listener.security.protocol.map": "INTERNAL:SSL",
             **pki.broker_stores()}
    context = _security(props).ssl_context
    assert context is not None
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert len(context.get_ca_certs()) == 1  # the test CA only, not the system's
    unchecked = _security({**props, "listener.name.internal.ssl.endpoint.identification.algorithm": ""}).ssl_context
    assert unchecked is not None
    assert not unchecked.check_hostname
    with pytest.raises(InvalidConfigError, match="cannot load CAs"):
        _security({**props, "ssl.truststore.location": str(pki.dir / "missing.pem")})
    with pytest.raises(InvalidConfigError, match="only PEM"):
        _security({**props, "ssl.truststore.type": "JKS"})


def test_a_peer_presents_its_key_store_to_a_listener_requiring_client_certificates(pki: Pki) -> None:
    """Two brokers of one config on an SSL inter-broker listener with ``ssl.client.auth=required``:
    the connecting broker's context (its key store as client certificate) completes a handshake
    with the listening broker's (broker/tls.py), both sides verified. The test PKI's broker
    certificate serves both ends, as a Kafka broker's does (server and client auth)."""
    props = {"listeners": "INTERNAL://127.0.0.1:1", "listener.security.protocol.map": "INTERNAL:SSL",
             "listener.name.internal.ssl.client.auth": "required", **pki.broker_stores()}
    client = _security(props).ssl_context
    assert client is not None
    server = server_ssl_context(props, "INTERNAL")
    with socket.create_server(("127.0.0.1", 0)) as listening:
        listening.settimeout(WAIT_S)
        port = listening.getsockname()[1]
        outcome: dict[str, object] = {}

        def accept() -> None:
            conn, _ = listening.accept()
            try:
                with server.wrap_socket(conn, server_side=True) as tls:
                    outcome["peer"] = tls.getpeercert()
                    tls.sendall(b"ok")
            except (OSError, ssl.SSLError) as exc:
                outcome["error"] = exc

        thread = threading.Thread(target=accept)
        thread.start()
        try:
            with client.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=WAIT_S),
                                    server_hostname="127.0.0.1") as tls:
                answer = tls.recv(2)
        finally:
            thread.join(WAIT_S)
    assert "error" not in outcome, outcome
    assert answer == b"ok"
    subject = dict(item[0] for item in outcome["peer"]["subject"])  # type: ignore[index]
    assert subject["commonName"] == "localhost"
