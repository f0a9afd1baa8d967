"""The group methods of ``Admin``: list, describe and delete groups, read, alter and delete their
committed offsets, for classic groups, KIP-848 consumer groups and KIP-932 share groups.

Names and result shapes follow confluent-kafka's AdminClient (``list_consumer_groups`` with
``states``/``types``, ``describe_consumer_groups``, ``list_consumer_group_offsets``,
``alter_consumer_group_offsets``, ``delete_consumer_groups``), but, as the rest of ``Admin``,
results come back directly instead of as futures: a per-group (or per-partition) ``error`` field
or ``KafkaError`` value carries what failed. confluent-kafka 2.16 has no share-group admin
methods; those are named after Kafka's Java ``Admin`` (``describeShareGroups``,
``listShareGroupOffsets``, ``alterShareGroupOffsets``, ``deleteShareGroupOffsets``).

Every request goes to the group's coordinator (FindCoordinator, cached by ``Cluster``) at the
highest version both sides support (ApiVersions); NOT_COORDINATOR and the coordinator-loading
errors make the call look the coordinator up again and retry until the call's timeout.
The response readers are plain functions of a decoded response (unit-tested without a broker).
"""

from __future__ import annotations

import asyncio
import datetime
import enum
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from oncestream.client.common.cluster import COORDINATOR_GROUP, COORDINATOR_NODE_BASE, Cluster
from oncestream.client.common.errors import BrokerResponseError, KafkaError, KafkaException
from oncestream.client.common.message import TopicPartition
from oncestream.protocol.api_keys import (
    ALTER_SHARE_GROUP_OFFSETS,
    CONSUMER_GROUP_DESCRIBE,
    DELETE_GROUPS,
    DELETE_SHARE_GROUP_OFFSETS,
    DESCRIBE_GROUPS,
    DESCRIBE_SHARE_GROUP_OFFSETS,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    SHARE_GROUP_DESCRIBE,
)
from oncestream.protocol.codec import build
from oncestream.protocol.consumer_protocol import ConsumerProtocolError, decode_assignment

T = TypeVar("T")

# The coordinator moved or is still loading: look it up again and retry.
_COORDINATOR_RETRY = frozenset({int(ErrorCode.coordinator_load_in_progress), int(ErrorCode.not_coordinator),
                                int(ErrorCode.coordinator_not_available)})
_GROUP_ID_NOT_FOUND = int(ErrorCode.group_id_not_found)
# OffsetCommit from an admin: no member, no generation (Kafka's AdminClient sends the same).
_ADMIN_GENERATION = -1
_RETENTION_DEFAULT = datetime.timedelta(milliseconds=-1)  # the broker's offsets.retention.minutes


def error_or_none(code: int, message: str | None = None) -> KafkaError | None:
    """None for error code 0, else the ``KafkaError`` (with the broker's message if any)."""
    return None if code == 0 else KafkaError(code, message or None)


_E = TypeVar("_E", bound=enum.Enum)


def _parse_named(cls: type[_E], text: str | None, unknown: _E) -> _E:
    """The member whose value the broker's string names (case-insensitive), else ``unknown``."""
    wanted = (text or "").lower()
    return next((member for member in cls if str(member.value).lower() == wanted), unknown)


class ConsumerGroupState(enum.Enum):
    """A group's state as ListGroups / DescribeGroups name it (confluent-kafka's enum names; the
    KIP-848 states Assigning and Reconciling and Kafka's NotReady besides)."""

    UNKNOWN = "Unknown"
    PREPARING_REBALANCING = "PreparingRebalance"
    COMPLETING_REBALANCING = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    NOT_READY = "NotReady"

    @classmethod
    def parse(cls, text: str | None) -> ConsumerGroupState:
        """The state a broker's string names (case-insensitive; UNKNOWN for anything else)."""
        return _parse_named(cls, text, cls.UNKNOWN)


class ConsumerGroupType(enum.Enum):
    """KIP-848's group type (ListGroups v5 ``group_type``), confluent-kafka's names plus SHARE
    and STREAMS."""

    UNKNOWN = "unknown"
    CONSUMER = "consumer"
    CLASSIC = "classic"
    SHARE = "share"
    STREAMS = "streams"

    @classmethod
    def parse(cls, text: str | None) -> ConsumerGroupType:
        """The type a broker's string names (case-insensitive; UNKNOWN for anything else)."""
        return _parse_named(cls, text, cls.UNKNOWN)


@dataclass
class Node:
    """A broker as confluent-kafka's ``Node``: id, host, port."""

    id: int
    host: str
    port: int


@dataclass
class GroupListing:
    """One group from ListGroups (the raw protocol fields; ``list_groups``)."""

    group_id: str
    protocol_type: str
    state: str | None = None


@dataclass
class ConsumerGroupListing:
    """One group from ``list_consumer_groups`` (confluent-kafka's ``ConsumerGroupListing``)."""

    group_id: str
    is_simple_consumer_group: bool
    state: ConsumerGroupState = ConsumerGroupState.UNKNOWN
    type: ConsumerGroupType = ConsumerGroupType.UNKNOWN
    protocol_type: str = ""


@dataclass
class ListConsumerGroupsResult:
    """confluent-kafka's ``ListConsumerGroupsResult``: the listings and per-broker errors."""

    valid: list[ConsumerGroupListing] = field(default_factory=list)
    errors: list[KafkaError] = field(default_factory=list)


@dataclass
class MemberAssignment:
    """The partitions of one member (confluent-kafka's ``MemberAssignment``)."""

    topic_partitions: list[TopicPartition] = field(default_factory=list)


@dataclass
class MemberDescription:
    """One member of a described group (confluent-kafka's ``MemberDescription``; ``member_epoch``
    is -1 for a classic member)."""

    member_id: str
    client_id: str
    host: str
    assignment: MemberAssignment
    group_instance_id: str | None = None
    target_assignment: MemberAssignment | None = None
    member_epoch: int = -1


@dataclass
class GroupDescription:
    """A group as DescribeGroups describes it (``describe_groups``: any protocol type)."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberDescription]
    error: KafkaError | None = None


@dataclass
class ConsumerGroupDescription:
    """A described classic or consumer group (confluent-kafka's ``ConsumerGroupDescription``)."""

    group_id: str
    is_simple_consumer_group: bool
    members: list[MemberDescription]
    partition_assignor: str
    state: ConsumerGroupState
    coordinator: Node | None
    type: ConsumerGroupType = ConsumerGroupType.UNKNOWN
    group_epoch: int = -1            # consumer groups only
    assignment_epoch: int = -1       # consumer groups only
    error: KafkaError | None = None


@dataclass
class ShareGroupDescription:
    """A described share group (Kafka's ``ShareGroupDescription``)."""

    group_id: str
    members: list[MemberDescription]
    state: ConsumerGroupState
    coordinator: Node | None
    group_epoch: int = -1
    assignment_epoch: int = -1
    error: KafkaError | None = None


@dataclass
class ConsumerGroupTopicPartitions:
    """A group and partitions (confluent-kafka's ``ConsumerGroupTopicPartitions``): the request
    of the offset methods, and their result with offsets and per-partition errors filled in.
    ``topic_partitions`` None asks for every partition the group has an offset for."""

    group_id: str
    topic_partitions: list[TopicPartition] | None = None
    error: KafkaError | None = None


@dataclass
class SharePartitionOffset:
    """A share group's position on one partition: the share-partition start offset (records
    before it are done with), the leader epoch it was written at and the lag (-1: unknown)."""

    topic: str
    partition: int
    start_offset: int
    leader_epoch: int = -1
    lag: int = -1
    error: KafkaError | None = None


@dataclass
class ShareGroupOffsets:
    """``list_share_group_offsets``'s answer for one group."""

    group_id: str
    partitions: list[SharePartitionOffset] = field(default_factory=list)
    error: KafkaError | None = None


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[TopicPartition]]:
    out: dict[str, list[TopicPartition]] = {}
    for tp in partitions:
        out.setdefault(tp.topic, []).append(tp)
    return out


_G = TypeVar("_G", ConsumerGroupDescription, GroupDescription, ShareGroupDescription, ConsumerGroupTopicPartitions,
              ShareGroupOffsets)


async def _by_group_id(one: Callable[[Any], Coroutine[Any, Any, _G]], items: Iterable[Any]) -> dict[str, _G]:
    """``one`` of every item at once, the results keyed by their group id."""
    results = await asyncio.gather(*(one(item) for item in items))
    return {r.group_id: r for r in results}


def _state_matches(listing: ConsumerGroupListing, states: set[ConsumerGroupState]) -> bool:
    return not states or listing.state in states


def _listing_type(protocol_type: str, group_type: str | None) -> ConsumerGroupType:
    """A broker below ListGroups v5 has classic groups only."""
    if group_type:
        return ConsumerGroupType.parse(group_type)
    return ConsumerGroupType.CLASSIC


def read_list_groups(response: Any, states: set[ConsumerGroupState],
                     types: set[ConsumerGroupType]) -> list[ConsumerGroupListing]:
    """ListGroups (any version) as listings; the filters are applied here too, so that a broker
    too old for StatesFilter (v4) or TypesFilter (v5) still gets the caller what it asked for."""
    out = []
    for g in response.groups:
        listing = ConsumerGroupListing(
            g.group_id,
            is_simple_consumer_group=g.protocol_type == "" and getattr(g, "group_type", "classic") in ("", "classic"),
            state=ConsumerGroupState.parse(getattr(g, "group_state", None)),
            type=_listing_type(g.protocol_type, getattr(g, "group_type", None)),
            protocol_type=g.protocol_type,
        )
        if _state_matches(listing, states) and (not types or listing.type in types):
            out.append(listing)
    return out


def _assignment_of(topic_partitions: Iterable[Any]) -> MemberAssignment:
    return MemberAssignment([TopicPartition(t.topic_name, p) for t in topic_partitions for p in t.partitions])


def read_consumer_group_describe(g: Any, coordinator: Node | None) -> ConsumerGroupDescription:
    """One group of a ConsumerGroupDescribe response (KIP-848)."""
    members = [
        MemberDescription(
            member_id=m.member_id, client_id=m.client_id, host=m.client_host,
            assignment=_assignment_of(m.assignment.topic_partitions), group_instance_id=m.instance_id,
            target_assignment=_assignment_of(m.target_assignment.topic_partitions), member_epoch=m.member_epoch,
        )
        for m in g.members
    ]
    return ConsumerGroupDescription(
        g.group_id, is_simple_consumer_group=False, members=members, partition_assignor=g.assignor_name,
        state=ConsumerGroupState.parse(g.group_state), coordinator=coordinator, type=ConsumerGroupType.CONSUMER,
        group_epoch=g.group_epoch, assignment_epoch=g.assignment_epoch,
        error=error_or_none(int(g.error_code), g.error_message),
    )


def read_share_group_describe(g: Any, coordinator: Node | None) -> ShareGroupDescription:
    """One group of a ShareGroupDescribe response (KIP-932)."""
    members = [
        MemberDescription(member_id=m.member_id, client_id=m.client_id, host=m.client_host,
                          assignment=_assignment_of(m.assignment.topic_partitions), member_epoch=m.member_epoch)
        for m in g.members
    ]
    return ShareGroupDescription(g.group_id, members, ConsumerGroupState.parse(g.group_state), coordinator,
                                 g.group_epoch, g.assignment_epoch,
                                 error_or_none(int(g.error_code), g.error_message))


def _classic_members(g: Any) -> list[MemberDescription]:
    members = []
    for m in g.members:
        try:
            assigned = decode_assignment(m.member_assignment).topic_partitions() \
                if g.protocol_type == "consumer" else []
        except ConsumerProtocolError:
            assigned = []  # not the consumer protocol's encoding: nothing to show
        members.append(MemberDescription(
            member_id=m.member_id, client_id=m.client_id, host=m.client_host,
            assignment=MemberAssignment([TopicPartition(t, p) for t, p in assigned]),
            group_instance_id=getattr(m, "group_instance_id", None)))
    return members


def read_describe_groups(g: Any, coordinator: Node | None) -> ConsumerGroupDescription:
    """One group of a DescribeGroups response as a classic consumer group."""
    return ConsumerGroupDescription(
        g.group_id, is_simple_consumer_group=g.protocol_type == "", members=_classic_members(g),
        partition_assignor=g.protocol_data, state=ConsumerGroupState.parse(g.group_state), coordinator=coordinator,
        type=ConsumerGroupType.CLASSIC, error=error_or_none(int(g.error_code), getattr(g, "error_message", None)),
    )


def read_share_group_offsets(response: Any) -> dict[str, ShareGroupOffsets]:
    """DescribeShareGroupOffsets (v0: no lag; v1: lag) by group id."""
    out = {}
    for g in response.groups:
        partitions = [
            SharePartitionOffset(t.topic_name, p.partition_index, p.start_offset, p.leader_epoch,
                                 getattr(p, "lag", -1), error_or_none(int(p.error_code), p.error_message))
            for t in g.topics for p in t.partitions
        ]
        partitions.sort(key=lambda s: (s.topic, s.partition))
        out[g.group_id] = ShareGroupOffsets(g.group_id, partitions, error_or_none(int(g.error_code), g.error_message))
    return out


def read_alter_share_group_offsets(group_id: str, response: Any) -> ConsumerGroupTopicPartitions:
    """AlterShareGroupOffsets: the group-level error, or the partitions with their errors."""
    result = ConsumerGroupTopicPartitions(group_id, [],
                                          error_or_none(int(response.error_code), response.error_message))
    for t in response.responses:
        for p in t.partitions:
            tp = TopicPartition(t.topic_name, p.partition_index)
            tp.error = error_or_none(int(p.error_code), p.error_message)
            result.topic_partitions.append(tp)  # type: ignore[union-attr]
    return result


def read_delete_share_group_offsets(response: Any) -> tuple[KafkaError | None, dict[str, KafkaError | None]]:
    """DeleteShareGroupOffsets: the group-level error and each topic's."""
    return (error_or_none(int(response.error_code), response.error_message),
            {t.topic_name: error_or_none(int(t.error_code), t.error_message) for t in response.responses})


class GroupAdmin:
    """Mixed into ``Admin``; uses its ``_run``, ``_all_brokers`` and ``_cluster``."""

    _cluster: Cluster
    _retry_backoff_s: float

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None) -> T:  # provided by Admin
        raise NotImplementedError

    async def _all_brokers(self) -> list[int]:  # provided by Admin
        raise NotImplementedError

    # --- plumbing -------------------------------------------------------------------------------

    async def _at_coordinator(self, group_id: str, api_key: int, make: Callable[[Any, int], Any],
                              codes: Callable[[Any], Iterable[int]], **send_args: Any) -> Any:
        """Send to the group's coordinator; again (after a new lookup) while ``codes`` of the
        response name a coordinator error. Bounded by the caller's ``_run`` timeout."""
        while True:
            node = await self._cluster.coordinator(group_id, COORDINATOR_GROUP)
            response = await self._cluster.send(node, api_key, make, **send_args)
            if not _COORDINATOR_RETRY.intersection(int(c) for c in codes(response)):
                return response
            self._cluster.forget_coordinator(group_id, COORDINATOR_GROUP)
            await asyncio.sleep(self._retry_backoff_s)

    async def _coordinator_node(self, group_id: str) -> Node | None:
        dedicated = await self._cluster.coordinator(group_id, COORDINATOR_GROUP)
        address = self._cluster.nodes.get(dedicated)
        if address is None:
            return None
        return Node(COORDINATOR_NODE_BASE - dedicated, address[0], address[1])

    async def _coordinator_supports(self, group_id: str, api_key: int) -> bool:
        node = await self._cluster.coordinator(group_id, COORDINATOR_GROUP)
        return bool((await self._cluster.connection(node)).supports(api_key))

    # --- listing --------------------------------------------------------------------------------

    def list_groups(self, timeout: float | None = None) -> list[GroupListing]:
        """Every group on every broker (ListGroups), as the protocol names them."""
        async def run() -> list[GroupListing]:
            def make(m: Any, version: int) -> Any:
                return build(m.ListGroupsRequest, states_filter=(), types_filter=())

            out = []
            for node in await self._all_brokers():
                response = await self._cluster.send(node, LIST_GROUPS, make)
                if response.error_code:
                    raise BrokerResponseError(int(response.error_code))
                for g in response.groups:
                    out.append(GroupListing(g.group_id, g.protocol_type, getattr(g, "group_state", None)))
            return sorted(out, key=lambda g: g.group_id)

        return self._run(run(), timeout)

    def list_consumer_groups(self, states: Iterable[ConsumerGroupState | str] | None = None,
                             types: Iterable[ConsumerGroupType | str] | None = None,
                             timeout: float | None = None) -> ListConsumerGroupsResult:
        """Groups of every broker, optionally only those in one of ``states`` and of one of
        ``types`` (ListGroups v4 StatesFilter, v5 TypesFilter; applied here as well for older
        brokers). A broker that answers with an error adds it to ``errors``."""
        want_states = {s if isinstance(s, ConsumerGroupState) else ConsumerGroupState.parse(s) for s in states or ()}
        want_types = {t if isinstance(t, ConsumerGroupType) else ConsumerGroupType.parse(t) for t in types or ()}

        async def run() -> ListConsumerGroupsResult:
            def make(m: Any, version: int) -> Any:
                return build(m.ListGroupsRequest,
                             states_filter=tuple(s.value for s in want_states) if version >= 4 else (),
                             types_filter=tuple(t.value for t in want_types) if version >= 5 else ())

            result = ListConsumerGroupsResult()
            for node in await self._all_brokers():
                response = await self._cluster.send(node, LIST_GROUPS, make)
                if response.error_code:
                    result.errors.append(KafkaError(int(response.error_code)))
                    continue
                result.valid += read_list_groups(response, want_states, want_types)
            result.valid.sort(key=lambda g: g.group_id)
            return result

        return self._run(run(), timeout)

    # --- describing -----------------------------------------------------------------------------

    def describe_groups(self, group_ids: Iterable[str], timeout: float | None = None) -> dict[str, GroupDescription]:
        """State, protocol and members of each group as DescribeGroups answers (any protocol
        type: also groups that are not consumer groups)."""
        ids = list(group_ids)

        async def describe(group_id: str) -> GroupDescription:
            def make(m: Any, version: int) -> Any:
                return build(m.DescribeGroupsRequest, groups=(group_id,), include_authorized_operations=False)

            response = await self._at_coordinator(group_id, DESCRIBE_GROUPS, make,
                                                   lambda r: [g.error_code for g in r.groups])
            g = response.groups[0]
            return GroupDescription(g.group_id, g.group_state, g.protocol_type, g.protocol_data, _classic_members(g),
                                    error_or_none(int(g.error_code)))

        return self._run(_by_group_id(describe, ids), timeout)

    def describe_consumer_groups(self, group_ids: Iterable[str],
                                 timeout: float | None = None) -> dict[str, ConsumerGroupDescription]:
        """Each group's state, assignor, coordinator and members with their assignments.

        As Kafka's admin: ConsumerGroupDescribe (KIP-848) where the coordinator serves it, and
        DescribeGroups for a group it does not know as a consumer group (GROUP_ID_NOT_FOUND:
        a classic group, or none: then the state is DEAD)."""
        ids = list(group_ids)

        async def describe(group_id: str) -> ConsumerGroupDescription:
            coordinator = await self._coordinator_node(group_id)
            if await self._coordinator_supports(group_id, CONSUMER_GROUP_DESCRIBE):
                def make_cgd(m: Any, version: int) -> Any:
                    return build(m.ConsumerGroupDescribeRequest, group_ids=(group_id,),
                                 include_authorized_operations=False)

                response = await self._at_coordinator(group_id, CONSUMER_GROUP_DESCRIBE, make_cgd,
                                                       lambda r: [g.error_code for g in r.groups])
                g = response.groups[0]
                if int(g.error_code) != _GROUP_ID_NOT_FOUND:
                    return read_consumer_group_describe(g, coordinator)

            def make(m: Any, version: int) -> Any:
                return build(m.DescribeGroupsRequest, groups=(group_id,), include_authorized_operations=False)

            response = await self._at_coordinator(group_id, DESCRIBE_GROUPS, make,
                                                   lambda r: [g.error_code for g in r.groups])
            return read_describe_groups(response.groups[0], coordinator)

        return self._run(_by_group_id(describe, ids), timeout)

    def group_type(self, group_id: str, timeout: float | None = None) -> ConsumerGroupType | None:
        """The group's type as ListGroups names it; a group it does not list is asked for with
        ShareGroupDescribe (a broker may keep share groups out of ListGroups, as ListGroups below
        v5 must). None when neither knows the group (or the broker has no share groups)."""
        for listing in self.list_consumer_groups(timeout=timeout).valid:
            if listing.group_id == group_id:
                return listing.type
        try:
            share = self.describe_share_groups([group_id], timeout=timeout)[group_id]
        except KafkaException:  # the broker has no share groups (UNSUPPORTED_VERSION)
            return None
        if share.error is None and share.state is not ConsumerGroupState.DEAD:
            return ConsumerGroupType.SHARE
        return None

    def describe_share_groups(self, group_ids: Iterable[str],
                              timeout: float | None = None) -> dict[str, ShareGroupDescription]:
        """Each share group's state, epochs and members with their assignments
        (ShareGroupDescribe); a group that is not a share group has GROUP_ID_NOT_FOUND."""
        ids = list(group_ids)

        async def describe(group_id: str) -> ShareGroupDescription:
            def make(m: Any, version: int) -> Any:
                return build(m.ShareGroupDescribeRequest, group_ids=(group_id,), include_authorized_operations=False)

            coordinator = await self._coordinator_node(group_id)
            response = await self._at_coordinator(group_id, SHARE_GROUP_DESCRIBE, make,
                                                   lambda r: [g.error_code for g in r.groups])
            return read_share_group_describe(response.groups[0], coordinator)

        return self._run(_by_group_id(describe, ids), timeout)

    # --- deleting -------------------------------------------------------------------------------

    def delete_consumer_groups(self, group_ids: Iterable[str],
                               timeout: float | None = None) -> dict[str, KafkaError | None]:
        """DeleteGroups (any group type); per group None (deleted) or the error
        (NON_EMPTY_GROUP while it has members, GROUP_ID_NOT_FOUND)."""
        ids = list(group_ids)

        async def delete(group_id: str) -> tuple[str, KafkaError | None]:
            def make(m: Any, version: int) -> Any:
                return build(m.DeleteGroupsRequest, groups_names=(group_id,))

            response = await self._at_coordinator(group_id, DELETE_GROUPS, make,
                                                   lambda r: [g.error_code for g in r.results])
            return group_id, error_or_none(int(response.results[0].error_code))

        async def run() -> dict[str, KafkaError | None]:
            return dict(await asyncio.gather(*(delete(g) for g in ids)))

        return self._run(run(), timeout)

    # --- offsets of classic and consumer groups -------------------------------------------------

    def list_consumer_group_offsets(self, requests: Iterable[ConsumerGroupTopicPartitions],
                                    require_stable: bool = False,
                                    timeout: float | None = None) -> dict[str, ConsumerGroupTopicPartitions]:
        """Committed offsets (OffsetFetch) of each group: of the requested partitions, or every
        partition with an offset when ``topic_partitions`` is None. A partition without a
        committed offset has OFFSET_INVALID (-1001), as librdkafka reports it."""
        wanted = list(requests)

        async def fetch(request: ConsumerGroupTopicPartitions) -> ConsumerGroupTopicPartitions:
            def make(m: Any, version: int) -> Any:
                topics = None
                if request.topic_partitions is not None:
                    topics = tuple(build(m.OffsetFetchRequestTopic, name=t, partition_indexes=tuple(tp.partition for tp in ps))
                                   for t, ps in _by_topic(request.topic_partitions).items())
                return build(m.OffsetFetchRequest, group_id=request.group_id, topics=topics,
                             require_stable=require_stable)

            response = await self._at_coordinator(request.group_id, OFFSET_FETCH, make,
                                                   lambda r: [getattr(r, "error_code", 0)],
                                                   min_version=2, max_version=7)
            top = error_or_none(int(getattr(response, "error_code", 0)))
            out = []
            for t in response.topics:
                for p in t.partitions:
                    leader_epoch = getattr(p, "committed_leader_epoch", -1)
                    tp = TopicPartition(t.name, p.partition_index,
                                        p.committed_offset if p.committed_offset >= 0 else -1001, p.metadata,
                                        leader_epoch if leader_epoch >= 0 else None)
                    tp.error = error_or_none(int(p.error_code))
                    out.append(tp)
            return ConsumerGroupTopicPartitions(request.group_id, sorted(out), top)

        return self._run(_by_group_id(fetch, wanted), timeout)

    def alter_consumer_group_offsets(self, requests: Iterable[ConsumerGroupTopicPartitions],
                                     timeout: float | None = None) -> dict[str, ConsumerGroupTopicPartitions]:
        """Commit the given offsets for each group as an admin (OffsetCommit with no member and
        generation -1): the coordinator accepts it only while the group has no members
        (UNKNOWN_MEMBER_ID otherwise, per partition). The result holds per-partition errors."""
        wanted = list(requests)

        async def commit(request: ConsumerGroupTopicPartitions) -> ConsumerGroupTopicPartitions:
            partitions = list(request.topic_partitions or ())

            def make(m: Any, version: int) -> Any:
                topics = tuple(
                    build(m.OffsetCommitRequestTopic, name=t, partitions=tuple(
                        build(m.OffsetCommitRequestPartition, partition_index=tp.partition,
                              committed_offset=tp.offset, committed_metadata=tp.metadata,
                              committed_leader_epoch=tp.leader_epoch if tp.leader_epoch is not None else -1)
                        for tp in ps))
                    for t, ps in _by_topic(partitions).items())
                return build(m.OffsetCommitRequest, group_id=request.group_id,
                             generation_id_or_member_epoch=_ADMIN_GENERATION, member_id="", group_instance_id=None,
                             retention_time=_RETENTION_DEFAULT, topics=topics)

            response = await self._at_coordinator(
                request.group_id, OFFSET_COMMIT, make,
                lambda r: [p.error_code for t in r.topics for p in t.partitions], min_version=2, max_version=8)
            out = []
            for t in response.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index,
                                        next((x.offset for x in partitions
                                              if (x.topic, x.partition) == (t.name, p.partition_index)), -1001))
                    tp.error = error_or_none(int(p.error_code))
                    out.append(tp)
            return ConsumerGroupTopicPartitions(request.group_id, sorted(out))

        return self._run(_by_group_id(commit, wanted), timeout)

    def delete_consumer_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition],
                                      timeout: float | None = None) -> ConsumerGroupTopicPartitions:
        """OffsetDelete (librdkafka's DeleteConsumerGroupOffsets): remove the group's committed
        offsets of these partitions. Refused for a topic the group is subscribed to
        (GROUP_SUBSCRIBED_TO_TOPIC, per partition); a group-level error (GROUP_ID_NOT_FOUND,
        NON_EMPTY_GROUP) is the result's ``error``."""
        wanted = list(partitions)

        async def run() -> ConsumerGroupTopicPartitions:
            def make(m: Any, version: int) -> Any:
                return build(m.OffsetDeleteRequest, group_id=group_id, topics=tuple(
                    build(m.OffsetDeleteRequestTopic, name=t, partitions=tuple(
                        build(m.OffsetDeleteRequestPartition, partition_index=tp.partition) for tp in ps))
                    for t, ps in _by_topic(wanted).items()))

            response = await self._at_coordinator(group_id, OFFSET_DELETE, make, lambda r: [r.error_code])
            out = []
            for t in response.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    tp.error = error_or_none(int(p.error_code))
                    out.append(tp)
            return ConsumerGroupTopicPartitions(group_id, sorted(out), error_or_none(int(response.error_code)))

        return self._run(run(), timeout)

    # --- offsets of share groups (KIP-932) ------------------------------------------------------

    def list_share_group_offsets(self, requests: Iterable[ConsumerGroupTopicPartitions],
                                 timeout: float | None = None) -> dict[str, ShareGroupOffsets]:
        """Start offset, leader epoch and lag of each share group's partitions
        (DescribeShareGroupOffsets; ``topic_partitions`` None: every partition it has state for)."""
        wanted = list(requests)

        async def describe(request: ConsumerGroupTopicPartitions) -> ShareGroupOffsets:
            def make(m: Any, version: int) -> Any:
                topics = None
                if request.topic_partitions is not None:
                    topics = tuple(build(m.DescribeShareGroupOffsetsRequestTopic, topic_name=t,
                                         partitions=tuple(tp.partition for tp in ps))
                                   for t, ps in _by_topic(request.topic_partitions).items())
                return build(m.DescribeShareGroupOffsetsRequest, groups=(
                    build(m.DescribeShareGroupOffsetsRequestGroup, group_id=request.group_id, topics=topics),))

            response = await self._at_coordinator(request.group_id, DESCRIBE_SHARE_GROUP_OFFSETS, make,
                                                   lambda r: [g.error_code for g in r.groups])
            found = read_share_group_offsets(response)
            return found.get(request.group_id) or ShareGroupOffsets(
                request.group_id, error=KafkaError(_GROUP_ID_NOT_FOUND, "not in the response"))

        return self._run(_by_group_id(describe, wanted), timeout)

    def alter_share_group_offsets(self, request: ConsumerGroupTopicPartitions,
                                  timeout: float | None = None) -> ConsumerGroupTopicPartitions:
        """Set a share group's start offsets (AlterShareGroupOffsets): accepted only while the
        group has no members (NON_EMPTY_GROUP as the result's error otherwise)."""
        partitions = list(request.topic_partitions or ())

        async def run() -> ConsumerGroupTopicPartitions:
            def make(m: Any, version: int) -> Any:
                return build(m.AlterShareGroupOffsetsRequest, group_id=request.group_id, topics=tuple(
                    build(m.AlterShareGroupOffsetsRequestTopic, topic_name=t, partitions=tuple(
                        build(m.AlterShareGroupOffsetsRequestPartition, partition_index=tp.partition,
                              start_offset=tp.offset) for tp in ps))
                    for t, ps in _by_topic(partitions).items()))

            response = await self._at_coordinator(request.group_id, ALTER_SHARE_GROUP_OFFSETS, make,
                                                   lambda r: [r.error_code])
            return read_alter_share_group_offsets(request.group_id, response)

        return self._run(run(), timeout)

    def delete_share_group_offsets(self, group_id: str, topics: Iterable[str],
                                   timeout: float | None = None) -> tuple[KafkaError | None, dict[str, KafkaError | None]]:
        """Forget a share group's state of whole topics (DeleteShareGroupOffsets): the
        group-level error (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND) and each topic's."""
        names = list(topics)

        async def run() -> tuple[KafkaError | None, dict[str, KafkaError | None]]:
            def make(m: Any, version: int) -> Any:
                return build(m.DeleteShareGroupOffsetsRequest, group_id=group_id, topics=tuple(
                    build(m.DeleteShareGroupOffsetsRequestTopic, topic_name=t) for t in names))

            response = await self._at_coordinator(group_id, DELETE_SHARE_GROUP_OFFSETS, make,
                                                   lambda r: [r.error_code])
            return read_delete_share_group_offsets(response)

        return self._run(run(), timeout)


__all__ = ["ConsumerGroupDescription", "ConsumerGroupListing", "ConsumerGroupState", "ConsumerGroupTopicPartitions",
           "ConsumerGroupType", "GroupAdmin", "GroupDescription", "GroupListing", "ListConsumerGroupsResult",
           "MemberAssignment", "MemberDescription", "Node", "ShareGroupDescription", "ShareGroupOffsets",
           "SharePartitionOffset"]
