"""One connection's SASL exchange (sans-io) and the broker-wide SASL settings.

States, in Kafka's order (SaslServerAuthenticator): ``handshake`` (SaslHandshake expected) ->
``authenticate`` (SaslAuthenticate tokens for the chosen mechanism; after a v0 handshake the
tokens come as raw size-prefixed frames instead) -> ``complete``. A failure moves to ``failed``
and the connection is closed once the answer is written. On a connection whose session has a
lifetime (``connections.max.reauth.ms``, KIP-368), a SaslHandshake v1+ after completion starts a
re-authentication that must end with the same principal and mechanism; once the lifetime has
passed, any other request closes the connection.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from oncestream.broker.connection_context import ConnectionSession
from oncestream.broker.sasl.credentials import ScramCredentials, ScramCredentialStore
from oncestream.broker.sasl.errors import (
    IllegalSaslStateError,
    SaslAuthenticationError,
    UnsupportedSaslMechanismError,
)
from oncestream.broker.sasl.jaas import plain_users
from oncestream.broker.sasl.plain import PlainAuthenticator
from oncestream.broker.sasl.scram import MECHANISMS, ScramServer
from oncestream.errors import InvalidConfigError

log = logging.getLogger(__name__)

PLAIN = "PLAIN"
SUPPORTED_MECHANISMS = (PLAIN, "SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_FAILED_AUTH_DELAY_MS = 100  # Kafka's connection.failed.authentication.delay.ms


def _listener_prop(props: dict[str, str], listener: str, name: str, mechanism: str | None = None) -> str | None:
    """Kafka's lookup order: ``listener.name.<l>[.<mech>].<name>`` then the plain name."""
    prefix = f"listener.name.{listener.lower()}."
    if mechanism is not None:
        value = props.get(f"{prefix}{mechanism.lower()}.{name}")
        if value is not None:
            return value
    return props.get(prefix + name, props.get(name))


@dataclass
class SaslSettings:
    """The SASL configuration of one listener (``listener.name.<l>.*`` overrides) and its
    credential sources."""

    enabled_mechanisms: tuple[str, ...]
    plain: PlainAuthenticator
    scram_store: ScramCredentials
    max_reauth_ms: int = 0
    failed_auth_delay_ms: int = DEFAULT_FAILED_AUTH_DELAY_MS

    @classmethod
    def from_properties(cls, data_dir: Path, listener: str, props: dict[str, str],
                        scram_store: ScramCredentials | None = None) -> SaslSettings:
        """Read ``sasl.enabled.mechanisms`` (default: PLAIN and both SCRAMs; Kafka's GSSAPI
        default is not offered here), the PLAIN users of
        ``listener.name.<l>.plain.sasl.jaas.config``, ``connections.max.reauth.ms`` and
        ``connection.failed.authentication.delay.ms``; SCRAM credentials come from the store
        (``scram_store``, shared by every listener, or the one in ``data_dir``)."""
        mechs_text = _listener_prop(props, listener, "sasl.enabled.mechanisms") or ",".join(SUPPORTED_MECHANISMS)
        mechs = tuple(m.strip().upper() for m in mechs_text.split(",") if m.strip())
        unknown = [m for m in mechs if m not in SUPPORTED_MECHANISMS]
        if unknown:
            raise InvalidConfigError(f"sasl.enabled.mechanisms: unsupported {unknown}; supported {SUPPORTED_MECHANISMS}")
        jaas = _listener_prop(props, listener, "sasl.jaas.config", PLAIN)
        users = plain_users(jaas) if jaas else {}
        for mech in MECHANISMS:  # accepted (Kafka's ScramLoginModule takes no server options)
            text = _listener_prop(props, listener, "sasl.jaas.config", mech)
            if text:
                plain_users(text)  # validates the syntax
        try:
            reauth_ms = int(props.get("connections.max.reauth.ms", "0"))
            delay_ms = int(props.get("connection.failed.authentication.delay.ms", str(DEFAULT_FAILED_AUTH_DELAY_MS)))
        except ValueError as exc:
            raise InvalidConfigError(str(exc)) from exc
        if reauth_ms < 0 or delay_ms < 0:
            raise InvalidConfigError("connections.max.reauth.ms and connection.failed.authentication.delay.ms must be >= 0")
        store = scram_store if scram_store is not None else ScramCredentialStore.open(data_dir)
        return cls(mechs, PlainAuthenticator(users), store, reauth_ms, delay_ms)


@dataclass
class SaslExchange:
    """The SASL state of one connection; mutates the connection's ``ConnectionSession``."""

    settings: SaslSettings
    session: ConnectionSession
    state: str = "handshake"
    mechanism: str | None = None
    raw_tokens: bool = False  # a v0 handshake: tokens arrive as bare frames
    reauthenticating: bool = False
    session_expiry_ms: int | None = None
    close_requested: bool = False
    _scram: ScramServer | None = field(default=None, repr=False)

    def handshake(self, mechanism: str, version: int) -> None:
        """Choose the mechanism; raises UnsupportedSaslMechanismError / IllegalSaslStateError
        (both close the connection after the answer, as in Kafka)."""
        if self.state == "complete" and version >= 1:
            self.reauthenticating = True  # KIP-368: a fresh exchange on the same connection
            if mechanism != self.mechanism:
                self.close_requested = True
                raise SaslAuthenticationError(
                    f"re-authentication must use the original mechanism {self.mechanism}")
        elif self.state != "handshake":
            self.close_requested = True
            raise IllegalSaslStateError(f"unexpected SaslHandshake in state {self.state}")
        if mechanism not in self.settings.enabled_mechanisms:
            self.close_requested = True
            log.info("failed authentication: unsupported SASL mechanism %s", mechanism,
                     extra={"event": "authentication_failed", "mechanism": mechanism,
                            "error": "UNSUPPORTED_SASL_MECHANISM"})
            raise UnsupportedSaslMechanismError(f"unsupported SASL mechanism {mechanism}")
        self.mechanism = mechanism
        self.raw_tokens = version == 0
        self._scram = None
        if mechanism in MECHANISMS:
            self._scram = ScramServer(MECHANISMS[mechanism], self.settings.scram_store.get)
        self.state = "authenticate"

    def authenticate(self, token: bytes, now_ms: int) -> bytes:
        """Feed one client token; returns the server token. On completion the session's
        principal is set and it is marked authenticated. SaslAuthenticationError on failure."""
        if self.state != "authenticate":
            self.close_requested = True
            raise IllegalSaslStateError(f"unexpected SaslAuthenticate in state {self.state}")
        try:
            if self.mechanism == PLAIN:
                username, reply = self.settings.plain.authenticate(token), b""
            else:
                scram = self._scram
                if scram is None:
                    raise IllegalSaslStateError("no SCRAM exchange in progress")
                if scram.username is None:
                    return scram.first(token)
                reply = scram.final(token)
                username = scram.username
            # The principal builder maps the SASL identity (broker/principal.py).
            principal = self.session.principal_for(sasl_mechanism=self.mechanism, sasl_authorization_id=username)
            if self.reauthenticating and principal != self.session.principal:
                raise SaslAuthenticationError("re-authentication must keep the same principal")
        except (SaslAuthenticationError, IllegalSaslStateError) as exc:
            self.state = "failed"
            self.close_requested = True
            # Kafka's Selector line: "Failed authentication with /host (reason)".
            log.info("failed authentication: %s", exc,
                     extra={"event": "authentication_failed", "mechanism": self.mechanism,
                            "error": "SASL_AUTHENTICATION_FAILED", "reason": str(exc)})
            raise
        self.session.principal = principal
        self.session.sasl_mechanism, self.session.sasl_authorization_id = self.mechanism, username
        self.session.authenticated = True
        self.state = "complete"
        self.reauthenticating = False
        reauth_ms = self.settings.max_reauth_ms
        self.session_expiry_ms = now_ms + reauth_ms if reauth_ms > 0 else None
        return reply

    def session_lifetime_ms(self, now_ms: int) -> int:
        """What SaslAuthenticate v1+ reports: ms until re-authentication is due, 0 for never."""
        if self.session_expiry_ms is None:
            return 0
        return max(1, self.session_expiry_ms - now_ms)

    def may_serve(self, api_key: int, handshake_key: int, authenticate_key: int, api_versions_key: int,
                  now_ms: int) -> bool:
        """The gate: before authentication only ApiVersions, SaslHandshake and SaslAuthenticate;
        after the session lifetime only a re-authentication."""
        if api_key in (handshake_key, authenticate_key):
            return True
        if not self.session.authenticated:
            return api_key == api_versions_key and self.state == "handshake"
        if self.session_expiry_ms is not None and now_ms >= self.session_expiry_ms:
            return False
        return True


_exchange: contextvars.ContextVar[SaslExchange | None] = contextvars.ContextVar("sasl_exchange", default=None)


def current_exchange(settings: SaslSettings, session: ConnectionSession) -> SaslExchange:
    """The SASL exchange of the current connection task, created on first use."""
    exchange = _exchange.get()
    if exchange is None or exchange.session is not session:
        exchange = SaslExchange(settings, session)
        _exchange.set(exchange)
    return exchange


def close_delay_s() -> float | None:
    """None, or the seconds after which the current connection must be closed now that its
    last answer is written: ``connection.failed.authentication.delay.ms`` after a failed
    authentication (Kafka answers at once and delays the close, KIP-306), 0 after a refused
    handshake."""
    exchange = _exchange.get()
    if exchange is None or not exchange.close_requested:
        return None
    return exchange.settings.failed_auth_delay_ms / 1000 if exchange.state == "failed" else 0.0


def peek_exchange() -> SaslExchange | None:
    """The current connection's exchange if one started (raw-token mode checks)."""
    return _exchange.get()


NowMs = Callable[[], int]
