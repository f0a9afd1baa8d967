"""Listeners (Kafka's listeners / advertised.listeners / listener.security.protocol.map), the
broker's PEM-store SSL contexts, Kafka's default SSL principal mapping, and the client's TLS
properties (librdkafka's names)."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from oncestream.broker.config import BrokerConfig
from oncestream.broker.listeners import parse_listeners
from oncestream.broker.principal import ANONYMOUS_PRINCIPAL, principal_from_certificate, rfc2253_name
from oncestream.broker.tls import server_ssl_context
from oncestream.client import KafkaException
from oncestream.client.common.config import resolve
from oncestream.client.common.tls import ssl_context_for
from oncestream.errors import InvalidConfigError
from tests.support.certs import Pki


def test_listen_alone_is_one_plaintext_listener_advertising_itself() -> None:
    (only,) = parse_listeners({}, "127.0.0.1", 9092)
    assert (only.name, only.security_protocol, only.advertised) == ("PLAINTEXT", "PLAINTEXT", ("127.0.0.1", 9092))


def test_listen_with_advertised_listeners_keeps_the_old_single_listener_meaning() -> None:
    (only,) = parse_listeners({"advertised.listeners": "PLAINTEXT://kafka.example:19092"}, "0.0.0.0", 9092)
    assert only.advertised == ("kafka.example", 19092)


def test_several_listeners_with_kafkas_default_protocol_map() -> None:
    listeners = parse_listeners(
        {"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093,sasl_ssl://:9094"}, "unused", 1)
    assert [(x.name, x.security_protocol, x.port) for x in listeners] == [
        ("PLAINTEXT", "PLAINTEXT", 9092), ("SSL", "SSL", 9093), ("SASL_SSL", "SASL_SSL", 9094)]
    assert listeners[2].host == ""  # empty host: every interface, as in Kafka
    assert listeners[1].uses_tls
    assert listeners[2].uses_tls
    assert not listeners[0].uses_tls


def test_custom_protocol_map_replaces_the_default_and_advertised_is_per_listener() -> None:
    props = {
        "listeners": "CLIENT://127.0.0.1:0,INTERNAL://127.0.0.1:9095",
        "listener.security.protocol.map": "CLIENT:SSL,INTERNAL:PLAINTEXT",
        "advertised.listeners": "CLIENT://public.example:443",
    }
    config = BrokerConfig.from_properties("ignored", 1, props)
    assert config.advertised_for("CLIENT") == ("public.example", 443)
    assert config.advertised_for("INTERNAL") == ("127.0.0.1", 9095)
    assert config.advertised_for("NO_SUCH") == ("public.example", 443)  # the first listener's
    assert config.all_listeners[0].security_protocol == "SSL"


@pytest.mark.parametrize(("props", "message"), [
    ({"listeners": "PLAINTEXT://127.0.0.1:1,PLAINTEXT://127.0.0.1:2"}, "twice"),
    ({"listeners": "PLAINTEXT://127.0.0.1:1,SSL://127.0.0.1:1"}, "same port"),
    ({"listeners": "CLIENT://127.0.0.1:1"}, "no security protocol"),
    ({"listeners": "A://127.0.0.1:1", "listener.security.protocol.map": "A:TLS"}, "unknown security protocol"),
    ({"listeners": "PLAINTEXT://127.0.0.1:x"}, "numeric"),
    ({"listeners": "127.0.0.1:9092"}, "NAME://"),
    ({"listeners": "PLAINTEXT://127.0.0.1:1", "advertised.listeners": "SSL://h:2"}, "not in listeners"),
    ({"listeners": "PLAINTEXT://127.0.0.1:1", "advertised.listeners": "PLAINTEXT://0.0.0.0:1"}, "meta-address"),
])
def test_bad_listener_properties_are_refused_at_start(props: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        BrokerConfig.from_properties("127.0.0.1", 9092, props)


def test_principal_of_a_cn_only_subject_is_kafkas_default_user_cn() -> None:
    assert principal_from_certificate({"subject": ((("commonName", "alice"),),)}) == "User:CN=alice"


def test_principal_uses_rfc2253_most_specific_first_with_escaping() -> None:
    subject = ((("countryName", "DE"),), (("organizationName", "Acme, Inc"),),
               (("organizationalUnitName", "eng"),), (("commonName", "bob"), ("userId", "b1")))
    assert rfc2253_name(subject) == "CN=bob+UID=b1,OU=eng,O=Acme\\, Inc,C=DE"
    assert rfc2253_name(((("commonName", "#a;b "),),)) == "CN=\\#a\\;b\\ "


def test_no_client_certificate_is_anonymous() -> None:
    assert principal_from_certificate({}) == ANONYMOUS_PRINCIPAL
    assert principal_from_certificate(None) == ANONYMOUS_PRINCIPAL


def test_server_context_from_pem_stores_is_tls12_plus_with_client_auth_modes(pki: Pki) -> None:
    base = pki.broker_stores()
    modes = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
    for text, mode in modes.items():
        ctx = server_ssl_context({**base, "ssl.client.auth": text}, "SSL")
        assert ctx.verify_mode == mode
        assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2


def test_per_listener_ssl_override_wins(pki: Pki) -> None:
    props = {"ssl.keystore.location": "/nonexistent.pem",
             "listener.name.ssl.ssl.keystore.location": str(pki.server_keystore),
             "listener.name.ssl.ssl.client.auth": "required",
             "ssl.truststore.location": str(pki.ca)}
    assert server_ssl_context(props, "SSL").verify_mode == ssl.CERT_REQUIRED
    with pytest.raises(InvalidConfigError, match="nonexistent"):
        server_ssl_context(props, "OTHER")


@pytest.mark.parametrize(("extra", "message"), [
    ({"ssl.keystore.type": "JKS"}, "only PEM"),
    ({"ssl.keystore.location": ""}, "not set"),
    ({"ssl.client.auth": "always"}, "expected none"),
    ({"ssl.client.auth": "required", "ssl.truststore.location": ""}, "needs ssl.truststore.location"),
    ({"ssl.enabled.protocols": "TLSv1.1,TLSv1.2"}, "TLS 1.2 or newer"),
    ({"ssl.truststore.location": "/nonexistent-ca.pem"}, "cannot load CAs"),
])
def test_bad_ssl_properties_are_refused(pki: Pki, extra: dict[str, str], message: str) -> None:
    props = {"ssl.keystore.location": str(pki.server_keystore), **extra}
    with pytest.raises(InvalidConfigError, match=message):
        server_ssl_context(props, "SSL")


def test_keystore_without_a_key_is_refused(pki: Pki) -> None:
    with pytest.raises(InvalidConfigError, match="cannot load key"):
        server_ssl_context({"ssl.keystore.location": str(pki.ca)}, "SSL")


def test_client_takes_librdkafka_tls_properties(pki: Pki) -> None:
    conf = resolve({"bootstrap.servers": "localhost:1", "security.protocol": "SSL",
                    "ssl.ca.location": str(pki.ca), "ssl.certificate.location": str(pki.alice.cert),
                    "ssl.key.location": str(pki.alice.key)}, "producer")
    ctx = ssl_context_for(conf)
    assert ctx is not None
    assert ctx.check_hostname
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    conf = resolve({**conf, "ssl.endpoint.identification.algorithm": "none"}, "producer")
    ctx = ssl_context_for(conf)
    assert ctx is not None
    assert not ctx.check_hostname
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert ssl_context_for(resolve({"bootstrap.servers": "h:1"}, "consumer")) is None


@pytest.mark.parametrize("conf", [
    {"security.protocol": "tls"},
    {"security.protocol": "ssl", "ssl.ca.location": "/nonexistent/ca.pem"},
    {"security.protocol": "ssl", "ssl.endpoint.identification.algorithm": "dns"},
])
def test_client_refuses_bad_tls_properties(conf: dict[str, str], tmp_path: Path) -> None:
    with pytest.raises(KafkaException):
        resolve({"bootstrap.servers": "h:1", **conf}, "admin")


def test_command_config_file_reads_client_properties(tmp_path: Path) -> None:
    from oncestream.cli_common import CliError, read_command_config

    path = tmp_path / "client.properties"
    path.write_text("# comment\n! also a comment\n\nsecurity.protocol = SSL\nssl.ca.location=/a=b.pem\n")
    assert read_command_config(str(path)) == {"security.protocol": "SSL", "ssl.ca.location": "/a=b.pem"}
    path.write_text("security.protocol\n")
    with pytest.raises(CliError, match=":1: expected key=value"):
        read_command_config(str(path))
    with pytest.raises(CliError, match="--command-config"):
        read_command_config(str(tmp_path / "missing.properties"))
