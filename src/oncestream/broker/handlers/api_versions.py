"""ApiVersions (key 18), including KIP-511's v0-format answer to a version we do not know."""

from __future__ import annotations

import datetime
import struct
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from oncestream.broker.connection_context import current_session
from oncestream.broker.state import BrokerState
from oncestream.protocol.api_keys import API_VERSIONS, API_VERSIONS_KEY, FEATURES, SHARE_GROUP_APIS
from oncestream.protocol.codec import RequestHeader, build
from oncestream.protocol.schemas import response_module

if TYPE_CHECKING:
    from oncestream.protocol.request_types import ApiVersionsRequest


def finalized_levels(state: BrokerState) -> dict[str, int]:
    """Finalized feature levels. Kafka finalizes features cluster-wide (``kafka-features.sh``,
    ``kafka-storage.sh format --feature``); a single broker takes them as broker properties named
    like the feature (``transaction.version=1`` makes clients use the KIP-98 protocol instead of
    KIP-890 part 2). Default: the highest supported level."""
    levels = {}
    for name, (lo, hi) in FEATURES.items():
        level = int(state.config.raw.get(name, hi))
        if not lo <= level <= hi:
            raise ValueError(f"{name}={level}: supported levels are {lo}..{hi}")
        levels[name] = level
    return levels


def handle(state: BrokerState, header: RequestHeader, request: ApiVersionsRequest) -> object:
    m = response_module(API_VERSIONS_KEY, header.api_version)
    if header.api_version >= 3:  # KIP-511: who the client is, for KIP-714 subscription matching
        session = current_session()
        session.client_software_name = request.client_software_name  # type: ignore[union-attr]
        session.client_software_version = request.client_software_version  # type: ignore[union-attr]
    keys = tuple(
        build(m.ApiVersion, api_key=key, min_version=lo, max_version=hi)
        for key, (lo, hi) in sorted(API_VERSIONS.items())
        # Share groups switched off (group.share.enable=false, share.version=0): not advertised.
        if state.shares.settings.enabled or key not in SHARE_GROUP_APIS
    )
    supported = finalized = ()
    if hasattr(m, "SupportedFeatureKey"):
        supported = tuple(
            build(m.SupportedFeatureKey, name=name, min_version=lo, max_version=hi) for name, (lo, hi) in FEATURES.items()
        )
        finalized = tuple(
            build(m.FinalizedFeatureKey, name=name, min_version_level=level, max_version_level=level)
            for name, level in finalized_levels(state).items()
        )
    return build(
        m.ApiVersionsResponse,
        error_code=ErrorCode.none,
        api_keys=keys,
        throttle_time=datetime.timedelta(0),
        supported_features=supported,
        finalized_features_epoch=1 if finalized else -1,
        finalized_features=finalized,
    )


def unsupported_version_response(correlation_id: int) -> bytes:
    """ApiVersions v0 body with UNSUPPORTED_VERSION and our table, behind a v0 response header."""
    body = bytearray(struct.pack(">ih", correlation_id, ErrorCode.unsupported_version))
    body += struct.pack(">i", len(API_VERSIONS))
    for key, (lo, hi) in sorted(API_VERSIONS.items()):
        body += struct.pack(">hhh", key, lo, hi)
    return struct.pack(">i", len(body)) + bytes(body)
