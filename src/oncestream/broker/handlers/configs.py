"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44) for topic configs.

Broker resources can be described (the static properties given on the command line) but not
altered: dynamic broker configs are not supported and say so with INVALID_REQUEST.

A topic's new configs are validated and the topic reserved on the loop, its metadata file is
written and fsynced on the broker's disk threads (``LogManager.begin_alter_topic_configs``), and
the configs apply to the logs back on the loop once the file is durable.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from oncestream.broker.authorize import Op, Res, authorize
from oncestream.broker.disk_step import run_disk_step
from oncestream.broker.state import BrokerState
from oncestream.errors import InvalidConfigError, KafkaError
from oncestream.log.config import LogConfig
from oncestream.protocol.api_keys import ALTER_CONFIGS, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS
from oncestream.protocol.codec import RequestHeader, build, response_module

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
_LIST_CONFIGS = frozenset({"cleanup.policy"})


def _denied(state: BrokerState, op: Op, res) -> tuple[ErrorCode, str] | None:
    """Kafka's config ACLs: ``op`` on the topic, or on the cluster for a broker resource."""
    if res.resource_type == RESOURCE_TOPIC and not authorize(state, op, Res.TOPIC, res.resource_name):
        return ErrorCode.topic_authorization_failed, f"{op.name} on topic {res.resource_name!r} not allowed"
    if res.resource_type == RESOURCE_BROKER and not authorize(state, op, Res.CLUSTER):
        return ErrorCode.cluster_authorization_failed, f"{op.name} on the cluster not allowed"
    return None


def handle_describe(state: BrokerState, header: RequestHeader, request) -> object:
    m = response_module(DESCRIBE_CONFIGS, header.api_version)
    results = []
    for res in request.resources:
        error, message, entries = ErrorCode.none, None, []
        keys = set(res.configuration_keys) if res.configuration_keys is not None else None
        if (denied := _denied(state, Op.DESCRIBE_CONFIGS, res)) is not None:
            error, message = denied
        elif res.resource_type == RESOURCE_TOPIC:
            info = state.logs.topics().get(res.resource_name)
            if info is None:
                error, message = ErrorCode.unknown_topic_or_partition, "unknown topic"
            else:
                effective = LogConfig.from_topic_configs(info.configs, state.log_config).to_topic_configs()
                for name, value in sorted(effective.items()):
                    source = SOURCE_DYNAMIC_TOPIC if name in info.configs else SOURCE_DEFAULT
                    entries.append((name, value, source))
        elif res.resource_type == RESOURCE_BROKER:
            if res.resource_name not in ("", str(state.config.node_id)):
                error, message = ErrorCode.invalid_request, "unknown broker id"
            else:
                entries = [(k, v, SOURCE_STATIC_BROKER) for k, v in sorted(state.config.raw.items())]
        else:
            error, message = ErrorCode.invalid_request, f"unsupported resource type {res.resource_type}"
        configs = tuple(
            build(
                m.DescribeConfigsResourceResult,
                name=name,
                value=value,
                read_only=False,
                config_source=source,
                is_default=source == SOURCE_DEFAULT,
                is_sensitive=False,
                synonyms=(),
                config_type=0,
                documentation=None,
            )
            for name, value, source in entries
            if keys is None or name in keys
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


log = logging.getLogger(__name__)


async def _apply_topic_configs(state: BrokerState, name: str, overrides: dict[str, str], validate_only: bool) -> None:
    if name not in state.logs.topics():
        raise KafkaError("unknown topic", code=ErrorCode.unknown_topic_or_partition)
    LogConfig.from_topic_configs(overrides, state.log_config)  # raises InvalidConfigError
    if validate_only:
        return
    change = state.logs.begin_alter_topic_configs(name, overrides)
    await run_disk_step(
        state, lambda: change.run(state.disk_fsync),
        finish=lambda: state.logs.finish_alter_topic_configs(change),
        abort=lambda: state.logs.abort_alter_topic_configs(change),
        what=f"config change of topic {name!r}",
    )


def _alter_response(m, results: list[tuple[Any, ErrorCode, str | None]]):
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


async def _alter(state: BrokerState, request, merge) -> list:
    results = []
    for res in request.resources:
        error, message = ErrorCode.none, None
        try:
            if (denied := _denied(state, Op.ALTER_CONFIGS, res)) is not None:
                raise KafkaError(denied[1], code=denied[0])
            if res.resource_type != RESOURCE_TOPIC:
                raise KafkaError("only topic configs can be altered", code=ErrorCode.invalid_request)
            info = state.logs.topics().get(res.resource_name)
            current = dict(info.configs) if info is not None else {}
            await _apply_topic_configs(state, res.resource_name, merge(current, res.configs), request.validate_only)
        except KafkaError as exc:
            error, message = exc.code, str(exc)
        results.append((res, error, message))
    return results


async def handle_alter(state: BrokerState, header: RequestHeader, request) -> object:
    m = response_module(ALTER_CONFIGS, header.api_version)

    def replace_all(_current: dict[str, str], configs) -> dict[str, str]:
        return {c.name: c.value for c in configs if c.value is not None}

    results = await _alter(state, request, replace_all)
    return build(m.AlterConfigsResponse, throttle_time=datetime.timedelta(0), responses=_alter_response(m, results))


async def handle_incremental_alter(state: BrokerState, header: RequestHeader, request) -> object:
    m = response_module(INCREMENTAL_ALTER_CONFIGS, header.api_version)

    def merge(current: dict[str, str], configs) -> dict[str, str]:
        out = dict(current)
        for c in configs:
            if c.config_operation == OP_SET:
                if c.value is None:
                    raise InvalidConfigError(f"{c.name}: SET needs a value")
                out[c.name] = c.value
            elif c.config_operation == OP_DELETE:
                out.pop(c.name, None)
            elif c.config_operation in (OP_APPEND, OP_SUBTRACT):
                if c.name not in _LIST_CONFIGS:
                    raise InvalidConfigError(f"{c.name} is not a list config")
                effective = LogConfig.from_topic_configs(out, state.log_config).to_topic_configs()
                items = [v for v in effective[c.name].split(",") if v]
                given = [v for v in (c.value or "").split(",") if v]
                if c.config_operation == OP_APPEND:
                    items += [v for v in given if v not in items]
                else:
                    items = [v for v in items if v not in given]
                out[c.name] = ",".join(items)
            else:
                raise InvalidConfigError(f"unknown config operation {c.config_operation}")
        return out

    results = await _alter(state, request, merge)
    return build(
        m.IncrementalAlterConfigsResponse, throttle_time=datetime.timedelta(0), responses=_alter_response(m, results)
    )
