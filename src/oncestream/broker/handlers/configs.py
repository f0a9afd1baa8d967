"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44) for TOPIC, BROKER, GROUP
(share-group configs, broker/share_group_configs.py) and CLIENT_METRICS (KIP-714 subscriptions,
broker/telemetry/subscriptions.py) resources.

The rules (what is described, how operations combine, which error code) are sans-io in
``broker/config_admin.py`` and ``broker/dynamic_config.py``; this module authorizes, runs them,
and persists the result:

- a topic's new overrides are validated and the topic reserved on the loop, its metadata file is
  written and fsynced on the broker's disk threads (``LogManager.begin_alter_topic_configs``), and
  the configs apply to the logs back on the loop once the file is durable;
- a broker resource's new dynamic layer is validated on the loop, written to
  ``dynamic-broker-configs.json`` on the disk threads, then installed (every topic's defaults
  follow). One broker change at a time (``BrokerState.dynamic_config_lock``): each starts from the
  layer the previous one left.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from oncestream.broker import config_admin as admin
from oncestream.broker import share_group_configs
from oncestream.broker.authorize import Op, Res, authorize
from oncestream.broker.cluster_security import refresh_dynamic_configs, store_dynamic_configs
from oncestream.broker.disk_step import run_disk_step
from oncestream.broker.dynamic_config import ConfigEntry
from oncestream.broker.handlers.metadata import INTERNAL_TOPICS
from oncestream.broker.log_dirs import remote_status
from oncestream.broker.state import BrokerState
from oncestream.broker.telemetry import subscriptions as client_metrics
from oncestream.broker.tiered_config_rules import check_broker_configs, check_topic_configs
from oncestream.errors import InvalidConfigError, InvalidRequestError, OnceStreamError, UnknownTopicOrPartitionError
from oncestream.log.config import LogConfig
from oncestream.log.manager import validate_topic_name
from oncestream.protocol.api_keys import ALTER_CONFIGS, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS
from oncestream.protocol.codec import RequestHeader, build
from oncestream.protocol.config_resources import (
    RESOURCE_BROKER,
    RESOURCE_CLIENT_METRICS,
    RESOURCE_GROUP,
    RESOURCE_TOPIC,
)
from oncestream.protocol.schemas import response_module

if TYPE_CHECKING:
    from oncestream.protocol.request_types import AlterConfigsRequest, DescribeConfigsRequest, IncrementalAlterConfigsRequest

log = logging.getLogger(__name__)


def _denied(state: BrokerState, op: Op, res: Any) -> tuple[ErrorCode, str] | None:
    """Kafka's config ACLs: ``op`` on the topic, or on the cluster for a broker resource."""
    if res.resource_type == RESOURCE_TOPIC and not authorize(state, op, Res.TOPIC, res.resource_name):
        return ErrorCode.topic_authorization_failed, f"{op.name} on topic {res.resource_name!r} not allowed"
    if res.resource_type == RESOURCE_BROKER and not authorize(state, op, Res.CLUSTER):
        return ErrorCode.cluster_authorization_failed, f"{op.name} on the cluster not allowed"
    if res.resource_type == RESOURCE_CLIENT_METRICS and not authorize(state, op, Res.CLUSTER):
        return ErrorCode.cluster_authorization_failed, f"{op.name} on the cluster not allowed"
    if res.resource_type == RESOURCE_GROUP and not authorize(state, op, Res.GROUP, res.resource_name):
        return ErrorCode.group_authorization_failed, f"{op.name} on group {res.resource_name!r} not allowed"
    return None


@dataclass(frozen=True)
class CatalogTopics:
    """Cluster mode: the overrides of the topics a request names, read from PostgreSQL before
    the (synchronous) answer is built; ``error`` when the catalog could not be read."""

    overrides: dict[str, dict[str, str]]
    error: OnceStreamError | None = None


async def _catalog_topics(state: BrokerState, resources: Any) -> CatalogTopics | None:
    """The catalog's view of the TOPIC resources named (None for the single broker)."""
    if state.cluster is None:
        return None
    names = [res.resource_name for res in resources if res.resource_type == RESOURCE_TOPIC and res.resource_name]
    try:
        found = await state.cluster.topics(names, with_internal=True)
        if any(res.resource_type in (RESOURCE_BROKER, RESOURCE_TOPIC) for res in resources):
            async with state.dynamic_config_lock:  # the broker layers another broker may have changed
                await refresh_dynamic_configs(state)
    except OnceStreamError as exc:
        return CatalogTopics({}, exc)
    return CatalogTopics({name: dict(meta.configs) for name, meta in found.items()})


def _topic_overrides(state: BrokerState, name: str, catalog: CatalogTopics | None = None) -> dict[str, str]:
    if name == "":
        raise InvalidRequestError("Default topic resources are not allowed.")
    validate_topic_name(name)
    if catalog is not None:
        if catalog.error is not None:
            raise catalog.error
        overrides = catalog.overrides.get(name)
        if overrides is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        return dict(overrides)
    info = state.logs.topics().get(name)
    if info is None:
        raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
    return dict(info.configs)


def _describe_entries(state: BrokerState, request: Any, res: Any, catalog: CatalogTopics | None) -> list[ConfigEntry]:
    include_synonyms = bool(getattr(request, "include_synonyms", False))
    include_documentation = bool(getattr(request, "include_documentation", False))
    if res.resource_type == RESOURCE_TOPIC:
        return admin.describe_topic(_topic_overrides(state, res.resource_name, catalog), state.dynamic_configs,
                                    include_synonyms=include_synonyms, include_documentation=include_documentation)
    if res.resource_type == RESOURCE_BROKER:
        return admin.describe_broker(state.dynamic_configs, res.resource_name, include_synonyms=include_synonyms,
                                     include_documentation=include_documentation, remote_status=remote_status(state.remote))
    if res.resource_type == RESOURCE_GROUP:
        return share_group_configs.describe(state.shares.group_configs.get(res.resource_name, {}),
                                            state.shares.settings.group_config_limits)
    if res.resource_type == RESOURCE_CLIENT_METRICS:
        if not res.resource_name:
            raise InvalidRequestError("Subscription name can't be empty")
        return client_metrics.describe(state.telemetry.manager.configs.get(res.resource_name, {}))
    raise InvalidRequestError(f"Unsupported resource type: {res.resource_type}")


async def _apply_group_configs(state: BrokerState, group_id: str, ops: list[tuple[str, int, str | None]],
                               replace: bool, validate_only: bool) -> None:
    """Share-group configs (broker/share_group_configs.py): written durably, then applied."""
    if not group_id:
        raise InvalidRequestError("Group resources need a group id.")
    shares = state.shares
    store = shares.group_config_store
    if store is None:
        raise InvalidRequestError("this broker keeps no share-group configs")
    async with shares.group_config_lock:
        await shares.refresh_group_configs()  # cluster mode: another broker may have changed them
        current = shares.group_configs
        updated = share_group_configs.apply_operations({} if replace else current.get(group_id, {}), ops,
                                                       shares.settings.group_config_limits)
        if validate_only:
            return
        new_all = {**current, group_id: updated}

        def install() -> None:
            shares.group_configs.update({group_id: updated})
            shares.apply_group_configs()

        await run_disk_step(
            state, lambda: store.save(new_all),
            finish=install,
            abort=lambda: None,
            what=f"config change of group {group_id!r}",
        )


async def _apply_client_metrics_configs(state: BrokerState, name: str, ops: list[tuple[str, int, str | None]],
                                        replace: bool, validate_only: bool) -> None:
    """A ClientMetrics subscription (KIP-714, broker/telemetry/subscriptions.py): validated, written
    durably, then installed (every client instance re-resolves its subscription)."""
    admin.check_operations(ops)
    async with state.telemetry.config_lock:
        current = state.telemetry.manager.configs
        updated = client_metrics.apply_operations({} if replace else current.get(name, {}), ops)
        client_metrics.validate(name, updated)
        if validate_only:
            return
        new_all = {**current, name: updated}
        await run_disk_step(
            state, lambda: state.telemetry.config_store.save(new_all),
            finish=lambda: state.telemetry.manager.install(new_all),
            abort=lambda: None,
            what=f"config change of client metrics {name!r}",
        )


async def handle_describe_configs(state: BrokerState, header: RequestHeader, request: DescribeConfigsRequest) -> object:
    """DescribeConfigs; in cluster mode the topics' overrides come from the catalog first, and
    share groups' configs are re-read, so every broker describes a change made through another
    at once (the notification that also brings it may still be on its way)."""
    if any(res.resource_type == RESOURCE_GROUP for res in request.resources):
        async with state.shares.group_config_lock:
            try:
                await state.shares.refresh_group_configs()
            except OnceStreamError as exc:  # described from the last snapshot; the watch loop retries
                log.warning("cannot re-read the share-group configs: %s", exc)
    return handle_describe(state, header, request, await _catalog_topics(state, request.resources))


def handle_describe(state: BrokerState, header: RequestHeader, request: DescribeConfigsRequest,
                    catalog: CatalogTopics | None = None) -> object:
    """DescribeConfigs of the single broker (``catalog``: cluster mode's topics, see above)."""
    m = response_module(DESCRIBE_CONFIGS, header.api_version)
    results = []
    for res in request.resources:
        error, message, entries = ErrorCode.none, None, []
        keys = set(res.configuration_keys) if res.configuration_keys else None  # null or empty: all
        if (denied := _denied(state, Op.DESCRIBE_CONFIGS, res)) is not None:
            error, message = denied
        else:
            try:
                entries = _describe_entries(state, request, res, catalog)
            except OnceStreamError as exc:
                error, message = exc.code, str(exc)
        configs = tuple(
            build(
                m.DescribeConfigsResourceResult,
                name=e.name,
                value=e.value,
                read_only=e.read_only,
                config_source=int(e.source),
                is_sensitive=e.sensitive,
                synonyms=tuple(build(m.DescribeConfigsSynonym, name=n, value=v, source=int(s)) for n, v, s in e.synonyms),
                config_type=int(e.type),
                documentation=e.doc,
            )
            for e in entries
            if keys is None or e.name in keys
        )
        results.append(
            build(
                m.DescribeConfigsResult,
                error_code=error,
                error_message=message,
                resource_type=res.resource_type,
                resource_name=res.resource_name,
                configs=configs,
            )
        )
    return build(m.DescribeConfigsResponse, throttle_time=datetime.timedelta(0), results=tuple(results))


async def _apply_topic_configs(state: BrokerState, name: str, overrides: dict[str, str], current: dict[str, str],
                               validate_only: bool) -> None:
    overrides = admin.validate_topic_configs(overrides)  # INVALID_CONFIG
    check_topic_configs(overrides, current, state.dynamic_configs.effective(), topic=name,
                        internal=name in INTERNAL_TOPICS)  # tiered storage: INVALID_CONFIG
    if validate_only:
        return
    if state.cluster is not None:  # the catalog's overrides become exactly these, for every broker
        await state.cluster.set_topic_configs(name, overrides)
        return
    change = state.logs.begin_alter_topic_configs(name, overrides)
    await run_disk_step(
        state, lambda: change.run(state.disk_fsync),
        finish=lambda: state.logs.finish_alter_topic_configs(change),
        abort=lambda: state.logs.abort_alter_topic_configs(change),
        what=f"config change of topic {name!r}",
    )


async def _apply_broker_configs(state: BrokerState, resource_name: str,
                                new_layer: Callable[[Mapping[str, str]], dict[str, str]], validate_only: bool) -> None:
    async with state.dynamic_config_lock:
        await refresh_dynamic_configs(state)  # cluster mode: start from the catalog's layers
        current = state.dynamic_configs
        current.check_resource_name(resource_name)
        layer = current.validate_layer(resource_name, new_layer(current.layer(resource_name)))
        if validate_only:
            return
        updated = current.with_layer(resource_name, layer)
        # The whole result must still make valid topic defaults before anything is written.
        try:
            LogConfig.from_broker_configs(updated.effective())
        except OnceStreamError as exc:
            raise InvalidRequestError(str(exc)) from None
        check_broker_configs(updated.effective())  # log.local.retention.* (tiered storage)
        if state.cluster is not None:  # the catalog's layer becomes exactly this, for every broker
            await store_dynamic_configs(state, resource_name, layer)
            state.apply_dynamic_configs(updated)
            return
        await run_disk_step(
            state, lambda: updated.save(state.data_dir, state.disk_fsync),
            finish=lambda: state.apply_dynamic_configs(updated),
            abort=lambda: None,
            what=f"dynamic broker config change of {resource_name!r}",
        )


def _alter_response(m: Any, results: list[tuple[Any, ErrorCode, str | None]]) -> tuple[Any, ...]:
    return tuple(
        build(
            m.AlterConfigsResourceResponse,
            error_code=error,
            error_message=message,
            resource_type=res.resource_type,
            resource_name=res.resource_name,
        )
        for res, error, message in results
    )


def _broker_layer(ops: list[tuple[str, int, str | None]], replace: bool) -> Callable[[Mapping[str, str]], dict[str, str]]:
    def new_layer(layer: Mapping[str, str]) -> dict[str, str]:
        return admin.apply_incremental(RESOURCE_BROKER, {} if replace else layer, ops)
    return new_layer


async def _alter(state: BrokerState, request: Any, ops_of: Callable[[Any], list[tuple[str, int, str | None]]],
                 replace: bool) -> list[tuple[Any, ErrorCode, str | None]]:
    """Both AlterConfigs flavours: ``ops_of(resource)`` gives its (name, op, value) list; with
    ``replace`` (legacy AlterConfigs) they start from an empty set instead of the current one."""
    repeated = admin.check_resource_names((res.resource_type, res.resource_name) for res in request.resources)
    catalog = await _catalog_topics(state, request.resources)
    results = []
    for res in request.resources:
        error, message = ErrorCode.none, None
        try:
            if (res.resource_type, res.resource_name) in repeated:
                raise InvalidRequestError("Each resource must appear at most once.")
            if (denied := _denied(state, Op.ALTER_CONFIGS, res)) is not None:
                raise OnceStreamError(denied[1], code=denied[0])
            ops = ops_of(res)
            if res.resource_type == RESOURCE_TOPIC:
                current = _topic_overrides(state, res.resource_name, catalog)  # the topic must exist
                if state.cluster is not None and res.resource_name in INTERNAL_TOPICS:
                    raise InvalidConfigError(f"the configs of {res.resource_name!r} cannot be altered in cluster mode: "
                                             "its records are rows in PostgreSQL, not log segments")
                overrides = admin.apply_incremental(RESOURCE_TOPIC, {} if replace else current, ops)
                await _apply_topic_configs(state, res.resource_name, overrides, current, request.validate_only)
            elif res.resource_type == RESOURCE_BROKER:
                admin.check_operations(ops)
                await _apply_broker_configs(state, res.resource_name, _broker_layer(ops, replace), request.validate_only)
            elif res.resource_type == RESOURCE_CLIENT_METRICS:
                await _apply_client_metrics_configs(state, res.resource_name, ops, replace, request.validate_only)
            elif res.resource_type == RESOURCE_GROUP:
                await _apply_group_configs(state, res.resource_name, ops, replace, request.validate_only)
            else:
                raise InvalidRequestError(f"Unknown resource type {res.resource_type}")
        except OnceStreamError as exc:
            error, message = exc.code, str(exc)
        results.append((res, error, message))
    return results


async def handle_alter(state: BrokerState, header: RequestHeader, request: AlterConfigsRequest) -> object:
    m = response_module(ALTER_CONFIGS, header.api_version)

    def as_sets(res: Any) -> list[tuple[str, int, str | None]]:
        # Kafka's legacy AlterConfigs: the given configs become the whole set; a null value is
        # INVALID_REQUEST (check_operations, as for a SET).
        return [(c.name, admin.AlterOp.SET, c.value) for c in res.configs]

    results = await _alter(state, request, as_sets, replace=True)
    return build(m.AlterConfigsResponse, throttle_time=datetime.timedelta(0), responses=_alter_response(m, results))


async def handle_incremental_alter(state: BrokerState, header: RequestHeader, request: IncrementalAlterConfigsRequest) -> object:
    m = response_module(INCREMENTAL_ALTER_CONFIGS, header.api_version)

    def as_ops(res: Any) -> list[tuple[str, int, str | None]]:
        return [(c.name, c.config_operation, c.value) for c in res.configs]

    results = await _alter(state, request, as_ops, replace=False)
    return build(
        m.IncrementalAlterConfigsResponse, throttle_time=datetime.timedelta(0), responses=_alter_response(m, results)
    )
