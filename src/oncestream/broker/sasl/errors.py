"""Typed SASL errors, each carrying the Kafka error code the broker answers with."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from oncestream.errors import OnceStreamError


class SaslAuthenticationError(OnceStreamError):
    """The client's credentials or SASL messages were refused (SASL_AUTHENTICATION_FAILED)."""

    code = ErrorCode.sasl_authentication_failed


class UnsupportedSaslMechanismError(OnceStreamError):
    """The client asked for a mechanism this listener does not enable."""

    code = ErrorCode.unsupported_sasl_mechanism


class IllegalSaslStateError(OnceStreamError):
    """A SASL request arrived out of order (e.g. SaslAuthenticate before SaslHandshake)."""

    code = ErrorCode.illegal_sasl_state
