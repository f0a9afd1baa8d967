"""CreateTopics (key 19), DeleteTopics (key 20) and CreatePartitions (key 37) on a single node
(replication factor 1).

Each created or deleted partition counts against the client's ``controller_mutation_rate``
(KIP-599, ``broker/quotas/``): from CreateTopics v6, DeleteTopics v5 and CreatePartitions v3 on, a
topic asked for while the quota is exceeded gets THROTTLING_QUOTA_EXCEEDED (the one that exceeds
it is still done); older versions are only throttled. validate_only requests count nothing."""

from __future__ import annotations

import datetime
import logging
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from oncestream.broker import config_admin
from oncestream.broker.authorize import Op, Res, authorize
from oncestream.broker.connection_context import current_session
from oncestream.broker.disk_step import run_disk_step
from oncestream.broker.handlers.metadata import INTERNAL_TOPICS
from oncestream.broker.quotas.enforcement import quota_user
from oncestream.broker.quotas.managers import MutationQuota
from oncestream.broker.state import BrokerState
from oncestream.broker.tiered_config_rules import check_topic_configs
from oncestream.broker.topic_creation import run_creation
from oncestream.errors import OnceStreamError, StorageError
from oncestream.log.config import LogConfig
from oncestream.protocol.api_keys import CREATE_PARTITIONS, CREATE_TOPICS, DELETE_TOPICS
from oncestream.protocol.codec import RequestHeader, build
from oncestream.protocol.schemas import response_module

if TYPE_CHECKING:
    from oncestream.protocol.request_types import CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest

log = logging.getLogger(__name__)

_NIL_UUID = uuid.UUID(int=0)
# Kafka's controller (ReplicationControlManager.MAX_PARTITIONS_PER_BATCH) refuses a CreateTopics or
# CreatePartitions request that asks for more partitions than this in total: one request must
# not make the broker create files for hours.
MAX_PARTITIONS_PER_REQUEST = 10_000
_TOO_MANY_PER_REQUEST = "Excessively large number of partitions per request."
_THROTTLED = "The throttling quota has been exceeded."
# KIP-599: the first versions whose clients understand THROTTLING_QUOTA_EXCEEDED.
_STRICT_FROM_VERSION = {CREATE_TOPICS: 6, DELETE_TOPICS: 5, CREATE_PARTITIONS: 3}


def _mutation_quota(state: BrokerState, header: RequestHeader) -> MutationQuota:
    """The controller mutation quota this request draws from."""
    return state.client_quotas.mutation_quota(
        quota_user(current_session().principal), header.client_id or "",
        strict=header.api_version >= _STRICT_FROM_VERSION[header.api_key])


def _throttle(quota: MutationQuota) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=quota.throttle_ms)


def _requested_partitions(state: BrokerState, t: Any) -> int:
    """How many partitions a CreateTopics entry asks for (-1: the broker's num.partitions)."""
    if t.assignments:
        return len(t.assignments)
    return state.config.num_partitions if t.num_partitions == -1 else t.num_partitions


def _created_configs(m: Any, state: BrokerState, name: str, configs: dict[str, str], error: ErrorCode) -> dict[str, Any]:
    """CreateTopics v5+ answers with the new topic's configs as DescribeConfigs would describe them,
    for a client allowed DESCRIBE_CONFIGS on the topic (Kafka: TOPIC_AUTHORIZATION_FAILED in
    topic_config_error_code otherwise)."""
    if error != ErrorCode.none or not hasattr(m, "CreatableTopicConfigs"):  # before v5: no configs field
        return {"configs": None if error != ErrorCode.none else (), "topic_config_error_code": ErrorCode.none}
    if not authorize(state, Op.DESCRIBE_CONFIGS, Res.TOPIC, name):
        return {"configs": (), "topic_config_error_code": ErrorCode.topic_authorization_failed}
    entries = config_admin.describe_topic(configs, state.dynamic_configs, include_synonyms=False,
                                          include_documentation=False)
    return {
        "configs": tuple(build(m.CreatableTopicConfigs, name=e.name, value=e.value, read_only=e.read_only,
                               config_source=int(e.source), is_sensitive=e.sensitive) for e in entries),
        "topic_config_error_code": ErrorCode.none,
    }


async def _existing(state: BrokerState, names: Sequence[str] | None) -> dict[str, Any]:
    """The topics (name -> info with ``topic_id`` and ``num_partitions``) of the broker's logs, or
    in cluster mode of the catalog in PostgreSQL (``names`` only; every topic when None) with the
    coordinators' internal topics, as the single broker's logs hold them."""
    if state.cluster is not None:
        return dict(await state.cluster.topics(names, with_internal=True))
    return dict(state.logs.topics())


async def handle_create(state: BrokerState, header: RequestHeader, request: CreateTopicsRequest) -> object:
    m = response_module(CREATE_TOPICS, header.api_version)
    results = []
    existing = await _existing(state, [t.name for t in request.topics])
    # Cluster mode: durability is the object store's, so any replication factor is accepted and
    # reported as 1 (one copy of the coordinates in PostgreSQL, of the bytes in the bucket).
    replication_factors = (-1, 1) if state.cluster is None else None
    too_many = sum(max(_requested_partitions(state, t), 0) for t in request.topics) > MAX_PARTITIONS_PER_REQUEST
    granted = 0  # partitions this request already created (or, validate_only, would have)
    create_any = authorize(state, Op.CREATE, Res.CLUSTER)  # Kafka: CREATE on the cluster or the topic
    quota = _mutation_quota(state, header)
    for t in request.topics:
        error, message = ErrorCode.none, None
        topic_id = _NIL_UUID
        num_partitions = _requested_partitions(state, t)
        configs = {c.name: c.value for c in t.configs if c.value is not None}
        over_budget = state.partition_budget_error(granted + max(num_partitions, 0))
        if not (create_any or authorize(state, Op.CREATE, Res.TOPIC, t.name)):
            error, message = ErrorCode.topic_authorization_failed, "CREATE on the topic not allowed"
        elif too_many:
            error, message = ErrorCode.policy_violation, _TOO_MANY_PER_REQUEST
        elif over_budget is not None and t.name not in existing:
            error, message = ErrorCode.policy_violation, over_budget
        elif replication_factors is not None and t.replication_factor not in replication_factors:
            error = ErrorCode.invalid_replication_factor
            message = "this broker is a single node: replication factor must be 1"
        elif num_partitions < 1:
            error, message = ErrorCode.invalid_partitions, "number of partitions must be >= 1"
        elif t.name in existing:
            error, message = ErrorCode.topic_already_exists, f"topic {t.name!r} already exists"
        elif state.cluster is not None and t.name in INTERNAL_TOPICS:
            # __share_group_state: kept in each broker's scratch directory in cluster mode.
            error, message = ErrorCode.invalid_request, f"{t.name!r} is internal to each broker in cluster mode"
        else:
            try:
                # Kafka's names, types and ranges; stored in canonical form (e.g. list spacing).
                configs = config_admin.validate_topic_configs(configs)
                LogConfig.from_topic_configs(configs, state.log_config)
                check_topic_configs(configs, {}, state.dynamic_configs.effective(), topic=t.name,
                                    internal=t.name in INTERNAL_TOPICS)
                if not request.validate_only and not quota.try_record(num_partitions):
                    error, message = ErrorCode.throttling_quota_exceeded, _THROTTLED
                elif not request.validate_only and state.cluster is not None:
                    topic_id = (await state.cluster.create_topic(t.name, num_partitions, configs)).topic_id
                elif not request.validate_only:
                    creation = state.logs.begin_create_topic(t.name, num_partitions, configs)
                    topic_id = (await run_creation(state, creation)).topic_id
                else:
                    granted += num_partitions
            except OnceStreamError as exc:
                error, message = exc.code, str(exc)
        results.append(
            build(
                m.CreatableTopicResult,
                name=t.name,
                topic_id=topic_id,
                error_code=error,
                error_message=message,
                num_partitions=num_partitions if error == ErrorCode.none else -1,
                replication_factor=1 if error == ErrorCode.none else -1,
                **_created_configs(m, state, t.name, configs, error),
            )
        )
    return build(m.CreateTopicsResponse, throttle_time=_throttle(quota), topics=tuple(results))


async def handle_delete(state: BrokerState, header: RequestHeader, request: DeleteTopicsRequest) -> object:
    m = response_module(DELETE_TOPICS, header.api_version)
    wanted: list[tuple[str | None, uuid.UUID | None]]
    if hasattr(request, "topic_names"):
        wanted = [(name, None) for name in request.topic_names]
    else:
        wanted = [(t.name, t.topic_id) for t in request.topics]  # kio reads the zero uuid as None
    results = []
    quota = _mutation_quota(state, header)
    by_id = any(name is None for name, _ in wanted)
    for name, topic_id in wanted:
        error, message = ErrorCode.none, None
        topics = await _existing(state, None if by_id or name is None else [name])
        if name is None and topic_id is not None:
            name = next((n for n, info in topics.items() if info.topic_id == topic_id), None)
            if name is None:
                error = ErrorCode.unknown_topic_id
        elif name is None:  # v6+: a topic entry with neither a name nor an id (Kafka's controller)
            error, message = ErrorCode.invalid_request, "neither a topic name nor a topic id was given"
        if error == ErrorCode.none and not authorize(state, Op.DELETE, Res.TOPIC, name or ""):
            # Kafka's controller: without DESCRIBE the topic's existence is not revealed; with
            # DESCRIBE a missing topic is UNKNOWN_TOPIC_OR_PARTITION, an existing one refused.
            if name not in topics and authorize(state, Op.DESCRIBE, Res.TOPIC, name or ""):
                error = ErrorCode.unknown_topic_or_partition
            else:
                error, message = ErrorCode.topic_authorization_failed, "DELETE on the topic not allowed"
        if error == ErrorCode.none and name is not None:
            if name in INTERNAL_TOPICS:
                error, message = ErrorCode.topic_authorization_failed, "internal topics cannot be deleted"
            elif name in topics and not quota.try_record(topics[name].num_partitions):
                error, message = ErrorCode.throttling_quota_exceeded, _THROTTLED
            else:
                try:
                    info = topics.get(name)
                    topic_id = info.topic_id if info is not None else topic_id
                    await _delete_topic(state, name)
                except OnceStreamError as exc:
                    error, message = exc.code, str(exc)
        results.append(
            build(
                m.DeletableTopicResult,
                name=name,
                topic_id=topic_id or _NIL_UUID,
                error_code=error,
                error_message=message,
            )
        )
    return build(m.DeleteTopicsResponse, throttle_time=_throttle(quota), responses=tuple(results))


async def _delete_topic(state: BrokerState, name: str) -> None:
    """In cluster mode: the catalog deletes the topic (its batches' objects are collected by the
    garbage collector). Single broker: the metadata file is unlinked and its directory fsynced on the disk threads; the logs
    close back on the loop after that (``LogManager.begin_delete_topic``); then the partition
    directories are removed on the disk threads too (a topic of many segments takes long to
    unlink), the name staying taken until they are gone. The answer waits for all of it."""
    if state.cluster is not None:
        await state.cluster.delete_topic(name)
        return
    deletion = state.logs.begin_delete_topic(name)
    removal = await run_disk_step(
        state, lambda: deletion.run(state.disk_fsync),
        finish=lambda: state.logs.finish_delete_topic(deletion),
        abort=lambda: state.logs.abort_delete_topic(deletion),
        what=f"deletion of topic {name!r}",
    )
    if state.remote is not None:
        # Its remote objects go in the background, its journal last (remote/manager.py).
        state.remote.topic_deleted(deletion.info)
    if removal is None:
        return
    try:
        await run_disk_step(
            state, removal.run,
            finish=lambda: state.logs.finish_topic_removal(name, removal),
            abort=lambda: state.logs.finish_topic_removal(name, removal),
            what=f"removal of the files of deleted topic {name!r}",
        )
    except StorageError as exc:  # the topic is gone; a directory left is removed at the next start
        log.warning("topic %r deleted, but not all its files: %s", name, exc)


async def handle_create_partitions(state: BrokerState, header: RequestHeader, request: CreatePartitionsRequest) -> object:
    """Grow topics to ``count`` partitions. New partitions start empty at offset 0; clients see them
    in their next Metadata. Internal topics keep their partition count: the coordinators hash group
    and transactional ids over it, so changing it would move every id's coordinator partition."""
    m = response_module(CREATE_PARTITIONS, header.api_version)
    names = [t.name for t in request.topics]
    topics = await _existing(state, names)
    new_partitions = sum(max(t.count - topics[t.name].num_partitions, 0) for t in request.topics if t.name in topics)
    granted = 0  # partitions validate_only would have added so far
    results = []
    quota = _mutation_quota(state, header)
    for t in request.topics:
        error, message = ErrorCode.none, None
        info = topics.get(t.name)
        over_budget = None if info is None else state.partition_budget_error(granted + max(t.count - info.num_partitions, 0))
        if not authorize(state, Op.ALTER, Res.TOPIC, t.name):
            error, message = ErrorCode.topic_authorization_failed, "ALTER on the topic not allowed"
        elif new_partitions > MAX_PARTITIONS_PER_REQUEST:
            error, message = ErrorCode.policy_violation, _TOO_MANY_PER_REQUEST
        elif names.count(t.name) > 1:
            error, message = ErrorCode.invalid_request, f"topic {t.name!r} appears more than once"
        elif info is None:
            error, message = ErrorCode.unknown_topic_or_partition, f"topic {t.name!r} does not exist"
        elif t.name in INTERNAL_TOPICS:
            error, message = ErrorCode.invalid_partitions, f"the partition count of {t.name!r} is fixed"
        elif t.count <= info.num_partitions:
            error = ErrorCode.invalid_partitions
            message = f"topic {t.name!r} has {info.num_partitions} partitions; cannot change to {t.count}"
        elif t.assignments is not None and state.cluster is None and (
            len(t.assignments) != t.count - info.num_partitions
            or any(tuple(a.broker_ids) != (state.config.node_id,) for a in t.assignments)
        ):
            error = ErrorCode.invalid_replica_assignment
            message = (f"a single-node broker needs one assignment [{state.config.node_id}] "
                       f"per new partition ({t.count - info.num_partitions})")
        elif over_budget is not None:
            error, message = ErrorCode.policy_violation, over_budget
        elif request.validate_only:
            granted += t.count - info.num_partitions
        elif not quota.try_record(t.count - info.num_partitions):
            error, message = ErrorCode.throttling_quota_exceeded, _THROTTLED
        elif state.cluster is not None:
            try:
                await state.cluster.create_partitions(t.name, t.count)
            except OnceStreamError as exc:
                error, message = exc.code, str(exc)
        else:
            try:
                await run_creation(state, state.logs.begin_create_partitions(t.name, t.count))
            except OnceStreamError as exc:
                error, message = exc.code, str(exc)
        results.append(build(m.CreatePartitionsTopicResult, name=t.name, error_code=error,
                             error_message=message))
    return build(m.CreatePartitionsResponse, throttle_time=_throttle(quota), results=tuple(results))

