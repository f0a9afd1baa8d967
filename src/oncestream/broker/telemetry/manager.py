"""The broker's KIP-714 client instances, sans-io (Kafka's ClientMetricsManager): which
subscription each instance has, when it may push, and which error code a bad request gets.

State of one instance: its resolved subscription (metrics, interval, id) for the subscription
version it was made at, the time of its last GetTelemetrySubscriptions and last accepted
PushTelemetry, its last error, whether it sent a terminating push. A subscription change bumps the
version: the next request of every instance rebuilds its subscription, so a push still carrying
the old id gets UNKNOWN_SUBSCRIPTION_ID and the client fetches the new set.

Push checks, in Kafka's order: zero instance id INVALID_REQUEST; after a terminating push
INVALID_REQUEST; wrong subscription id UNKNOWN_SUBSCRIPTION_ID; a codec the broker does not accept
UNSUPPORTED_COMPRESSION_TYPE; sooner than the interval since the last request (and no
GetTelemetrySubscriptions since the last push), unless terminating, THROTTLING_QUOTA_EXCEEDED; more
than ``telemetry.max.bytes`` TELEMETRY_TOO_LARGE. An instance nobody heard from for
max(3 x interval, 60 s) is forgotten (``expire``); past ``MAX_INSTANCES`` the one heard from
least recently is.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from oncestream.broker.telemetry import subscriptions as subs
from oncestream.protocol.compression import COMPRESSION_GZIP, COMPRESSION_NONE, COMPRESSION_SNAPPY, COMPRESSION_ZSTD

COMPRESSION_LZ4 = 3
# What GetTelemetrySubscriptions offers, in Kafka's order of preference (zstd, lz4, gzip, snappy).
ACCEPTED_COMPRESSION_TYPES = (COMPRESSION_ZSTD, COMPRESSION_LZ4, COMPRESSION_GZIP, COMPRESSION_SNAPPY)
MAX_BYTES_CONFIG = "telemetry.max.bytes"
DEFAULT_MAX_BYTES = 1024 * 1024
MIN_CACHE_EXPIRY_MS = 60_000
# Kafka's cache of client instances holds at most this many (least recently heard from evicted):
# client instance ids come from clients, so their number must not grow without bound.
MAX_INSTANCES = 16384
ZERO_UUID = uuid.UUID(int=0)


class TelemetryRequestError(Exception):
    """A GetTelemetrySubscriptions / PushTelemetry refused with ``code``."""

    def __init__(self, message: str, code: ErrorCode) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class ClientInstance:
    """One client instance's telemetry state."""

    instance_id: uuid.UUID
    metadata: subs.ClientMetadata
    subscription: subs.ResolvedSubscription
    version: int
    last_get_ms: int = -1
    last_push_ms: int = -1
    last_error: ErrorCode = ErrorCode.none
    terminating: bool = False
    last_seen_ms: int = 0

    def expiry_ms(self) -> int:
        return max(3 * self.subscription.interval_ms, MIN_CACHE_EXPIRY_MS)


@dataclass(frozen=True)
class AcceptedPush:
    """A push that passed every check: who sent it and its (still compressed) payload."""

    instance: ClientInstance
    compression_type: int
    payload: bytes
    terminating: bool


class ClientMetricsManager:
    """Client instances and the subscriptions they resolve to; ``now_ms`` is a monotonic clock."""

    def __init__(self, configs: Mapping[str, Mapping[str, str]], now_ms: Callable[[], int], *,
                 max_bytes: int = DEFAULT_MAX_BYTES,
                 new_instance_id: Callable[[], uuid.UUID] = uuid.uuid4, max_instances: int = MAX_INSTANCES) -> None:
        self.configs: dict[str, dict[str, str]] = {name: dict(c) for name, c in configs.items()}
        self._subscriptions = [subs.validate(name, c) for name, c in sorted(self.configs.items())]
        self._now_ms = now_ms
        self.max_bytes = max_bytes
        self._new_instance_id = new_instance_id
        self.max_instances = max_instances
        self._version = 0
        self.instances: dict[uuid.UUID, ClientInstance] = {}

    def install(self, configs: Mapping[str, Mapping[str, str]]) -> None:
        """New ClientMetrics resources (already durable): every instance re-resolves on its next request."""
        self.configs = {name: dict(c) for name, c in configs.items() if c}
        self._subscriptions = [subs.validate(name, c) for name, c in sorted(self.configs.items())]
        self._version += 1

    def _instance(self, instance_id: uuid.UUID, metadata: subs.ClientMetadata) -> ClientInstance:
        existing = self.instances.get(instance_id)
        if existing is not None and existing.version == self._version:
            return existing
        resolved = subs.resolve(self._subscriptions, metadata, instance_id)
        instance = ClientInstance(instance_id, metadata, resolved, self._version)
        if existing is not None:  # the timing and error history survive a subscription change
            instance.last_get_ms, instance.last_push_ms = existing.last_get_ms, existing.last_push_ms
            instance.last_error, instance.terminating = existing.last_error, existing.terminating
        elif len(self.instances) >= self.max_instances:
            del self.instances[min(self.instances.values(), key=lambda i: i.last_seen_ms).instance_id]
        self.instances[instance_id] = instance
        return instance

    def get_subscriptions(self, instance_id: uuid.UUID | None, metadata: Callable[[uuid.UUID], subs.ClientMetadata]
                          ) -> ClientInstance:
        """GetTelemetrySubscriptions: the instance (a new id for the zero uuid) with its subscription;
        TelemetryRequestError(THROTTLING_QUOTA_EXCEEDED) when asked again sooner than the interval
        (unless the last push was refused for its subscription id or codec)."""
        now = self._now_ms()
        if instance_id is None or instance_id == ZERO_UUID:
            instance_id = self._new_instance_id()
        instance = self._instance(instance_id, metadata(instance_id))
        instance.last_seen_ms = now
        last = max(instance.last_get_ms, instance.last_push_ms)
        if (last >= 0 and now - last < instance.subscription.interval_ms
                and instance.last_error not in (ErrorCode.unknown_subscription_id, ErrorCode.unsupported_compression_type)):
            instance.last_error = ErrorCode.throttling_quota_exceeded
            raise TelemetryRequestError(
                f"The request from the client instance {instance_id} was throttled: sooner than the push interval",
                ErrorCode.throttling_quota_exceeded)
        instance.last_get_ms = now
        instance.last_error = ErrorCode.none
        return instance

    def push(self, instance_id: uuid.UUID | None, metadata: Callable[[uuid.UUID], subs.ClientMetadata],
             subscription_id: int, compression_type: int, payload: bytes, terminating: bool) -> AcceptedPush:
        """PushTelemetry's checks (module docstring); TelemetryRequestError with the code on failure."""
        if instance_id is None or instance_id == ZERO_UUID:
            raise TelemetryRequestError("Invalid request from the client: the client instance id is zero",
                                        ErrorCode.invalid_request)
        now = self._now_ms()
        instance = self._instance(instance_id, metadata(instance_id))
        instance.last_seen_ms = now
        try:
            self._check_push(instance, now, subscription_id, compression_type, len(payload), terminating)
        except TelemetryRequestError as exc:
            instance.last_error = exc.code
            raise
        instance.last_error = ErrorCode.none
        if terminating:
            instance.terminating = True
        return AcceptedPush(instance, compression_type, payload, terminating)

    def _check_push(self, instance: ClientInstance, now: int, subscription_id: int, compression_type: int,
                    size: int, terminating: bool) -> None:
        name = instance.instance_id
        if instance.terminating:
            raise TelemetryRequestError(f"Client instance {name} sent a push after its terminating push",
                                        ErrorCode.invalid_request)
        if subscription_id != instance.subscription.subscription_id:
            raise TelemetryRequestError(f"Unknown client subscription id {subscription_id} for client instance {name}",
                                        ErrorCode.unknown_subscription_id)
        if compression_type != COMPRESSION_NONE and compression_type not in ACCEPTED_COMPRESSION_TYPES:
            raise TelemetryRequestError(f"Unknown compression type {compression_type} from client instance {name}",
                                        ErrorCode.unsupported_compression_type)
        can_push = instance.last_get_ms > instance.last_push_ms
        if not can_push:
            can_push = now - max(instance.last_get_ms, instance.last_push_ms) >= instance.subscription.interval_ms
        if not can_push and not terminating:
            raise TelemetryRequestError(f"Client instance {name} pushed sooner than its push interval",
                                        ErrorCode.throttling_quota_exceeded)
        if size > self.max_bytes:
            raise TelemetryRequestError(f"Telemetry of {size} bytes from client instance {name} is larger than "
                                        f"{MAX_BYTES_CONFIG}={self.max_bytes}", ErrorCode.telemetry_too_large)
        instance.last_push_ms = now

    def expire(self) -> list[uuid.UUID]:
        """Forget the instances silent for longer than their expiry; their ids."""
        now = self._now_ms()
        gone = [i.instance_id for i in self.instances.values() if now - i.last_seen_ms > i.expiry_ms()]
        for instance_id in gone:
            del self.instances[instance_id]
        return gone

    def resource_names(self) -> Iterable[str]:
        return sorted(self.configs)
