"""Consumer group membership (the classic protocol): JoinGroup / SyncGroup / Heartbeat /
LeaveGroup and offset commit/fetch, run on the consumer's event loop.

The consumer's ``poll`` drives rebalances (as Kafka's Java consumer does): it calls ``join`` when
``rejoin_needed`` and runs the user's callbacks itself. Between rebalances a heartbeat task keeps
the membership alive in the background and raises ``rejoin_needed`` when the coordinator says a
rebalance started, or ``assignment_lost`` when this member was fenced (unknown member, illegal
generation, or no successful heartbeat within session.timeout.ms). It also enforces
max.poll.interval.ms: a member whose application stopped polling leaves the group.

KIP-394 (MEMBER_ID_REQUIRED) and KIP-345 (group.instance.id: static members do not send
LeaveGroup on close unless asked to, ``leave(static_too=True)``, and keep their identity across
restarts) are handled here.

The membership itself is not consumer-specific: ``join_protocol`` joins with opaque member
metadata under ``protocol_type`` and returns the opaque assignment, the leader computing it with
``_assign`` (as Kafka Connect's workers use the same protocol with their own type and bytes).
``join`` is the consumer protocol on top of it; other protocols subclass and override
``_assign`` (the SQL server's query placement, ``oncestream.sql.server.assignment``).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from oncestream.client.common.cluster import COORDINATOR_GROUP, Cluster
from oncestream.client.common.errors import (
    BrokerResponseError,
    ConnectionLostError,
    KafkaError,
    KafkaException,
    RequestTimedOutError,
    error_name,
)
from oncestream.client.consumer.assignors import ASSIGNORS, MemberSubscription
from oncestream.protocol.api_keys import HEARTBEAT, JOIN_GROUP, LEAVE_GROUP, OFFSET_COMMIT, OFFSET_FETCH, SYNC_GROUP
from oncestream.protocol.codec import build
from oncestream.protocol.consumer_protocol import (
    Assignment,
    ConsumerProtocolError,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

log = logging.getLogger("oncestream.client")

PROTOCOL_TYPE = "consumer"

_COORDINATOR_MOVED = (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available)
_FENCED = (ErrorCode.unknown_member_id, ErrorCode.illegal_generation)


def _ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


class GroupMembership:
    """One member's view of its group (event loop only, except the plain attributes the
    consumer reads)."""

    def __init__(self, conf: dict[str, Any], cluster: Cluster, assignors: list[str],
                 wake_user: Callable[[], None], protocol_type: str = PROTOCOL_TYPE) -> None:
        self.protocol_type = protocol_type
        self.group_id: str = conf["group.id"]
        self.group_instance_id: str | None = conf["group.instance.id"]
        self.session_timeout_ms: int = conf["session.timeout.ms"]
        self.rebalance_timeout_ms: int = conf["max.poll.interval.ms"]
        self.heartbeat_interval_ms: int = conf["heartbeat.interval.ms"]
        self.retry_backoff_s = conf["retry.backoff.ms"] / 1000
        self.client_rack: str = conf["client.rack"]
        self._cluster = cluster
        self._assignors = assignors
        self._wake_user = wake_user
        self.member_id = ""
        self.generation_id = -1
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.rejoin_needed = True
        self.assignment_lost = False
        self.fatal_error: KafkaError | None = None
        self.max_poll_exceeded = False
        self.last_poll_monotonic = time.monotonic()
        self.assigned_partition_counts: dict[str, int] = {}
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._last_heartbeat_ok = time.monotonic()

    # --- coordinator plumbing -----------------------------------------------------------------

    async def _send(self, api_key: int, make: Callable[[Any, int], Any], *, timeout_s: float | None = None,
                    max_version: int | None = None) -> Any:
        node = await self._cluster.coordinator(self.group_id, COORDINATOR_GROUP)
        try:
            return await self._cluster.send(node, api_key, make, timeout_s=timeout_s, max_version=max_version)
        except (ConnectionLostError, RequestTimedOutError):
            self._cluster.forget_coordinator(self.group_id, COORDINATOR_GROUP)
            raise

    def _coordinator_error(self, code: int) -> bool:
        """True (after forgetting the coordinator if it moved) when ``code`` is worth a retry."""
        if code in _COORDINATOR_MOVED:
            self._cluster.forget_coordinator(self.group_id, COORDINATOR_GROUP)
            return True
        return code == ErrorCode.coordinator_load_in_progress

    # --- join / sync --------------------------------------------------------------------------

    async def join(self, topics: list[str], owned: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """Join (or rejoin) the group and return this member's assigned partitions."""
        owned_by_topic: dict[str, list[int]] = {}
        for topic, partition in owned:
            owned_by_topic.setdefault(topic, []).append(partition)

        def metadata() -> bytes:  # per attempt: the generation may have changed in between
            return encode_subscription(Subscription(
                topics=sorted(topics), owned_partitions=sorted(owned_by_topic.items()),
                generation_id=self.generation_id, rack_id=self.client_rack or None,
            ))

        def decode(data: bytes) -> Assignment:
            try:
                return decode_assignment(data)
            except ConsumerProtocolError as exc:
                raise KafkaException(KafkaError(ErrorCode.inconsistent_group_protocol,
                                                f"undecodable assignment: {exc}")) from exc

        assignment: Assignment = await self.join_protocol(metadata, decode)
        return assignment.topic_partitions()

    async def join_protocol(self, metadata: Callable[[], bytes], decode: Callable[[bytes], Any]) -> Any:
        """Join (or rejoin) the group with ``metadata()`` (called per attempt) as this member's
        metadata for every protocol name; return ``decode(assignment bytes)``. Retries
        coordinator moves and rebalances; starts heartbeats once in the group."""
        self.stop_heartbeats()
        while True:
            try:
                data = await self._join_once(metadata())
                assignment = decode(data)
            except _Rejoin as rejoin:
                if rejoin.delay_s:
                    await asyncio.sleep(rejoin.delay_s)
                continue
            except (ConnectionLostError, RequestTimedOutError, BrokerResponseError) as exc:
                if isinstance(exc, BrokerResponseError) and not exc.retriable:
                    raise KafkaException(KafkaError(exc.code, f"FindCoordinator: {exc}")) from exc
                await asyncio.sleep(self.retry_backoff_s)
                continue
            self.rejoin_needed = False
            self.assignment_lost = False
            self.max_poll_exceeded = False
            self._start_heartbeats()
            return assignment

    async def _join_once(self, metadata: bytes) -> bytes:
        member_id = self.member_id

        def make_join(m: Any, version: int) -> Any:
            protocols = tuple(build(m.JoinGroupRequestProtocol, name=name, metadata=metadata)
                              for name in self._assignors)
            return build(
                m.JoinGroupRequest,
                group_id=self.group_id,
                session_timeout=_ms(self.session_timeout_ms),
                rebalance_timeout=_ms(self.rebalance_timeout_ms),
                member_id=member_id,
                group_instance_id=self.group_instance_id,
                protocol_type=self.protocol_type,
                protocols=protocols,
                reason=None,
            )

        join_timeout_s = self.rebalance_timeout_ms / 1000 + 5
        response = await self._send(JOIN_GROUP, make_join, timeout_s=join_timeout_s)
        code = int(response.error_code)
        if code == ErrorCode.member_id_required:  # KIP-394: rejoin with the id we were given
            self.member_id = response.member_id
            raise _Rejoin(0)
        if code == ErrorCode.unknown_member_id:
            self.member_id = ""
            raise _Rejoin(0)
        if code in (ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation):
            raise _Rejoin(0)
        if self._coordinator_error(code):
            raise _Rejoin(self.retry_backoff_s)
        if code != 0:
            error = KafkaError(code, f"JoinGroup failed: {error_name(code)}",
                               fatal=code == ErrorCode.fenced_instance_id)
            if error.fatal():
                self.fatal_error = error
            raise KafkaException(error)
        self.member_id = response.member_id
        self.generation_id = response.generation_id
        self.protocol_name = response.protocol_name
        self.leader_id = response.leader
        assignments: tuple[Any, ...] = ()
        is_leader = response.leader == response.member_id and not getattr(response, "skip_assignment", False)
        if is_leader:
            computed = await self._assign(response.protocol_name, response.members)
            assignments = tuple(computed.items())
        generation = self.generation_id

        def make_sync(m: Any, version: int) -> Any:
            return build(
                m.SyncGroupRequest,
                group_id=self.group_id,
                generation_id=generation,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
                protocol_type=self.protocol_type,
                protocol_name=self.protocol_name,
                assignments=tuple(build(m.SyncGroupRequestAssignment, member_id=mid, assignment=data)
                                  for mid, data in assignments),
            )

        response = await self._send(SYNC_GROUP, make_sync, timeout_s=join_timeout_s)
        code = int(response.error_code)
        if code == ErrorCode.unknown_member_id:
            self.member_id = ""
            raise _Rejoin(0)
        if code in (ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation):
            raise _Rejoin(0)
        if self._coordinator_error(code):
            raise _Rejoin(self.retry_backoff_s)
        if code != 0:
            error = KafkaError(code, f"SyncGroup failed: {error_name(code)}",
                               fatal=code == ErrorCode.fenced_instance_id)
            if error.fatal():
                self.fatal_error = error
            raise KafkaException(error)
        return bytes(response.assignment)

    async def _assign(self, protocol: str, members: Any) -> dict[str, bytes]:
        """Leader: compute every member's assignment with the chosen assignor."""
        assign = ASSIGNORS.get(protocol)
        if assign is None:
            raise KafkaException(KafkaError(ErrorCode.inconsistent_group_protocol,
                                            f"leader has no assignor {protocol!r}"))
        subscriptions = []
        for member in members:
            try:
                sub = decode_subscription(member.metadata)
            except ConsumerProtocolError:
                sub = Subscription(topics=[])
            subscriptions.append(MemberSubscription(member.member_id, tuple(sub.topics),
                                                    getattr(member, "group_instance_id", None)))
        topics = sorted({t for s in subscriptions for t in s.topics})
        await self._cluster.refresh(topics)
        counts = {t: n for t in topics if (n := self._cluster.partition_count(t) or 0)}
        self.assigned_partition_counts = counts
        result = assign(subscriptions, counts)
        return {
            member_id: encode_assignment(Assignment(partitions=sorted(by_topic.items())))
            for member_id, by_topic in result.items()
        }

    # --- heartbeats ---------------------------------------------------------------------------

    def _start_heartbeats(self) -> None:
        self._last_heartbeat_ok = time.monotonic()
        self._heartbeat_task = asyncio.get_running_loop().create_task(self._heartbeat_loop())

    def stop_heartbeats(self) -> None:
        """Stop the background heartbeat (before a rejoin or a leave)."""
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            self._heartbeat_task = None

    async def _heartbeat_loop(self) -> None:
        interval_s = self.heartbeat_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            now = time.monotonic()
            if now - self.last_poll_monotonic > self.rebalance_timeout_ms / 1000:
                # max.poll.interval.ms exceeded: leave so the group can move on without us.
                log.warning("oncestream consumer: max.poll.interval.ms exceeded; leaving group %s",
                            self.group_id)
                self.max_poll_exceeded = True
                # This task is the one leaving: leave() must not cancel it (stop_heartbeats), or
                # the cancellation would land in the LeaveGroup await and skip _mark_lost.
                self._heartbeat_task = None
                await self._leave_quietly()
                self._mark_lost(reset_member=True)
                return
            if now - self._last_heartbeat_ok > self.session_timeout_ms / 1000:
                self._mark_lost(reset_member=False)
                return
            generation, member_id = self.generation_id, self.member_id

            # The request is built from this turn's generation (defaults bind it now).
            def make(m: Any, version: int, generation: int = generation, member_id: str = member_id) -> Any:
                return build(m.HeartbeatRequest, group_id=self.group_id, generation_id=generation,
                             member_id=member_id, group_instance_id=self.group_instance_id)

            try:
                response = await self._send(HEARTBEAT, make)
            except (ConnectionLostError, RequestTimedOutError, BrokerResponseError):
                continue
            code = int(response.error_code)
            if code == 0:
                self._last_heartbeat_ok = time.monotonic()
                continue
            if code == ErrorCode.rebalance_in_progress:
                self._last_heartbeat_ok = time.monotonic()
                self.rejoin_needed = True
                self._wake_user()
                continue  # keep heartbeating until the application rejoins
            if code in _FENCED:
                self._mark_lost(reset_member=code == ErrorCode.unknown_member_id)
                return
            if code == ErrorCode.fenced_instance_id:
                self.fatal_error = KafkaError(code, "another member uses this group.instance.id", fatal=True)
                self._wake_user()
                return
            self._coordinator_error(code)

    def _mark_lost(self, *, reset_member: bool) -> None:
        if reset_member:
            self.member_id = ""
        self.generation_id = -1
        self.assignment_lost = True
        self.rejoin_needed = True
        self._wake_user()

    async def _leave_quietly(self) -> None:
        try:
            await self.leave()
        except (ConnectionLostError, RequestTimedOutError, BrokerResponseError, KafkaException):
            pass

    async def leave(self, *, static_too: bool = False) -> None:
        """LeaveGroup. A static member (KIP-345) keeps its slot by default, so its restart takes
        the slot back without a rebalance; ``static_too`` makes it leave all the same (LeaveGroup
        v3+ naming its ``group.instance.id``, as Kafka Streams' close with leaveGroup does) when
        it stops for good and the others should take its work at once."""
        self.stop_heartbeats()
        static = self.group_instance_id is not None
        if not self.member_id or (static and not static_too):
            return
        member_id = self.member_id
        instance_id = self.group_instance_id

        def make(m: Any, version: int) -> Any:
            if version < 3:  # KIP-345 replaced the single member id by a list of members in v3
                return build(m.LeaveGroupRequest, group_id=self.group_id, member_id=member_id)
            return build(
                m.LeaveGroupRequest,
                group_id=self.group_id,
                members=(build(m.MemberIdentity, member_id=member_id, group_instance_id=instance_id,
                               reason="the consumer is leaving"),),
            )

        try:
            response = await self._send(LEAVE_GROUP, make, timeout_s=5)
            codes = [int(response.error_code), *(int(m.error_code) for m in getattr(response, "members", ()))]
            failed = [code for code in codes if code]
            if failed:
                log.info("oncestream client: LeaveGroup of %s from %s: %s", member_id, self.group_id,
                         ", ".join(error_name(code) for code in failed))
        finally:
            self.member_id = ""
            self.generation_id = -1

    # --- offsets ------------------------------------------------------------------------------

    # OffsetCommit/OffsetFetch v9+ carry a KIP-848 member epoch: the consumer protocol's
    # membership sends them.
    offset_commit_max_version = 8
    offset_fetch_max_version = 7

    async def _retry_as_member(self, codes: Iterable[int], sent_generation: int, attempt: int) -> bool:
        """Whether an OffsetCommit/OffsetFetch answered with error ``codes`` (its ``attempt``-th
        answer, from 1) is worth sending again as it is (with the identity of the moment, after
        any wait it needs); the consumer protocol retries STALE_MEMBER_EPOCH."""
        return False

    async def commit(self, offsets: list[tuple[str, int, int, str | None, int]], *,
                     in_group: bool) -> dict[tuple[str, int], int]:
        """OffsetCommit of (topic, partition, offset, metadata, leader epoch); returns the error
        code per partition (retriable coordinator errors are retried)."""
        by_topic: dict[str, list[tuple[int, int, str | None, int]]] = {}
        for topic, partition, offset, metadata, epoch in offsets:
            by_topic.setdefault(topic, []).append((partition, offset, metadata, epoch))
        attempt = 0
        while True:
            attempt += 1
            generation = self.generation_id if in_group else -1
            member_id = self.member_id if in_group else ""

            # Built from this attempt's generation (defaults bind it now, not at call time).
            def make(m: Any, version: int, generation: int = generation, member_id: str = member_id) -> Any:
                topics = tuple(
                    build(
                        m.OffsetCommitRequestTopic,
                        name=topic,
                        partitions=tuple(
                            build(m.OffsetCommitRequestPartition, partition_index=p, committed_offset=o,
                                  committed_leader_epoch=e, committed_metadata=md if md is not None else "")
                            for p, o, md, e in parts
                        ),
                    )
                    for topic, parts in by_topic.items()
                )
                return build(
                    m.OffsetCommitRequest,
                    group_id=self.group_id,
                    generation_id_or_member_epoch=generation,
                    member_id=member_id,
                    group_instance_id=self.group_instance_id if in_group else None,
                    retention_time=datetime.timedelta(milliseconds=-1),
                    topics=topics,
                )

            try:
                response = await self._send(OFFSET_COMMIT, make, max_version=self.offset_commit_max_version)
            except (ConnectionLostError, RequestTimedOutError):
                await asyncio.sleep(self.retry_backoff_s)
                continue
            except BrokerResponseError as exc:
                if exc.retriable:
                    await asyncio.sleep(self.retry_backoff_s)
                    continue
                raise
            errors = {(t.name, p.partition_index): int(p.error_code)
                      for t in response.topics for p in t.partitions}
            if any(self._coordinator_error(code) for code in errors.values()):
                await asyncio.sleep(self.retry_backoff_s)
                continue
            if in_group and await self._retry_as_member(errors.values(), generation, attempt):
                continue
            if any(code in _FENCED or code == ErrorCode.rebalance_in_progress for code in errors.values()):
                self.rejoin_needed = True
            return errors

    async def fetch_committed(
        self, partitions: list[tuple[str, int]], *, require_stable: bool
    ) -> dict[tuple[str, int], tuple[int, str | None, int]]:
        """OffsetFetch: committed (offset, metadata, error code) per partition (-1 if none).
        UNSTABLE_OFFSET_COMMIT (a transaction's offsets still pending, KIP-447) is retried."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        attempt = 0
        while True:
            attempt += 1
            generation = self.generation_id
            make = self._offset_fetch_request(by_topic, require_stable, generation)
            try:
                response = await self._send(OFFSET_FETCH, make, max_version=self.offset_fetch_max_version)
            except (ConnectionLostError, RequestTimedOutError):
                await asyncio.sleep(self.retry_backoff_s)
                continue
            except BrokerResponseError as exc:
                if exc.retriable:
                    await asyncio.sleep(self.retry_backoff_s)
                    continue
                raise
            top_error, topics = self._offset_fetch_answer(response)
            if top_error:
                if self._coordinator_error(top_error):
                    await asyncio.sleep(self.retry_backoff_s)
                    continue
                if await self._retry_as_member([top_error], generation, attempt):
                    continue
                raise KafkaException(KafkaError(top_error, f"OffsetFetch failed: {error_name(top_error)}"))
            out, retry = self.committed_of(topics)
            if retry:
                await asyncio.sleep(self.retry_backoff_s)
                continue
            return out

    def _offset_fetch_request(self, by_topic: dict[str, list[int]], require_stable: bool,
                              generation: int) -> Callable[[Any, int], Any]:
        """The OffsetFetch request builder (the classic form: the group alone, v1..v7)."""
        def make(m: Any, version: int) -> Any:
            return build(
                m.OffsetFetchRequest,
                group_id=self.group_id,
                topics=tuple(build(m.OffsetFetchRequestTopic, name=t, partition_indexes=tuple(ps))
                             for t, ps in by_topic.items()),
                require_stable=require_stable,
            )

        return make

    @staticmethod
    def _offset_fetch_answer(response: Any) -> tuple[int, Any]:
        """(top-level error code, topics) of an OffsetFetch answer (v2+ have a top-level error)."""
        if hasattr(response, "groups"):  # v8+: one group asked, one answered
            (group,) = response.groups
            return int(group.error_code), group.topics
        return int(getattr(response, "error_code", 0)), response.topics

    def committed_of(self, topics: Any) -> tuple[dict[tuple[str, int], tuple[int, str | None, int]], bool]:
        """The (offset, metadata, error code) per partition of an OffsetFetch answer's topics, and
        whether to ask again (UNSTABLE_OFFSET_COMMIT: a transaction's offsets still pending,
        KIP-447; or the coordinator moved)."""
        out: dict[tuple[str, int], tuple[int, str | None, int]] = {}
        retry = False
        for t in topics:
            for p in t.partitions:
                code = int(p.error_code)
                if code == ErrorCode.unstable_offset_commit or self._coordinator_error(code):
                    retry = True
                out[(t.name, p.partition_index)] = (p.committed_offset, p.metadata, code)
        return out, retry


class _Rejoin(Exception):
    """Internal: start the join over (after ``delay_s``)."""

    def __init__(self, delay_s: float) -> None:
        super().__init__(delay_s)
        self.delay_s = delay_s
