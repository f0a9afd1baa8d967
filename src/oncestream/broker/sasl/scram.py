"""SCRAM-SHA-256 / SCRAM-SHA-512 server side (RFC 5802, RFC 7677), sans-io.

``ScramServer`` is fed the client's two messages and returns the server's two; it never sees a
password, only the stored credential (salt, StoredKey, ServerKey, iterations). Parsing is strict
and bounded: anything that is not a well-formed message of the expected step raises
``SaslAuthenticationError`` (the broker answers SASL_AUTHENTICATION_FAILED), never another error.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
from collections.abc import Callable
from dataclasses import dataclass

from oncestream.broker.sasl.errors import SaslAuthenticationError

MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
MAX_MESSAGE_BYTES = 4096  # a client-first or client-final message is a few hundred bytes
_PRINTABLE_NONCE = re.compile(r"^[\x21-\x2b\x2d-\x7e]+$")  # RFC 5802 'printable' minus ','


@dataclass(frozen=True)
class ScramMechanism:
    """One SCRAM variant: its SASL name and hash."""

    name: str
    hash_name: str

    def digest(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        return hashlib.pbkdf2_hmac(self.hash_name, password.encode("utf-8"), salt, iterations)


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", "sha256")
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", "sha512")
MECHANISMS: dict[str, ScramMechanism] = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
# KIP-554 numbers the mechanisms on the wire.
MECHANISM_BY_TYPE: dict[int, ScramMechanism] = {1: SCRAM_SHA_256, 2: SCRAM_SHA_512}
TYPE_BY_NAME: dict[str, int] = {m.name: t for t, m in MECHANISM_BY_TYPE.items()}


@dataclass(frozen=True)
class ScramCredential:
    """What the broker keeps for one user and mechanism: never the password itself."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def credential_from_salted_password(mechanism: ScramMechanism, salted: bytes, salt: bytes,
                                    iterations: int) -> ScramCredential:
    """StoredKey and ServerKey from a SaltedPassword (what KIP-554's AlterUserScramCredentials
    upsertion carries)."""
    client_key = mechanism.hmac(salted, b"Client Key")
    return ScramCredential(salt=salt, stored_key=mechanism.digest(client_key),
                           server_key=mechanism.hmac(salted, b"Server Key"), iterations=iterations)


def make_credential(mechanism: ScramMechanism, password: str, iterations: int = MIN_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    """A fresh credential for ``password`` (random 32-byte salt unless one is given)."""
    check_iterations(iterations)
    salt = os.urandom(32) if salt is None else salt
    salted = mechanism.salted_password(password, salt, iterations)
    return credential_from_salted_password(mechanism, salted, salt, iterations)


def check_iterations(iterations: int) -> None:
    """Kafka's bounds for SCRAM iterations (ValueError outside them)."""
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}, not {iterations}")


def decode_saslname(name: str) -> str:
    """RFC 5802 saslname: ``=2C`` is ',' and ``=3D`` is '='; any other '=' is malformed."""
    if re.search(r"=(?!2C|3D)", name):
        raise SaslAuthenticationError("Invalid SCRAM username encoding")
    return name.replace("=2C", ",").replace("=3D", "=")


def encode_saslname(name: str) -> str:
    """The inverse of ``decode_saslname`` (clients use it)."""
    return name.replace("=", "=3D").replace(",", "=2C")


def _attributes(text: str, expected: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """Split ``a=..,b=..`` and check the first attributes are ``expected`` in order; returns
    (their values, the remaining raw attributes)."""
    parts = text.split(",")
    if len(parts) < len(expected):
        raise SaslAuthenticationError("Invalid SCRAM message: missing attributes")
    values = []
    for part, name in zip(parts, expected, strict=False):
        if not part.startswith(name + "="):
            raise SaslAuthenticationError(f"Invalid SCRAM message: expected attribute {name!r}")
        values.append(part[len(name) + 1:])
    return values, parts[len(expected):]


def _text(message: bytes) -> str:
    if len(message) > MAX_MESSAGE_BYTES:
        raise SaslAuthenticationError("Invalid SCRAM message: too long")
    try:
        return bytes(message).decode("utf-8")
    except UnicodeDecodeError:
        raise SaslAuthenticationError("Invalid SCRAM message: not UTF-8") from None


def _b64(value: str) -> bytes:
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise SaslAuthenticationError("Invalid SCRAM message: bad base64") from None


CredentialLookup = Callable[[str, str], "ScramCredential | None"]


class ScramServer:
    """One SCRAM exchange on the server: ``first`` then ``final``; any misstep is final."""

    def __init__(self, mechanism: ScramMechanism, lookup: CredentialLookup,
                 nonce_factory: Callable[[], str] | None = None) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._nonce_factory = nonce_factory or (lambda: base64.b64encode(os.urandom(24)).decode("ascii"))
        self._step = "first"
        self.username: str | None = None
        self._credential: ScramCredential | None = None
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    @property
    def complete(self) -> bool:
        return self._step == "done"

    def first(self, client_first: bytes) -> bytes:
        """client-first-message -> server-first-message (``r=..,s=..,i=..``)."""
        if self._step != "first":
            raise SaslAuthenticationError("SCRAM: unexpected client-first message")
        self._step = "failed"  # until this step succeeds
        text = _text(client_first)
        # gs2-header: "n,," or "n,a=authzid,"; "y"/"p" (channel binding) are not offered by Kafka.
        if not text.startswith("n,"):
            raise SaslAuthenticationError("SCRAM: channel binding is not supported")
        comma = text.find(",", 2)
        if comma < 0:
            raise SaslAuthenticationError("Invalid SCRAM client-first message")
        authzid_part = text[2:comma]
        if authzid_part and not authzid_part.startswith("a="):
            raise SaslAuthenticationError("Invalid SCRAM client-first message: bad authzid")
        self._gs2_header = text[:comma + 1]
        bare = text[comma + 1:]
        if bare.startswith("m="):
            raise SaslAuthenticationError("SCRAM: mandatory extensions are not supported")
        (name, client_nonce), _extensions = _attributes(bare, ("n", "r"))
        username = decode_saslname(name)
        if not username or not client_nonce or not _PRINTABLE_NONCE.match(client_nonce):
            raise SaslAuthenticationError("Invalid SCRAM client-first message")
        authzid = decode_saslname(authzid_part[2:]) if authzid_part else ""
        if authzid and authzid != username:
            raise SaslAuthenticationError("Authentication failed: authorization id differs from username")
        credential = self._lookup(username, self.mechanism.name)
        if credential is None:
            raise SaslAuthenticationError("Authentication failed: Invalid user credentials")
        self.username, self._credential = username, credential
        self._client_first_bare = bare
        self._nonce = client_nonce + self._nonce_factory()
        salt = base64.b64encode(credential.salt).decode("ascii")
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        self._step = "final"
        return self._server_first.encode("ascii")

    def final(self, client_final: bytes) -> bytes:
        """client-final-message -> server-final-message (``v=ServerSignature``), once the
        proof matches the StoredKey."""
        if self._step != "final" or self._credential is None:
            raise SaslAuthenticationError("SCRAM: unexpected client-final message")
        self._step = "failed"
        text = _text(client_final)
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        if not sep:
            raise SaslAuthenticationError("Invalid SCRAM client-final message: no proof")
        (binding, nonce), _extensions = _attributes(without_proof, ("c", "r"))
        if not hmac.compare_digest(_b64(binding), self._gs2_header.encode("utf-8")):
            raise SaslAuthenticationError("Invalid SCRAM client-final message: channel binding")
        if not hmac.compare_digest(nonce.encode("utf-8"), self._nonce.encode("utf-8")):
            raise SaslAuthenticationError("Invalid SCRAM client-final message: nonce mismatch")
        proof = _b64(proof_b64)
        cred = self._credential
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        client_signature = self.mechanism.hmac(cred.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise SaslAuthenticationError("Authentication failed: Invalid client proof")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(self.mechanism.digest(client_key), cred.stored_key):
            raise SaslAuthenticationError("Authentication failed: Invalid user credentials")
        server_signature = self.mechanism.hmac(cred.server_key, auth_message)
        self._step = "done"
        return b"v=" + base64.b64encode(server_signature)
