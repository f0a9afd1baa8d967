"""SaslHandshake (key 17, v0-1) and SaslAuthenticate (key 36, v0-2).

The exchange itself is sans-io (``broker/sasl/exchange.py``); these handlers translate it to
responses. A failed authentication is answered SASL_AUTHENTICATION_FAILED at once; the server
then closes the connection after ``connection.failed.authentication.delay.ms`` (KIP-306: a
password guesser waits for each new connection, while the client learns why at once).
"""

from __future__ import annotations

import asyncio
import datetime
import struct
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from oncestream.broker.connection_context import current_session
from oncestream.broker.sasl.errors import SaslAuthenticationError
from oncestream.broker.sasl.exchange import SaslExchange, current_exchange
from oncestream.broker.state import BrokerState
from oncestream.errors import OnceStreamError
from oncestream.protocol.api_keys import SASL_AUTHENTICATE, SASL_HANDSHAKE
from oncestream.protocol.codec import RequestHeader, build
from oncestream.protocol.schemas import response_module

if TYPE_CHECKING:
    from oncestream.protocol.request_types import SaslAuthenticateRequest, SaslHandshakeRequest


def exchange_of(state: BrokerState) -> SaslExchange:
    """The current connection's SASL exchange."""
    session = current_session()
    return current_exchange(state.sasl_for(session.listener_name), session)


def handle_handshake(state: BrokerState, header: RequestHeader, request: SaslHandshakeRequest) -> object:
    m = response_module(SASL_HANDSHAKE, header.api_version)
    exchange = exchange_of(state)
    error = ErrorCode.none
    if not current_session().security_protocol.startswith("SASL_"):
        # Kafka answers ILLEGAL_SASL_STATE on a listener without SASL.
        error = ErrorCode.illegal_sasl_state
        exchange.close_requested = True
    else:
        try:
            exchange.handshake(str(request.mechanism), header.api_version)
        except OnceStreamError as exc:
            error = exc.code
    return build(m.SaslHandshakeResponse, error_code=error, mechanisms=exchange.settings.enabled_mechanisms)


async def _delay_failure(exchange: SaslExchange) -> None:
    delay_ms = exchange.settings.failed_auth_delay_ms
    if delay_ms > 0:
        await asyncio.sleep(delay_ms / 1000)


async def handle_authenticate(state: BrokerState, header: RequestHeader, request: SaslAuthenticateRequest) -> object:
    m = response_module(SASL_AUTHENTICATE, header.api_version)
    exchange = exchange_of(state)
    now_ms = state.mono_ms()
    error, message, reply = ErrorCode.none, None, b""
    if exchange.raw_tokens:
        exchange.state, exchange.close_requested = "failed", True
        error, message = ErrorCode.illegal_sasl_state, "SaslAuthenticate after a v0 SaslHandshake"
    else:
        try:
            reply = exchange.authenticate(bytes(request.auth_bytes), now_ms)
        except OnceStreamError as exc:
            error, message = exc.code, str(exc)
    return build(m.SaslAuthenticateResponse, error_code=error, error_message=message, auth_bytes=reply,
                 session_lifetime=datetime.timedelta(milliseconds=exchange.session_lifetime_ms(now_ms)))


async def handle_raw_token(state: BrokerState, exchange: SaslExchange, token: bytes) -> bytes:
    """After a v0 SaslHandshake the client sends bare tokens; answer with a bare token frame.
    A failure has no way to carry an error code here: the connection is just closed."""
    try:
        reply = exchange.authenticate(token, state.mono_ms())
    except SaslAuthenticationError:
        await _delay_failure(exchange)
        raise
    if exchange.state == "complete":
        exchange.raw_tokens = False
    return struct.pack(">i", len(reply)) + reply
