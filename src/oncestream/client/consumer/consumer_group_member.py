"""The I/O around :class:`~oncestream.client.consumer.consumer_membership.ConsumerMembership`:
ConsumerGroupHeartbeat requests on the consumer's event loop (``group.protocol=consumer``).

The state machine decides what to send and when; this task sends it to the group coordinator,
hands back the answer and wakes the consumer's poll when there is something for it to do
(callbacks of a reconciliation, partitions lost). It also keeps max.poll.interval.ms: a member
whose application stopped polling leaves the group (epoch -1) and rejoins on its next poll.

Offsets go through :class:`~oncestream.client.consumer.group.GroupMembership`'s OffsetCommit and
OffsetFetch, at v9 here: the commit carries the member id and member epoch, and a commit the
coordinator calls STALE_MEMBER_EPOCH (the member moved to a newer epoch meanwhile) is sent again
with the newer one, as Kafka's consumer does. ``generation_id`` is the member epoch while the
member is in the group (so ``consumer_group_metadata()`` carries it to TxnOffsetCommit) and -1
otherwise; the plain attributes the consumer reads are refreshed after every state change.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from oncestream.client.common.cluster import COORDINATOR_GROUP, Cluster
from oncestream.client.common.errors import (
    _FATAL,
    BrokerResponseError,
    ConnectionLostError,
    KafkaError,
    RequestTimedOutError,
)
from oncestream.client.consumer.consumer_membership import (
    ConsumerMembership,
    HeartbeatRequest,
    HeartbeatResponse,
    MemberState,
    Reconciliation,
)
from oncestream.client.consumer.group import GroupMembership
from oncestream.protocol.api_keys import CONSUMER_GROUP_HEARTBEAT
from oncestream.protocol.codec import build

log = logging.getLogger("oncestream.client")

_STALE_COMMIT_ATTEMPTS = 20  # commits retried on STALE_MEMBER_EPOCH before the error is returned


class ConsumerGroupMember(GroupMembership):
    """A member of a KIP-848 consumer group. Event loop: the heartbeat task. Any thread: the
    methods that take ``self._lock`` (the state machine is shared with the consumer's poll)."""

    offset_commit_max_version = 9
    offset_fetch_max_version = 9

    def __init__(self, conf: dict[str, Any], cluster: Cluster, wake_user: Callable[[], None]) -> None:
        super().__init__(conf, cluster, [], wake_user)
        self.machine = ConsumerMembership(
            group_id=self.group_id, instance_id=self.group_instance_id, rack_id=self.client_rack or None,
            rebalance_timeout_ms=self.rebalance_timeout_ms, server_assignor=conf["group.remote.assignor"],
            retry_backoff_ms=conf["retry.backoff.ms"])
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self.rejoin_needed = False  # the classic protocol's flag: never raised here
        self.errors: list[KafkaError] = []  # non-fatal heartbeat errors for the application
        self.metadata_refreshed_at = 0.0  # monotonic s: the last refresh for unknown topic ids
        self._sync()

    def _sync(self) -> None:
        """Lock held: the plain attributes the consumer and the committer read."""
        m = self.machine
        self.member_id = m.member_id
        self.generation_id = m.member_epoch if m.in_group else -1

    # --- the consumer's side (any thread) -----------------------------------------------------

    def subscribe(self, topics: list[str], regex: str | None) -> None:
        """Set the subscription; joins the group (heartbeats start) if not a member."""
        with self._lock:
            if self.machine.state is MemberState.FATAL:
                return
            self.machine.subscribe(topics, regex)
            self._sync()
        self._poke()

    def reconciliation(self, resolve: Callable[[uuid.UUID], str | None]) -> Reconciliation | None:
        """The next reconciliation step for the consumer's poll (see ConsumerMembership)."""
        with self._lock:
            step = self.machine.reconciliation(resolve)
            acknowledge = self.machine.state is MemberState.ACKNOWLEDGING
            self._sync()
        if acknowledge:
            self._poke()  # a target acknowledged without a step: its heartbeat goes now
        return step

    def reconciled(self, step: Reconciliation) -> None:
        """The consumer carried ``step`` out: acknowledge at once."""
        with self._lock:
            self.machine.reconciled(step)
            self._sync()
        self._poke()

    def lost_handled(self) -> None:
        """The consumer released everything (fenced or stale): rejoin."""
        with self._lock:
            self.machine.lost_handled()
            self._sync()
        self._poke()

    def prepare_leaving(self) -> bool:
        """Start leaving; True when on_revoke must run before :meth:`leave`."""
        with self._lock:
            leaving = self.machine.prepare_leaving()
            self._sync()
            return leaving

    @property
    def state(self) -> MemberState:
        """The member's state."""
        return self.machine.state

    def needs_poll(self) -> bool:
        """Something for the consumer's poll: callbacks to run or partitions lost."""
        return self.machine.needs_poll()

    def _poke(self) -> None:
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None and not loop.is_closed():
            loop.call_soon_threadsafe(wake.set)

    # --- heartbeats (event loop) --------------------------------------------------------------

    def start(self) -> None:
        """Event loop: start the heartbeat task (once)."""
        if self._task is None or self._task.done():
            self._loop = asyncio.get_running_loop()
            self._wake = asyncio.Event()
            self._task = self._loop.create_task(self._heartbeat_loop())

    def stop_heartbeats(self) -> None:
        """Stop the heartbeat task (closing)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _heartbeat_loop(self) -> None:
        try:
            await self._heartbeats()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a member that silently stops heartbeating would be worse
            log.exception("oncestream consumer: the heartbeat task of group %s crashed", self.group_id)
            self.fatal_error = KafkaError(_FATAL, f"the consumer group heartbeat task crashed: {exc!r}", fatal=True)
            self._wake_user()

    async def _heartbeats(self) -> None:
        wake = self._wake
        if wake is None:
            raise RuntimeError("heartbeat loop started without start()")
        while True:
            wake.clear()
            now_ms = time.monotonic() * 1000
            self._check_poll_interval()
            with self._lock:
                delay_ms = self.machine.heartbeat_delay_ms(now_ms)
                request = self.machine.build_heartbeat(now_ms) if delay_ms == 0 else None
                self._sync()
                # Sending an acknowledgement may leave a target still to reconcile.
                poll_has_work = request is not None and self.machine.needs_poll()
            if poll_has_work:
                self._wake_user()
            if request is None:
                timeout_s = None if delay_ms is None else delay_ms / 1000
                # Never sleep past the poll-interval check for long.
                timeout_s = 1.0 if timeout_s is None else min(timeout_s, 1.0)
                try:
                    await asyncio.wait_for(wake.wait(), timeout_s)
                except TimeoutError:
                    pass
                continue
            await self._send_heartbeat(request)

    def _check_poll_interval(self) -> None:
        if time.monotonic() - self.last_poll_monotonic <= self.rebalance_timeout_ms / 1000:
            return
        with self._lock:
            if self.machine.poll_timer_expired():
                log.warning("oncestream consumer: max.poll.interval.ms exceeded; leaving group %s", self.group_id)
                self.max_poll_exceeded = True
                self._sync()
                self._wake_user()

    async def _send_heartbeat(self, request: HeartbeatRequest) -> None:
        try:
            response = await self._send(CONSUMER_GROUP_HEARTBEAT, _make_heartbeat(request))
        except BrokerResponseError as exc:  # no coordinator, or no version of the API
            answer = HeartbeatResponse(error_code=exc.code, error_message=str(exc))
            if exc.code == ErrorCode.unsupported_version:
                self._apply(answer)
                return
            log.debug("ConsumerGroupHeartbeat of %s: %s", self.group_id, exc)
            self._failed()
            return
        except (ConnectionLostError, RequestTimedOutError) as exc:
            log.debug("ConsumerGroupHeartbeat of %s: %s", self.group_id, exc)
            self._failed()
            return
        assignment = None
        if response.assignment is not None:
            assignment = {t.topic_id: frozenset(int(p) for p in t.partitions)
                          for t in response.assignment.topic_partitions if t.topic_id is not None}
        self._apply(HeartbeatResponse(
            error_code=int(response.error_code), error_message=response.error_message,
            member_id=response.member_id, member_epoch=int(response.member_epoch),
            heartbeat_interval_ms=int(response.heartbeat_interval.total_seconds() * 1000),
            assignment=assignment))

    def _failed(self) -> None:
        with self._lock:
            self.machine.on_heartbeat_failure(time.monotonic() * 1000)
            self._sync()

    def _apply(self, response: HeartbeatResponse) -> None:
        with self._lock:
            outcome = self.machine.on_heartbeat_response(response, time.monotonic() * 1000)
            self._sync()
            wake = self.machine.needs_poll()
        if outcome is not None:
            if outcome.coordinator_moved:
                self._cluster.forget_coordinator(self.group_id, COORDINATOR_GROUP)
            elif outcome.fatal:
                self.fatal_error = KafkaError(outcome.code, outcome.message, fatal=True)
                wake = True
            elif outcome.code != ErrorCode.coordinator_load_in_progress:
                self.errors.append(KafkaError(outcome.code, outcome.message))
                wake = True
        if wake:
            self._wake_user()

    # --- leaving ------------------------------------------------------------------------------

    async def leave(self, *, static_too: bool = False) -> None:
        """Send the leave heartbeat (epoch -1; -2 for a static member unless ``static_too``)
        after :meth:`prepare_leaving` and the revocations; stops heartbeating."""
        self.stop_heartbeats()
        with self._lock:
            self.machine.abandon_in_flight()
            self.machine.prepare_leaving()  # no-op when the consumer already did
            self.machine.leave_ready(static_leaves_for_good=static_too)
            request = None
            if self.machine.state is MemberState.LEAVING:
                request = self.machine.build_heartbeat(time.monotonic() * 1000)
            self._sync()
        if request is None:
            return
        try:
            response = await self._send(CONSUMER_GROUP_HEARTBEAT, _make_heartbeat(request), timeout_s=5)
            if response.error_code:
                log.info("oncestream client: leaving %s: %s", self.group_id, response.error_code.name)
        finally:
            with self._lock:
                self.machine.abandon_in_flight()

    # --- offsets ------------------------------------------------------------------------------

    def _offset_fetch_request(self, by_topic: dict[str, list[int]], require_stable: bool,
                              generation: int) -> Callable[[Any, int], Any]:
        """OffsetFetch v9 naming the member and its epoch while it is in the group (as Kafka's
        consumer sends it); the classic form to a broker without v8 (no KIP-848 either)."""
        classic = super()._offset_fetch_request(by_topic, require_stable, generation)
        member_id = self.member_id if generation >= 0 else None

        def make(m: Any, version: int) -> Any:
            if version < 8:
                return classic(m, version)
            named = version >= 9 and member_id is not None
            group = build(m.OffsetFetchRequestGroup, group_id=self.group_id,
                          member_id=member_id if named else None, member_epoch=generation if named else -1,
                          topics=tuple(build(m.OffsetFetchRequestTopics, name=t, partition_indexes=tuple(ps))
                                       for t, ps in by_topic.items()))
            return build(m.OffsetFetchRequest, groups=(group,), require_stable=require_stable)

        return make

    async def _retry_as_member(self, codes: Iterable[int], sent_generation: int, attempt: int) -> bool:
        """STALE_MEMBER_EPOCH: the request carried an epoch older than the coordinator's; send
        it again with the member's newer epoch (after the next heartbeat brings it, if need be)."""
        if not any(code == ErrorCode.stale_member_epoch for code in codes):
            return False
        if attempt > _STALE_COMMIT_ATTEMPTS or self.generation_id < 0:
            return False
        if self.generation_id == sent_generation:
            await asyncio.sleep(self.retry_backoff_s)
        return self.generation_id >= 0


def _make_heartbeat(request: HeartbeatRequest) -> Callable[[Any, int], Any]:
    def make(m: Any, version: int) -> Any:
        owned = None if request.owned is None else tuple(
            build(m.TopicPartitions, topic_id=tid, partitions=partitions) for tid, partitions in request.owned)
        member_id = request.member_id
        if version == 0 and request.member_epoch == 0:
            member_id = ""  # v0: the coordinator makes up the id of a joining member
        fields: dict[str, Any] = {
            "group_id": request.group_id,
            "member_id": member_id,
            "member_epoch": request.member_epoch,
            "instance_id": request.instance_id,
            "rack_id": request.rack_id,
            "rebalance_timeout": datetime.timedelta(milliseconds=request.rebalance_timeout_ms),
            "subscribed_topic_names": request.subscribed_topic_names,
            "server_assignor": request.server_assignor,
            "topic_partitions": owned,
        }
        if version >= 1:
            fields["subscribed_topic_regex"] = request.subscribed_topic_regex
        return build(m.ConsumerGroupHeartbeatRequest, **fields)

    return make
