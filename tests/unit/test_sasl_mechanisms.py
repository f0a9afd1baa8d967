"""SASL mechanisms, sans-io: PLAIN (RFC 4616), SCRAM (RFC 5802 / RFC 7677 test vectors), the
JAAS user table, the SCRAM credential store, and one connection's exchange (gate, KIP-368)."""

from __future__ import annotations

import base64

import pytest

from oncestream.broker.connection_context import ConnectionSession
from oncestream.broker.sasl.credentials import ScramCredentialStore
from oncestream.broker.sasl.errors import (
    IllegalSaslStateError,
    SaslAuthenticationError,
    UnsupportedSaslMechanismError,
)
from oncestream.broker.sasl.exchange import SaslExchange, SaslSettings
from oncestream.broker.sasl.jaas import plain_users
from oncestream.broker.sasl.plain import PlainAuthenticator
from oncestream.broker.sasl.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramServer,
    make_credential,
)
from oncestream.client.common.sasl import SaslClientError, ScramClient
from oncestream.errors import InvalidConfigError
from oncestream.protocol import api_keys as k

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')

# RFC 7677 section 3.
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_server() -> ScramServer:
    cred = make_credential(SCRAM_SHA_256, "pencil", 4096, salt=RFC_SALT)
    return ScramServer(SCRAM_SHA_256, lambda user, mech: cred if user == "user" else None,
                       nonce_factory=lambda: RFC_SERVER_NONCE)


def test_scram_sha_256_server_matches_rfc7677_vector():
    server = rfc_server()
    assert server.first(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert server.final(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete
    assert server.username == "user"


def test_scram_client_matches_rfc7677_vector():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first() == RFC_CLIENT_FIRST
    assert client.final(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    client.verify(RFC_SERVER_FINAL)
    with pytest.raises(SaslClientError):
        client.verify(b"v=" + base64.b64encode(b"\0" * 32))


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_scram_round_trip_and_wrong_password(mechanism):
    cred = make_credential(mechanism, "s3cret", 4096)
    lookup = {("bob", mechanism.name): cred}.get

    def run(password: str) -> bytes:
        server = ScramServer(mechanism, lambda u, m: lookup((u, m)))
        client = ScramClient(mechanism.name, "bob", password)
        final = server.final(client.final(server.first(client.first())))
        client.verify(final)
        return final

    run("s3cret")
    with pytest.raises(SaslAuthenticationError):
        run("wrong")


def test_scram_stored_credential_holds_no_password():
    cred = make_credential(SCRAM_SHA_512, "hunter2", 8192)
    assert b"hunter2" not in cred.stored_key + cred.server_key + cred.salt
    assert len(cred.stored_key) == len(cred.server_key) == 64
    assert cred.iterations == 8192
    with pytest.raises(ValueError, match=r"iterations must be between 4096 and 16384, not 4095"):
        make_credential(SCRAM_SHA_256, "x", 4095)
    with pytest.raises(ValueError, match=r"iterations must be between 4096 and 16384, not 16385"):
        make_credential(SCRAM_SHA_256, "x", 16385)


@pytest.mark.parametrize("first", [
    b"", b"n", b"n,", b"y,,n=user,r=abc", b"p=tls,,n=user,r=abc", b"n,,", b"n,,n=user", b"n,,r=abc,n=user",
    b"n,,n=,r=abc", b"n,,n=user,r=", b"n,,n=us=er,r=abc", b"n,,m=ext,n=user,r=abc", b"\xff\xfe",
    b"n,a=other,n=user,r=abc", b"n,x,n=user,r=abc", b"n,,n=nobody,r=abc", b"n,,n=user,r=a,b" * 2000,
])
def test_scram_bad_client_first_is_an_authentication_error(first):
    with pytest.raises(SaslAuthenticationError):
        rfc_server().first(first)


@pytest.mark.parametrize("final", [
    b"", b"c=biws", b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    b"c=biws,r=wrongnonce,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    b"c=eSws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=!!!",
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AAAA",
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,c=biws,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
])
def test_scram_bad_client_final_is_an_authentication_error(final):
    server = rfc_server()
    server.first(RFC_CLIENT_FIRST)
    with pytest.raises(SaslAuthenticationError):
        server.final(final)
    with pytest.raises(SaslAuthenticationError):  # no second try on the same exchange
        server.final(RFC_CLIENT_FINAL)


def test_jaas_plain_users_and_syntax_errors():
    assert plain_users(JAAS) == {"admin": "admin-secret", "alice": "alice-secret"}
    assert plain_users('x.PlainLoginModule required user_q="a\\"b";') == {"q": 'a"b'}
    for bad in ["", "PlainLoginModule", 'x.Module required user_a="b"', 'x.Module bogus user_a="b";']:
        with pytest.raises(InvalidConfigError):
            plain_users(bad)


@pytest.mark.parametrize(("token", "ok"), [
    (b"\0alice\0alice-secret", True),
    (b"alice\0alice\0alice-secret", True),
    (b"\0alice\0wrong", False),
    (b"\0mallory\0alice-secret", False),
    (b"admin\0alice\0alice-secret", False),  # authzid differs from the user
    (b"\0alice\0", False), (b"\0\0x", False), (b"alice-secret", False), (b"\0a\0b\0c", False),
    (b"\0\xff\0x", False), (b"", False),
])
def test_plain_authenticator(token, ok):
    auth = PlainAuthenticator(plain_users(JAAS))
    if ok:
        assert auth.authenticate(token) == "alice"
    else:
        with pytest.raises(SaslAuthenticationError):
            auth.authenticate(token)


def test_credential_store_is_durable_and_atomic(tmp_path):
    store = ScramCredentialStore.open(tmp_path)
    # '!' and '-' are outside base64's alphabet, so the random salt and keys cannot contain it.
    cred = make_credential(SCRAM_SHA_512, "pass-word!", 4096)
    store.apply([("bob", "SCRAM-SHA-512", cred), ("amy", "SCRAM-SHA-256", make_credential(SCRAM_SHA_256, "x"))], [])
    assert b"pass-word!" not in (tmp_path / "scram-credentials.json").read_bytes()
    reopened = ScramCredentialStore.open(tmp_path)
    assert reopened.get("bob", "SCRAM-SHA-512") == cred
    reopened.apply([], [("amy", "SCRAM-SHA-256")])
    assert set(ScramCredentialStore.open(tmp_path).users()) == {"bob"}


def _settings(tmp_path, **props: str) -> SaslSettings:
    return SaslSettings.from_properties(tmp_path, "SASL_PLAINTEXT", {
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS, **props})


def test_exchange_gate_before_and_after_authentication(tmp_path):
    session = ConnectionSession(security_protocol="SASL_PLAINTEXT")
    ex = SaslExchange(_settings(tmp_path), session)
    keys = (k.SASL_HANDSHAKE, k.SASL_AUTHENTICATE, k.API_VERSIONS_KEY)
    assert ex.may_serve(k.API_VERSIONS_KEY, *keys, now_ms=0)
    assert not ex.may_serve(k.METADATA, *keys, now_ms=0)
    ex.handshake("PLAIN", 1)
    assert not ex.may_serve(k.PRODUCE, *keys, now_ms=0)
    assert ex.authenticate(b"\0alice\0alice-secret", now_ms=0) == b""
    assert session.authenticated
    assert session.principal == "User:alice"
    assert ex.may_serve(k.PRODUCE, *keys, now_ms=10**12)  # no connections.max.reauth.ms: forever
    assert ex.session_lifetime_ms(0) == 0


def test_exchange_refuses_unknown_mechanism_and_failed_auth_closes(tmp_path):
    settings = _settings(tmp_path, **{"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256"})
    ex = SaslExchange(settings, ConnectionSession(security_protocol="SASL_PLAINTEXT"))
    with pytest.raises(UnsupportedSaslMechanismError):
        ex.handshake("SCRAM-SHA-512", 1)
    assert ex.close_requested
    ex = SaslExchange(settings, ConnectionSession(security_protocol="SASL_PLAINTEXT"))
    with pytest.raises(IllegalSaslStateError):
        ex.authenticate(b"\0alice\0alice-secret", 0)
    ex = SaslExchange(settings, ConnectionSession(security_protocol="SASL_PLAINTEXT"))
    ex.handshake("PLAIN", 1)
    with pytest.raises(SaslAuthenticationError):
        ex.authenticate(b"\0alice\0nope", 0)
    assert ex.close_requested
    assert not ex.session.authenticated


def test_kip368_reauthentication_deadline_and_same_principal(tmp_path):
    """connections.max.reauth.ms: the lifetime is reported, past it only re-authentication is
    served, and a re-authentication must keep the principal."""
    session = ConnectionSession(security_protocol="SASL_PLAINTEXT")
    ex = SaslExchange(_settings(tmp_path, **{"connections.max.reauth.ms": "1000"}), session)
    keys = (k.SASL_HANDSHAKE, k.SASL_AUTHENTICATE, k.API_VERSIONS_KEY)
    ex.handshake("PLAIN", 1)
    ex.authenticate(b"\0alice\0alice-secret", now_ms=5000)
    assert ex.session_lifetime_ms(5000) == 1000
    assert ex.may_serve(k.FETCH, *keys, now_ms=5999)
    assert not ex.may_serve(k.FETCH, *keys, now_ms=6000)
    assert ex.may_serve(k.SASL_HANDSHAKE, *keys, now_ms=6000)
    ex.handshake("PLAIN", 1)
    ex.authenticate(b"\0alice\0alice-secret", now_ms=6000)
    assert ex.may_serve(k.FETCH, *keys, now_ms=6999)
    ex.handshake("PLAIN", 1)
    with pytest.raises(SaslAuthenticationError):
        ex.authenticate(b"\0admin\0admin-secret", now_ms=7000)
    assert ex.close_requested


def test_settings_refuse_unknown_enabled_mechanism(tmp_path):
    with pytest.raises(InvalidConfigError):
        _settings(tmp_path, **{"sasl.enabled.mechanisms": "GSSAPI"})


def test_sasl_settings_follow_each_listener_and_share_one_scram_store(tmp_path):
    """Listeners come from broker/listeners.py; each SASL one gets its own
    ``listener.name.<l>.*`` mechanisms and PLAIN users, all of them the broker's one SCRAM store."""
    from oncestream.broker.config import BrokerConfig
    from oncestream.broker.state import BrokerState

    config = BrokerConfig.from_properties("127.0.0.1", 0, {
        "listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT,EXTERNAL:SASL_SSL",
        "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": JAAS,
        "listener.name.external.sasl.enabled.mechanisms": "SCRAM-SHA-512",
    })
    assert [(x.name, x.security_protocol) for x in config.all_listeners] == [
        ("INTERNAL", "SASL_PLAINTEXT"), ("EXTERNAL", "SASL_SSL")]
    state = BrokerState(tmp_path, config)
    try:
        internal, external = state.sasl_for("INTERNAL"), state.sasl_for("EXTERNAL")
        assert internal.enabled_mechanisms == ("PLAIN",)
        assert external.enabled_mechanisms == ("SCRAM-SHA-512",)
        assert internal.plain.authenticate(b"\0alice\0alice-secret") == "alice"
        with pytest.raises(SaslAuthenticationError):
            external.plain.authenticate(b"\0alice\0alice-secret")
        assert internal.scram_store is external.scram_store is state.scram_store
    finally:
        state.close()
