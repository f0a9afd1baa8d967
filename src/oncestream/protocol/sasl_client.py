"""Client-side SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), for every side that connects to a broker:
the client (client/common/sasl.py re-exports it) and a cluster broker calling another broker
(broker/peer_requests.py), which may not import the client.

``SaslCredentials.from_config`` reads librdkafka's names ``security.protocol``, ``sasl.mechanism``,
``sasl.username`` and ``sasl.password``. ``ScramClient`` is the sans-io client half of RFC 5802;
``authenticate_async`` (the asyncio client, the broker's peer requests) and ``authenticate_blocking``
(``BrokerConnection``) run SaslHandshake v1 + SaslAuthenticate right after ApiVersions, before any other request.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any

from oncestream.protocol.api_keys import SASL_AUTHENTICATE, SASL_HANDSHAKE
from oncestream.protocol.schemas import request_module

MECHANISMS = {"PLAIN": None, "SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


class SaslClientError(ConnectionError):
    """Authentication with the broker failed (bad credentials, mechanism, or server proof)."""


@dataclass(frozen=True)
class SaslCredentials:
    """What a client needs to authenticate: mechanism, user name, password."""

    mechanism: str
    username: str
    password: str

    @classmethod
    def from_config(cls, conf: Mapping[str, Any]) -> SaslCredentials | None:
        """None unless ``security.protocol`` is SASL_PLAINTEXT or SASL_SSL; ValueError when the
        mechanism is unknown or the user name or password is missing."""
        protocol = str(conf.get("security.protocol") or "plaintext").upper()
        if protocol not in SASL_PROTOCOLS:
            return None
        mechanism = str(conf.get("sasl.mechanism") or conf.get("sasl.mechanisms") or "GSSAPI").upper()
        if mechanism not in MECHANISMS:
            raise ValueError(f"sasl.mechanism {mechanism} is not supported (supported: {', '.join(MECHANISMS)})")
        username, password = conf.get("sasl.username"), conf.get("sasl.password")
        if not username or password is None:
            raise ValueError(f"sasl.username and sasl.password are required for {mechanism}")
        return cls(mechanism, str(username), str(password))


def _saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


class ScramClient:
    """The client half of one SCRAM exchange: ``first()``, ``final(server_first)``,
    ``verify(server_final)`` (the server must prove it knows the ServerKey)."""

    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None) -> None:
        hash_name = MECHANISMS.get(mechanism)
        if hash_name is None:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self._hash = hash_name
        self._password = password.encode("utf-8")
        self._nonce = nonce or base64.b64encode(os.urandom(24)).decode("ascii")
        self._first_bare = f"n={_saslname(username)},r={self._nonce}"
        self._auth_message = b""
        self._salted = b""

    def first(self) -> bytes:
        return ("n,," + self._first_bare).encode("utf-8")

    def final(self, server_first: bytes) -> bytes:
        try:
            attrs = dict(part.split("=", 1) for part in server_first.decode("utf-8").split(","))
            nonce, salt, iterations = attrs["r"], base64.b64decode(attrs["s"]), int(attrs["i"])
        except (ValueError, KeyError, UnicodeDecodeError) as exc:
            raise SaslClientError(f"malformed SCRAM server-first message: {exc}") from None
        if not nonce.startswith(self._nonce) or iterations < 1:
            raise SaslClientError("SCRAM server-first message has a bad nonce or iteration count")
        self._salted = hashlib.pbkdf2_hmac(self._hash, self._password, salt, iterations)
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={nonce}"
        self._auth_message = f"{self._first_bare},{server_first.decode()},{without_proof}".encode()
        client_key = hmac.new(self._salted, b"Client Key", self._hash).digest()
        stored_key = hashlib.new(self._hash, client_key).digest()
        signature = hmac.new(stored_key, self._auth_message, self._hash).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        server_key = hmac.new(self._salted, b"Server Key", self._hash).digest()
        expected = b"v=" + base64.b64encode(hmac.new(server_key, self._auth_message, self._hash).digest())
        if not hmac.compare_digest(bytes(server_final), expected):
            raise SaslClientError("SCRAM server signature does not match: not the broker we trust")


def _steps(creds: SaslCredentials) -> Generator[bytes, bytes, None]:
    """Generator of client tokens; receives each server token."""
    if creds.mechanism == "PLAIN":
        yield f"\0{creds.username}\0{creds.password}".encode()
        return
    scram = ScramClient(creds.mechanism, creds.username, creds.password)
    server_first = yield scram.first()
    server_final = yield scram.final(server_first)
    scram.verify(server_final)


def _check(response: Any, what: str) -> None:
    if response is None or response.error_code != 0:
        message = getattr(response, "error_message", None) or ""
        code = getattr(response, "error_code", "no answer")
        raise SaslClientError(f"{what} failed (error {int(code) if code != 'no answer' else code}): {message}")


# KIP-368: re-authenticate when this share of the announced session lifetime has passed (the
# Java client picks 85-95%), so the new session is in place well before the old one expires.
REAUTH_AT_LIFETIME_SHARE = 0.85


# One request of the exchange: (api key, version, request).
_Call = tuple[int, int, Any]


def _exchange(creds: SaslCredentials, authenticate_version: int) -> Generator[_Call, Any, int]:
    """The whole exchange, sans-io: yields each request, receives its response, returns the
    session lifetime in ms the broker announced (0: no re-authentication needed)."""
    handshake = yield SASL_HANDSHAKE, 1, request_module(SASL_HANDSHAKE, 1).SaslHandshakeRequest(
        mechanism=creds.mechanism)
    _check(handshake, f"SaslHandshake({creds.mechanism})")
    module = request_module(SASL_AUTHENTICATE, authenticate_version)
    steps = _steps(creds)
    token = next(steps)
    while True:
        response = yield SASL_AUTHENTICATE, authenticate_version, module.SaslAuthenticateRequest(auth_bytes=token)
        _check(response, "SaslAuthenticate")
        try:
            token = steps.send(bytes(response.auth_bytes))
        except StopIteration:
            lifetime = getattr(response, "session_lifetime", None)
            return int(lifetime.total_seconds() * 1000) if lifetime else 0


async def authenticate_async(send: Callable[[int, int, Any], Awaitable[Any]], creds: SaslCredentials,
                             authenticate_version: int) -> int:
    """Run the exchange over an async ``send(api_key, version, request)``; returns the session
    lifetime in ms the broker announced (0: no re-authentication needed)."""
    exchange = _exchange(creds, authenticate_version)
    request = next(exchange)
    while True:
        response = await send(*request)
        try:
            request = exchange.send(response)
        except StopIteration as done:
            return int(done.value)


def authenticate_blocking(call: Callable[[int, int, Any], Any], creds: SaslCredentials,
                          authenticate_version: int) -> None:
    """Run the exchange over a blocking ``call(api_key, version, request)``."""
    exchange = _exchange(creds, authenticate_version)
    request = next(exchange)
    while True:
        try:
            request = exchange.send(call(*request))
        except StopIteration:
            return
