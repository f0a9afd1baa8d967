"""Route a request frame to its handler and frame the response.

A handler is ``handle(state, header, request) -> response | None`` (sync or async); ``None`` means
no response is sent (Produce with acks=0). The set of handlers must match the API version table
exactly: checked when the dispatcher is built.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from time import perf_counter
from typing import Any

from kio.schema.errors import ErrorCode

from oncestream.broker.connection_context import current_session
from oncestream.broker.handlers import (
    acls,
    api_versions,
    client_quotas,
    configs,
    consumer_groups,
    describe_cluster,
    fetch,
    groups,
    list_offsets,
    log_dirs,
    metadata,
    produce,
    records_admin,
    sasl,
    scram_admin,
    share,
    share_admin,
    telemetry,
    topics,
    transactions,
)
from oncestream.broker.metrics.recorder import API_NAMES, collect_error_codes, current_timing, error_name
from oncestream.broker.quotas.enforcement import QuotaEnforcer
from oncestream.broker.sasl.errors import SaslAuthenticationError
from oncestream.broker.sasl.exchange import current_exchange, peek_exchange
from oncestream.broker.state import BrokerState
from oncestream.protocol import api_keys as k
from oncestream.protocol.api_keys import API_VERSIONS
from oncestream.protocol.codec import (
    MalformedRequestError,
    RequestHeader,
    decode_request,
    encode_response,
    parse_request_header,
)

log = logging.getLogger("oncestream.broker")
# Kafka's kafka.request.logger: INFO logs each request answered with an error code, DEBUG every
# request; quiet (WARNING) unless configured (logging_setup.QUIET_LOGGERS), as Kafka ships it.
request_log = logging.getLogger("oncestream.broker.request")

Handler = Callable[[BrokerState, RequestHeader, Any], Any]

HANDLERS: dict[int, Handler] = {
    k.PRODUCE: produce.handle,
    k.FETCH: fetch.handle,
    k.LIST_OFFSETS: list_offsets.handle,
    k.METADATA: metadata.handle,
    k.API_VERSIONS_KEY: api_versions.handle,
    k.CREATE_TOPICS: topics.handle_create,
    k.DELETE_TOPICS: topics.handle_delete,
    k.CREATE_PARTITIONS: topics.handle_create_partitions,
    k.DELETE_RECORDS: records_admin.handle_delete_records,
    k.INIT_PRODUCER_ID: transactions.handle_init_producer_id,
    k.DESCRIBE_ACLS: acls.handle_describe,
    k.CREATE_ACLS: acls.handle_create,
    k.DELETE_ACLS: acls.handle_delete,
    k.DESCRIBE_CONFIGS: configs.handle_describe_configs,
    k.ALTER_CONFIGS: configs.handle_alter,
    k.INCREMENTAL_ALTER_CONFIGS: configs.handle_incremental_alter,
    k.DESCRIBE_LOG_DIRS: log_dirs.handle,
    k.FIND_COORDINATOR: groups.handle_find_coordinator,
    k.JOIN_GROUP: groups.handle_join_group,
    k.SYNC_GROUP: groups.handle_sync_group,
    k.HEARTBEAT: groups.handle_heartbeat,
    k.LEAVE_GROUP: groups.handle_leave_group,
    k.OFFSET_COMMIT: groups.handle_offset_commit,
    k.OFFSET_FETCH: groups.handle_offset_fetch,
    k.DESCRIBE_GROUPS: groups.handle_describe_groups,
    k.LIST_GROUPS: groups.handle_list_groups,
    k.DELETE_GROUPS: groups.handle_delete_groups,
    k.OFFSET_DELETE: groups.handle_offset_delete,
    k.DESCRIBE_CLIENT_QUOTAS: client_quotas.handle_describe,
    k.ALTER_CLIENT_QUOTAS: client_quotas.handle_alter,
    k.CONSUMER_GROUP_HEARTBEAT: consumer_groups.handle_consumer_group_heartbeat,
    k.CONSUMER_GROUP_DESCRIBE: consumer_groups.handle_consumer_group_describe,
    k.ADD_PARTITIONS_TO_TXN: transactions.handle_add_partitions_to_txn,
    k.ADD_OFFSETS_TO_TXN: transactions.handle_add_offsets_to_txn,
    k.END_TXN: transactions.handle_end_txn,
    k.WRITE_TXN_MARKERS: transactions.handle_write_txn_markers,
    k.TXN_OFFSET_COMMIT: transactions.handle_txn_offset_commit,
    k.DESCRIBE_CLUSTER: describe_cluster.handle,
    k.DESCRIBE_PRODUCERS: transactions.handle_describe_producers,
    k.DESCRIBE_TRANSACTIONS: transactions.handle_describe_transactions,
    k.LIST_TRANSACTIONS: transactions.handle_list_transactions,
    k.SASL_HANDSHAKE: sasl.handle_handshake,
    k.SASL_AUTHENTICATE: sasl.handle_authenticate,
    k.DESCRIBE_USER_SCRAM_CREDENTIALS: scram_admin.handle_describe,
    k.ALTER_USER_SCRAM_CREDENTIALS: scram_admin.handle_alter,
    k.SHARE_GROUP_HEARTBEAT: share.handle_share_group_heartbeat,
    k.SHARE_GROUP_DESCRIBE: share.handle_share_group_describe,
    k.SHARE_FETCH: share.handle_share_fetch,
    k.SHARE_ACKNOWLEDGE: share.handle_share_acknowledge,
    k.DESCRIBE_SHARE_GROUP_OFFSETS: share_admin.handle_describe_offsets,
    k.ALTER_SHARE_GROUP_OFFSETS: share_admin.handle_alter_offsets,
    k.DELETE_SHARE_GROUP_OFFSETS: share_admin.handle_delete_offsets,
    k.GET_TELEMETRY_SUBSCRIPTIONS: telemetry.handle_get_subscriptions,
    k.PUSH_TELEMETRY: telemetry.handle_push,
    k.LIST_CONFIG_RESOURCES: telemetry.handle_list_config_resources,
}


class HandlerTableError(RuntimeError):
    """The handler table and the advertised API versions disagree: a build error, not input."""


def check_handler_table(handlers: dict[int, Handler], versions: dict[int, tuple[int, int]]) -> None:
    """Every advertised API needs a handler and every handler an advertised API. Raised, not
    asserted: ``python -O`` must not start a broker that advertises what it cannot answer."""
    missing, unadvertised = set(versions) - set(handlers), set(handlers) - set(versions)
    if missing or unadvertised:
        raise HandlerTableError(
            f"api keys without a handler: {sorted(missing)}; handlers not advertised: {sorted(unadvertised)}"
        )


check_handler_table(HANDLERS, API_VERSIONS)


class CloseConnection(Exception):
    """The request cannot be answered; the connection must be closed (Kafka does the same)."""


class Dispatcher:
    """Turns request frames into response frames for one broker."""

    def __init__(self, state: BrokerState) -> None:
        self.state = state
        self._async = {key: inspect.iscoroutinefunction(h) for key, h in HANDLERS.items()}
        # Only a principal builder that asks for it sees the client.id (broker/principal.py).
        self._client_id_principal = state.principal_builder.reads_client_id
        self._quotas = QuotaEnforcer(lambda: state.client_quotas)

    async def handle_frame(self, frame: bytes) -> bytes | list[bytes | bytearray | memoryview] | None:
        """Answer one request frame; raise CloseConnection when the frame is not acceptable. The
        connection's ``current_timing`` (metrics on) receives the api and the handler's start and end."""
        exchange = peek_exchange()
        if exchange is not None and exchange.raw_tokens and exchange.state == "authenticate":
            # After a SaslHandshake v0 the client sends bare SASL tokens, not requests.
            try:
                return await sasl.handle_raw_token(self.state, exchange, frame)
            except SaslAuthenticationError as exc:
                raise CloseConnection(f"SASL authentication failed: {exc}") from None
        try:
            header = parse_request_header(frame)
        except MalformedRequestError as exc:
            raise CloseConnection(str(exc)) from None
        principal = self._principal_of(header)
        supported = API_VERSIONS.get(header.api_key)
        if supported is None:
            raise CloseConnection(f"unknown api key {header.api_key}")
        if not supported[0] <= header.api_version <= supported[1]:
            if header.api_key == k.API_VERSIONS_KEY:
                # KIP-511: an ApiVersions request of a version we do not know is answered in
                # the v0 format with UNSUPPORTED_VERSION and our table, so the client can retry.
                return api_versions.unsupported_version_response(header.correlation_id)
            raise CloseConnection(
                f"unsupported version {header.api_version} of api {header.api_key}"
            )
        self._gate(header.api_key)
        try:
            request = decode_request(header, frame)
        except MalformedRequestError as exc:
            raise CloseConnection(str(exc)) from None
        handler = HANDLERS[header.api_key]
        timing = current_timing.get()
        if timing is not None:
            timing.api_key, timing.api_version, timing.handler_start_s = header.api_key, header.api_version, perf_counter()
        # Client quotas measure the handler and set the response's throttle time (broker/quotas/).
        response = await self._quotas.call(
            header.api_key, header.api_version, principal, header.client_id, len(frame),
            lambda: handler(self.state, header, request), self._async[header.api_key])
        if timing is not None:
            timing.handler_end_s = perf_counter()
        if request_log.isEnabledFor(logging.INFO):
            log_request(header.api_key, header.api_version, header.correlation_id, header.client_id, response)
        if response is None or isinstance(response, list):
            return response  # no response (acks=0), or buffers the handler framed itself (Fetch counts its own)
        if self.state.metrics.enabled:
            self.state.metrics.response_errors(header.api_key, response)
        return encode_response(header.api_key, header.api_version, header.correlation_id, response)

    def record_produce_read(self, frame: bytes) -> int:
        """Record a pipelined Produce frame's bytes against its client's ``producer_byte_rate``
        as it is read (broker/quotas/enforcement.py): its throttle time in ms, 0 when it is within
        the quota. A frame ``handle_frame`` will refuse (malformed, an unsupported version) records
        nothing: it closes the connection when it is handled."""
        try:
            header = parse_request_header(frame)
        except MalformedRequestError:
            return 0
        supported = API_VERSIONS.get(header.api_key)
        if header.api_key != k.PRODUCE or supported is None or not supported[0] <= header.api_version <= supported[1]:
            return 0
        return self._quotas.record_produce_read(self._principal_of(header), header.client_id, len(frame))

    def _principal_of(self, header: RequestHeader) -> str:
        """The connection's principal for this request (a principal builder that reads the
        client.id sees this request's)."""
        session = current_session()
        if self._client_id_principal and session.authenticated and session.client_id != header.client_id:
            session.client_id = header.client_id
            session.principal = session.principal_for()
        return session.principal

    def _gate(self, api_key: int) -> None:
        """On a SASL listener, refuse (close) anything but ApiVersions and the SASL requests
        before authentication, and anything but re-authentication once the session expired."""
        session = current_session()
        if not session.security_protocol.startswith("SASL_"):
            return
        exchange = current_exchange(self.state.sasl_for(session.listener_name), session)
        if not exchange.may_serve(api_key, k.SASL_HANDSHAKE, k.SASL_AUTHENTICATE, k.API_VERSIONS_KEY,
                                  self.state.mono_ms()):
            state = "expired session" if session.authenticated else "unauthenticated connection"
            raise CloseConnection(f"api {api_key} on an {state} (SASL)")


def log_request(api_key: int, api_version: int, correlation_id: int, client_id: str | None, response: object) -> None:
    """One request-log line: INFO when the (kio) response carries error codes, DEBUG otherwise.
    The connection's client address and principal come from the log context (logging_setup)."""
    codes: list[int] = []
    if response is not None and not isinstance(response, list):  # Fetch's framed buffers are not read back
        collect_error_codes(response, codes)
    errors = sorted({error_name(code) for code in codes if code})
    level = logging.INFO if errors else logging.DEBUG
    if not request_log.isEnabledFor(level):
        return
    name = API_NAMES.get(api_key, str(api_key))
    fields = {"event": "request", "request": name, "api_key": api_key, "api_version": api_version,
              "correlation_id": correlation_id, "client_id": client_id,
              "error": errors[0] if errors else None, "errors": errors or None}
    if errors:
        request_log.info("%s v%d answered with %s", name, api_version, ", ".join(errors), extra=fields)
    else:
        request_log.debug("%s v%d answered", name, api_version, extra=fields)


def error_code_of(exc: BaseException) -> ErrorCode:
    """The Kafka error code for an exception raised by the core."""
    return getattr(exc, "code", ErrorCode.unknown_server_error)
