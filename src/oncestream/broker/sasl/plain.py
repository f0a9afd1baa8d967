"""SASL/PLAIN server side (RFC 4616): ``[authzid] NUL authcid NUL passwd`` in one token.

Passwords are compared in constant time, and an unknown user costs the same compare as a known
one, so neither timing nor error text tells a client which user names exist.
"""

from __future__ import annotations

import hmac

from oncestream.broker.sasl.errors import SaslAuthenticationError

# Bounds from RFC 4616 (255 octets each) with room for UTF-8: anything longer is not a login.
MAX_FIELD_BYTES = 1024
_DUMMY_PASSWORD = b"\x00" * 32


def parse_plain_token(token: bytes) -> tuple[str, str, str]:
    """Split a PLAIN token into (authzid, username, password); SaslAuthenticationError if it is
    not exactly three NUL-separated UTF-8 fields with a non-empty user and password."""
    parts = bytes(token).split(b"\x00")
    if len(parts) != 3:
        raise SaslAuthenticationError("Invalid SASL/PLAIN response: expected 3 tokens")
    if any(len(p) > MAX_FIELD_BYTES for p in parts):
        raise SaslAuthenticationError("Invalid SASL/PLAIN response: field too long")
    try:
        authzid, username, password = (p.decode("utf-8") for p in parts)
    except UnicodeDecodeError:
        raise SaslAuthenticationError("Invalid SASL/PLAIN response: not UTF-8") from None
    if not username:
        raise SaslAuthenticationError("Authentication failed: username not specified")
    if not password:
        raise SaslAuthenticationError("Authentication failed: password not specified")
    return authzid, username, password


class PlainAuthenticator:
    """Checks PLAIN tokens against a fixed user table (``user_NAME="PASSWORD"`` JAAS entries)."""

    def __init__(self, users: dict[str, str]) -> None:
        self._users = {name: pw.encode("utf-8") for name, pw in users.items()}

    def authenticate(self, token: bytes) -> str:
        """The authenticated user name; SaslAuthenticationError otherwise (one message for an
        unknown user and a wrong password, as Kafka's PlainSaslServer)."""
        authzid, username, password = parse_plain_token(token)
        expected = self._users.get(username)
        ok = hmac.compare_digest(password.encode("utf-8"),
                                 expected if expected is not None else _DUMMY_PASSWORD)
        if expected is None or not ok:
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username")
        return username
