"""principal.builder.class (broker/principal.py): the shipped default maps identities as Kafka's
DefaultKafkaPrincipalBuilder; a builder plugged in by class name decides instead, and only a
builder that asks for it ever sees a request's client.id."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import pytest

from oncestream.broker.config import BrokerConfig
from oncestream.broker.connection_context import current_session, start_session
from oncestream.broker.dispatch import Dispatcher
from oncestream.broker.principal import (
    ANONYMOUS_PRINCIPAL,
    KAFKA_DEFAULT_PRINCIPAL_BUILDER,
    AuthenticationContext,
    DefaultKafkaPrincipalBuilder,
    load_principal_builder,
)
from oncestream.broker.seams import BrokerSeams
from oncestream.broker.state import BrokerState
from oncestream.errors import InvalidConfigError
from oncestream.protocol.api_keys import API_VERSIONS_KEY
from tests.support.principals import CLIENT_ID_PRINCIPAL_BUILDER, ClientIdPrincipalBuilder

ALICE_CERT = {"subject": ((("commonName", "alice"),), (("organizationName", "acme"),))}


def context(protocol: str, **facts: object) -> AuthenticationContext:
    return AuthenticationContext(security_protocol=protocol, listener_name=protocol, client_address="10.0.0.1",
                                 **facts)  # type: ignore[arg-type]


def test_default_builder_maps_sasl_ids_and_certificates_as_kafka() -> None:
    build = DefaultKafkaPrincipalBuilder().build
    assert build(context("PLAINTEXT")) == ANONYMOUS_PRINCIPAL
    assert build(context("PLAINTEXT", client_id="principal:alice")) == ANONYMOUS_PRINCIPAL
    assert build(context("SSL", peer_certificate=ALICE_CERT)) == "User:O=acme,CN=alice"
    assert build(context("SSL")) == ANONYMOUS_PRINCIPAL
    assert build(context("SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_authorization_id="bob")) == "User:bob"
    # On SASL_SSL only SASL names the client, whatever certificate it shows (as in Kafka).
    assert build(context("SASL_SSL", peer_certificate=ALICE_CERT, sasl_mechanism="SCRAM-SHA-256",
                         sasl_authorization_id="bob")) == "User:bob"
    assert build(context("SASL_SSL", peer_certificate=ALICE_CERT)) == ANONYMOUS_PRINCIPAL


class Configured:
    """A builder that records the broker properties it was configured with."""

    reads_client_id = False

    def configure(self, props: dict[str, str]) -> None:
        self.props = props

    def build(self, context: AuthenticationContext) -> str:
        return "User:" + self.props["example.user"]


class NoBuild:
    pass


def test_principal_builder_class_is_loaded_by_name() -> None:
    for props in ({}, {"principal.builder.class": KAFKA_DEFAULT_PRINCIPAL_BUILDER}):
        assert type(load_principal_builder(props)) is DefaultKafkaPrincipalBuilder
    for name in (CLIENT_ID_PRINCIPAL_BUILDER, CLIENT_ID_PRINCIPAL_BUILDER.replace(":", ".")):
        assert type(load_principal_builder({"principal.builder.class": name})) is ClientIdPrincipalBuilder
    configured = load_principal_builder({"principal.builder.class": f"{__name__}:Configured", "example.user": "carol"})
    assert configured.build(context("PLAINTEXT")) == "User:carol"
    for bad in ("nomodule_here:Builder", f"{__name__}:Missing", f"{__name__}:NoBuild", "Builder"):
        with pytest.raises(InvalidConfigError, match=r"principal\.builder\.class"):
            load_principal_builder({"principal.builder.class": bad})


def _api_versions_frame(client_id: str) -> bytes:
    """ApiVersions v0 with a v1 request header (key, version, correlation id, client.id)."""
    raw = client_id.encode()
    return struct.pack(">hhih", API_VERSIONS_KEY, 0, 7, len(raw)) + raw


def _principals_after_requests(tmp_path: Path, seams: BrokerSeams | None, client_ids: list[str]) -> list[str]:
    state = BrokerState(tmp_path, BrokerConfig.from_properties("127.0.0.1", 0, {}), seams=seams)
    try:
        dispatcher = Dispatcher(state)

        async def connection() -> list[str]:
            start_session(("127.0.0.1", 5555), principal_builder=state.principal_builder)
            seen = []
            for client_id in client_ids:
                assert await dispatcher.handle_frame(_api_versions_frame(client_id)) is not None
                seen.append(current_session().principal)
            return seen

        return asyncio.run(connection())
    finally:
        state.close()


def test_only_a_builder_that_reads_client_ids_sees_them(tmp_path: Path) -> None:
    plugged = BrokerSeams(principal_builder=ClientIdPrincipalBuilder())
    assert _principals_after_requests(tmp_path / "plugged", plugged, ["principal:alice", "principal:bob", "rdkafka"]) \
        == ["User:alice", "User:bob", ANONYMOUS_PRINCIPAL]
    # The shipped default: a client.id names nobody.
    assert _principals_after_requests(tmp_path / "default", None, ["principal:alice"]) == [ANONYMOUS_PRINCIPAL]
