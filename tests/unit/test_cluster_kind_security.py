"""tests/support/cluster_kind.py's ``peer_client_conf``: a secured suite's broker config alone says
how the cluster kind sees its brokers converge, as a client logging in the way the brokers log in
to each other on the bootstrap listener (their inter-broker credentials and trust store)."""

from __future__ import annotations

import pytest

from tests.support.certs import make_pki
from tests.support.cluster_kind import peer_client_conf
from tests.support.sasl import plain_jaas, sasl_broker_config

STORES = {"ssl.keystore.type": "PEM", "ssl.keystore.location": "/pki/broker.pem",
          "ssl.truststore.type": "PEM", "ssl.truststore.location": "/pki/ca.pem"}


def test_a_plaintext_bootstrap_listener_needs_nothing() -> None:
    assert peer_client_conf({}) == {}
    # TLS listeners beside PLAINTEXT: the bootstrap listener is the PLAINTEXT one.
    assert peer_client_conf({"listeners": "SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
                             "listener.security.protocol.map": "SSL:SSL,PLAINTEXT:PLAINTEXT", **STORES}) == {}


def test_a_sasl_default_listener_logs_in_as_the_brokers_do() -> None:
    assert peer_client_conf(sasl_broker_config()) == {
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.username": "admin", "sasl.password": "admin-secret"}


def test_a_sasl_ssl_first_listener_adds_the_trust_store(tmp_path) -> None:
    pki = make_pki(tmp_path)  # the brokers' peer client loads the trust store
    config = sasl_broker_config({
        "listeners": "SECURE://127.0.0.1:0,OTHER://127.0.0.1:0",
        "listener.security.protocol.map": "SECURE:SASL_SSL,OTHER:SASL_PLAINTEXT",
        "listener.name.secure.plain.sasl.jaas.config": plain_jaas({"admin": "pw", "alice": "a"}, login="admin"),
        **pki.broker_stores()})
    assert peer_client_conf(config) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "admin",
        "sasl.password": "pw", "ssl.ca.location": str(pki.ca)}


def test_a_secured_bootstrap_listener_that_the_brokers_do_not_use_is_refused() -> None:
    config = sasl_broker_config({
        "listeners": "SECURE://127.0.0.1:0,PEERS://127.0.0.1:0",
        "listener.security.protocol.map": "SECURE:SASL_SSL,PEERS:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PEERS",
        "listener.name.peers.plain.sasl.jaas.config": plain_jaas({"admin": "pw"}, login="admin"),
        **STORES})
    with pytest.raises(pytest.UsageError, match="not its inter-broker listener"):
        peer_client_conf(config)


def test_a_listener_asking_for_client_certificates_gets_the_brokers_own(tmp_path) -> None:
    """tests/interop/sql/test_sql_security.py's one listener: SASL_SSL with ssl.client.auth=required.
    The brokers present their key store to each other (broker/inter_broker.py); so does the client."""
    pki = make_pki(tmp_path)
    config = sasl_broker_config({
        "listeners": "SECURE://127.0.0.1:0",
        "listener.security.protocol.map": "SECURE:SASL_SSL",
        "listener.name.secure.plain.sasl.jaas.config": plain_jaas({"admin": "pw"}, login="admin"),
        "listener.name.secure.ssl.client.auth": "required",
        **pki.broker_stores()})
    assert peer_client_conf(config) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "admin",
        "sasl.password": "pw", "ssl.ca.location": str(pki.ca),
        "ssl.certificate.location": str(pki.server_keystore), "ssl.key.location": str(pki.server_keystore)}
