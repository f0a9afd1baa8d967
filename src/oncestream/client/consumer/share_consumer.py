"""``ShareConsumer``: confluent-kafka's share consumer API (KIP-932 queues) over our connections.

The bookkeeping is sans-io and lives beside this module: which records the consumer holds and
what it will acknowledge (share_acks.py), the share session with each broker (share_session.py),
the member's heartbeat state (share_membership.py) and the records of a ShareFetch answer
(share_records.py). This module is the I/O glue: the caller's thread runs ``poll``,
``acknowledge`` and the commits; the client's event loop (``IoThread``) runs the heartbeat, the
ShareFetch requests (carrying piggy-backed acknowledgements) and the ShareAcknowledge requests.

Records are fetched only when the consumer's buffer is empty and the application is polling
(as Kafka's ShareConsumerImpl does): every record fetched is locked for this member, so reading
ahead would hold locks others could use.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import logging
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from oncestream.client.common.cluster import RETRY_AFTER_METADATA, Cluster
from oncestream.client.common.config import resolve
from oncestream.client.common.errors import (
    _TIMED_OUT,
    _TRANSPORT,
    BrokerResponseError,
    ConnectionLostError,
    KafkaError,
    KafkaException,
    RequestTimedOutError,
    error_name,
)
from oncestream.client.common.io_thread import IoThread
from oncestream.client.common.message import Message, TopicPartition
from oncestream.client.consumer.share_acks import (
    AckBatch,
    AcknowledgeType,
    InFlightRecords,
    NotInFlightError,
    ack_batches,
)
from oncestream.client.consumer.share_membership import COORDINATOR_MOVED, MemberState, ShareMembership
from oncestream.client.consumer.share_records import IllegalStateException, Messages, ShareMessage, acquired_records
from oncestream.client.consumer.share_session import SessionState, ShareSession
from oncestream.protocol.api_keys import METADATA, SHARE_ACKNOWLEDGE, SHARE_FETCH, SHARE_GROUP_HEARTBEAT
from oncestream.protocol.codec import build

TP = tuple[str, int]
T = TypeVar("T")
log = logging.getLogger("oncestream.client")

_ZERO_UUID = uuid.UUID(int=0)
_COORDINATOR_GROUP = 0
_LEADER_ERRORS = RETRY_AFTER_METADATA | {int(ErrorCode.unknown_topic_id)}
_RETRY_BACKOFF_S = 0.2

CommitCallback = Callable[[dict[TopicPartition, set[int]], KafkaException | None], Any]

__all__ = ["AcknowledgeType", "IllegalStateException", "Messages", "ShareConsumer", "ShareMessage"]


class _NodeSession:
    """A share session plus the lock that keeps one of its requests in flight at a time."""

    def __init__(self) -> None:
        self.session = ShareSession()
        self.lock = asyncio.Lock()


class ShareConsumer:
    """A share-group consumer configured with Kafka property names (``group.id`` required).

    ``share.acknowledgement.mode``: ``implicit`` (default) accepts the records of a poll on the
    next poll or commit; ``explicit`` needs ``acknowledge`` for every record before the next poll.
    """

    def __init__(self, conf: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        merged = dict(conf or {})
        merged.update(kwargs)
        self._conf = c = resolve(merged, "share_consumer")
        if not c["group.id"]:
            raise ValueError("ShareConsumer requires group.id")  # confluent-kafka's exception
        self._group_id: str = c["group.id"]
        self._explicit = c["share.acknowledgement.mode"] == "explicit"
        self._max_poll_records = max(1, int(c["max.poll.records"]))
        self._check_crcs = bool(c["check.crcs"])
        self._retry_backoff_s = c["retry.backoff.ms"] / 1000
        self._cluster = Cluster.from_config(c)
        self._membership = ShareMembership(self._group_id, c["client.rack"] or None)
        # Shared between threads under _lock: held records, the buffer poll hands out from,
        # results for the application.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._records = InFlightRecords()
        self._buffer: collections.deque[ShareMessage] = collections.deque()
        self._record_node: dict[TP, int] = {}  # the node whose session acquired a partition's records
        self._callbacks: collections.deque[tuple[dict[TopicPartition, set[int]], KafkaException | None]] = (
            collections.deque())
        self._errors: collections.deque[KafkaError] = collections.deque()
        self._commit_cb: CommitCallback | None = None
        self._in_callback = False
        # Event-loop state.
        self._sessions: dict[int, _NodeSession] = {}
        self._topic_ids: dict[str, uuid.UUID] = {}
        self._topic_names: dict[uuid.UUID, str] = {}
        self._assigned: set[TP] = set()
        self._assignment_seen = -1
        self._subscription: list[str] | None = None
        self._fetch_wanted: asyncio.Event | None = None
        self._heartbeat_now: asyncio.Event | None = None
        self._heartbeat_lock: asyncio.Lock = None  # type: ignore[assignment]  # made on the loop
        self._stopping = False
        self._fetch_enabled = True  # False from close()/unsubscribe() until the next subscribe()
        self._poll_waiting = False  # poll() waits for records: a fetch that got none is repeated
        self._closed = False
        self._io = IoThread("oncestream-share-consumer")
        self._tasks: list[asyncio.Task[None]] = []
        self._io.run(self._start(), 10)

    async def _start(self) -> None:
        self._fetch_wanted = asyncio.Event()
        self._heartbeat_now = asyncio.Event()
        self._heartbeat_lock = asyncio.Lock()
        self._cluster.start()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._heartbeat_loop()), loop.create_task(self._fetch_loop())]

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateException("the share consumer is closed")
        if self._in_callback:
            raise IllegalStateException("not allowed from the acknowledgement commit callback")

    # --- subscription -------------------------------------------------------------------------

    def subscribe(self, topics: list[str]) -> None:
        """Subscribe to ``topics`` (replaces the subscription; an empty list unsubscribes)."""
        self._check_open()
        if isinstance(topics, str):
            raise TypeError("topics must be a list of topic names")
        names = list(topics)
        if any(not t for t in names) or len(set(names)) != len(names):
            raise ValueError("topic names must be non-empty and distinct")
        if not names:
            self.unsubscribe()
            return
        self._subscription = names
        self._io.call_soon(self._apply_subscription, names)

    def _apply_subscription(self, names: list[str]) -> None:
        self._fetch_enabled = True
        self._membership.subscribe(names)
        self._cluster.add_topics(names)
        self._wake_heartbeat()

    def subscription(self) -> list[str]:
        """The subscribed topics."""
        self._check_open()
        return list(self._subscription or [])

    def unsubscribe(self) -> None:
        """Give back every record not acknowledged and leave the group."""
        self._check_open()
        if self._subscription is None:
            return
        self._subscription = None
        self._submit_acknowledgements()
        self._give_back_and_leave(self._cluster.request_timeout_s)

    # --- polling ------------------------------------------------------------------------------

    def poll(self, timeout: float = -1) -> Messages:
        """Up to ``max.poll.records`` messages (an empty batch when none came within ``timeout``
        seconds; -1 waits indefinitely). Implicit mode accepts the previous poll's records
        first; explicit mode requires all of them acknowledged."""
        self._check_open()
        if not self._subscription:
            raise IllegalStateException("poll() needs a subscription")
        with self._lock:
            if self._explicit:
                left = self._records.unacknowledged_delivered()
                if left:
                    (topic, partition), offset = left[0]
                    raise IllegalStateException(
                        f"{len(left)} records of the previous poll are not acknowledged "
                        f"(first {topic}[{partition}]@{offset}); explicit mode needs every one")
            else:
                self._records.accept_delivered()
            self._records.submit()
        self._serve_callbacks()
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        out: list[Message] = []
        with self._cond:
            while True:
                if self._errors:
                    error = self._errors.popleft()
                    out.append(Message(None, -1, -1, 0, 0, None, None, error=error))
                    break
                if self._membership.fatal_error is not None:
                    code, text = self._membership.fatal_error
                    raise KafkaException(KafkaError(code, f"share group heartbeat failed: {error_name(code)} {text}",
                                                    fatal=True))
                if self._buffer:
                    while self._buffer and len(out) < self._max_poll_records:
                        message = self._buffer.popleft()
                        self._records.handed_out((message._info[0] or "", message._info[1]), message._offset)
                        out.append(message)
                    break
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                self._poll_waiting = True
                self._io.call_soon(self._want_fetch)
                try:
                    self._cond.wait(0.5 if remaining is None else min(remaining, 0.5))
                finally:
                    self._poll_waiting = False
        if not out or not self._buffer:
            self._io.call_soon(self._want_fetch)
        self._serve_callbacks()
        return Messages(out)

    def _want_fetch(self) -> None:
        if self._fetch_wanted is not None:
            self._fetch_wanted.set()

    # --- acknowledging ------------------------------------------------------------------------

    def acknowledge(self, message: Message, ack_type: int = AcknowledgeType.ACCEPT) -> None:
        """Explicit mode: record how the broker treats ``message`` (sent with the next poll or
        commit)."""
        if not isinstance(message, Message):
            raise TypeError("message must be a Message returned by poll()")
        topic = message.topic()
        if topic is None:
            raise ValueError("an error event has no record to acknowledge")
        self.acknowledge_offset(topic, message.partition(), message.offset(), ack_type)

    def acknowledge_offset(self, topic: str, partition: int, offset: int,
                           ack_type: int = AcknowledgeType.ACCEPT) -> None:
        """Explicit mode: acknowledge a record by its coordinates."""
        self._check_open()
        if not isinstance(topic, str) or not isinstance(partition, int) or not isinstance(offset, int):
            raise TypeError("topic must be a str, partition and offset integers")
        if not isinstance(ack_type, int):
            raise TypeError("ack_type must be an AcknowledgeType")
        # The order of the checks is librdkafka's: which error a wrong call gets is part of the API.
        if partition < 0 or offset < 0:
            raise ValueError("partition and offset must not be negative")
        if not self._explicit:
            raise IllegalStateException("acknowledge() needs share.acknowledgement.mode=explicit")
        if ack_type not in (1, 2, 3):
            raise ValueError(f"acknowledge type {ack_type} is not ACCEPT, RELEASE or REJECT")
        with self._lock:
            try:
                self._records.acknowledge((topic, partition), offset, int(ack_type))
            except NotInFlightError as exc:
                raise IllegalStateException(str(exc)) from None

    def set_acknowledgement_commit_callback(self, callback: CommitCallback | None) -> None:
        """``callback(offsets, exception)`` after the broker answers acknowledgements; called
        from poll, the commits and close on the application's thread."""
        self._check_open()
        if callback is not None and not callable(callback):
            raise TypeError("callback must be callable or None")
        self._commit_cb = callback

    def commit_sync(self, timeout: float = 60) -> dict[TopicPartition, KafkaException | None]:
        """Send pending acknowledgements (ShareAcknowledge) and wait for the answers: per
        partition None (applied) or a KafkaException. Empty when nothing was pending."""
        self._check_open()
        if not isinstance(timeout, (int, float)):
            raise TypeError("timeout must be a number of seconds")
        self._submit_acknowledgements()
        timeout_s = None if timeout < 0 else float(timeout)
        try:
            results = self._io.run(self._shielded(self._acknowledge_all(close=False)), timeout_s)
        except TimeoutError:
            raise KafkaException(KafkaError(_TIMED_OUT, f"commit_sync did not finish within {timeout} s")) from None
        finally:
            self._serve_callbacks()
        return results

    @staticmethod
    async def _shielded(work: Coroutine[Any, Any, T]) -> T:
        """``work`` goes on when the caller stops waiting for it (a commit's answer still reaches
        the callback): cancelling it mid-request would leave a share session with a request in
        flight forever."""
        return await asyncio.shield(work)

    def commit_async(self) -> None:
        """Send pending acknowledgements without waiting; results go to the commit callback."""
        self._check_open()
        self._submit_acknowledgements()
        self._io.submit(self._acknowledge_all(close=False))
        self._serve_callbacks()

    def _submit_acknowledgements(self) -> None:
        """Before a commit or close: the last poll's records are accepted (implicit mode) and
        every acknowledgement is submitted."""
        with self._lock:
            if not self._explicit:
                self._records.accept_delivered(commit=True)
            self._records.submit(commit=True)

    def _serve_callbacks(self) -> None:
        """Run the commit callback for every answered acknowledgement (application thread)."""
        while True:
            with self._lock:
                if not self._callbacks:
                    return
                offsets, error = self._callbacks.popleft()
            if self._commit_cb is not None:
                self._in_callback = True
                try:
                    self._commit_cb(offsets, error)
                finally:
                    self._in_callback = False

    # --- closing ------------------------------------------------------------------------------

    def close(self) -> None:
        """Accept (implicit mode) the last poll's records, release every record not
        acknowledged, close the share sessions, leave the group and stop."""
        if self._closed:
            return
        try:
            if self._subscription is not None:
                self._submit_acknowledgements()
                self._give_back_and_leave(self._cluster.request_timeout_s)
            self._serve_callbacks()
        finally:
            self._closed = True
            self._io.shut_down(self._shutdown())

    def _give_back_and_leave(self, timeout_s: float) -> None:
        # No ShareFetch may start from here on: it would carry the releases below and acquire
        # the same records again in one go.
        self._fetch_enabled = False
        with self._lock:
            self._records.release(None)
            self._buffer.clear()
        try:
            self._io.run(self._shielded(self._close_sessions_and_leave()), timeout_s)
        except TimeoutError:
            log.warning("share consumer: closing the share sessions took over %.0f s", timeout_s)

    async def _close_sessions_and_leave(self) -> None:
        self._fetch_enabled = False
        self._assigned = set()
        await self._acknowledge_all(close=True)
        async with self._heartbeat_lock:
            if self._membership.leave():
                await self._heartbeat()

    async def _shutdown(self) -> None:
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._cluster.close()

    def __enter__(self) -> ShareConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def memberid(self) -> str:
        """This member's id (made by the client, as Kafka 4's clients do)."""
        return self._membership.member_id

    # --- heartbeat (event loop) ---------------------------------------------------------------

    def _wake_heartbeat(self) -> None:
        if self._heartbeat_now is not None:
            self._heartbeat_now.set()

    async def _heartbeat_loop(self) -> None:
        assert self._heartbeat_now is not None
        while not self._stopping:
            m = self._membership
            if m.state in (MemberState.LEFT, MemberState.FAILED) or (
                    m.state is MemberState.JOINING and self._subscription is None):
                await self._wait(self._heartbeat_now, None)
                continue
            try:
                async with self._heartbeat_lock:
                    if m.state in (MemberState.LEFT, MemberState.FAILED):
                        continue  # close() or unsubscribe() left meanwhile
                    retry = await self._heartbeat()
                state = self._member_state()  # the heartbeat's answer moved it
                if state is MemberState.FAILED:
                    self._notify()
                if state is MemberState.STABLE and m.assignment_version != self._assignment_seen:
                    await self._apply_assignment()
                elif state is MemberState.JOINING and self._assigned:
                    await self._apply_assignment()
            except Exception as exc:  # surface anything to poll, keep the membership going
                log.exception("share consumer: heartbeat failed")
                self._report(KafkaError(_TRANSPORT, f"share group heartbeat failed: {exc!r}"))
                state, retry = self._member_state(), True
            if state is MemberState.LEAVING:
                continue
            delay = self._retry_backoff_s if retry else m.heartbeat_interval_ms / 1000
            await self._wait(self._heartbeat_now, delay)

    def _member_state(self) -> MemberState:
        return self._membership.state

    async def _heartbeat(self) -> bool:
        """One ShareGroupHeartbeat; True when it should be retried after a backoff."""
        m = self._membership
        fields = m.next_heartbeat()

        def make(mod: Any, _version: int) -> Any:
            return build(mod.ShareGroupHeartbeatRequest, group_id=self._group_id, member_id=fields.member_id,
                         member_epoch=fields.member_epoch, rack_id=fields.rack_id,
                         subscribed_topic_names=fields.subscribed_topic_names)

        try:
            node = await self._cluster.coordinator(self._group_id, _COORDINATOR_GROUP)
            response = await self._cluster.send(node, SHARE_GROUP_HEARTBEAT, make)
        except BrokerResponseError as exc:  # FindCoordinator errors, an unsupported API
            if exc.code in (int(ErrorCode.coordinator_not_available), int(ErrorCode.coordinator_load_in_progress),
                            int(ErrorCode.not_coordinator)):
                m.on_transport_error()
                return True
            m.on_response(exc.code, 0, 0, None, str(exc))
            return False
        except (ConnectionLostError, RequestTimedOutError):
            self._cluster.forget_coordinator(self._group_id, _COORDINATOR_GROUP)
            m.on_transport_error()
            return True
        code = int(response.error_code)
        if code in COORDINATOR_MOVED:
            self._cluster.forget_coordinator(self._group_id, _COORDINATOR_GROUP)
        assignment = None
        if response.assignment is not None:
            assignment = {t.topic_id: sorted(int(p) for p in t.partitions)
                          for t in response.assignment.topic_partitions if t.topic_id is not None}
        return m.on_response(code, int(response.member_epoch), int(response.heartbeat_interval.total_seconds() * 1000),
                             assignment, response.error_message)

    async def _apply_assignment(self) -> None:
        """Map the assignment's topic ids to names; release the records of partitions that left."""
        m = self._membership
        version = m.assignment_version
        unknown = [t for t in m.assignment if t not in self._topic_names]
        if unknown:
            try:
                await self._refresh_topic_ids(self._subscription or [])
            except (ConnectionLostError, RequestTimedOutError, BrokerResponseError):
                return  # tried again after the next heartbeat
        assigned = {(self._topic_names[t], p) for t, parts in m.assignment.items() if t in self._topic_names
                    for p in parts}
        if any(t not in self._topic_names for t in m.assignment):
            return
        removed = self._assigned - assigned
        self._assigned = assigned
        self._assignment_seen = version
        if removed:
            with self._lock:
                self._records.release(removed, delivered=False)
                self._buffer = collections.deque(x for x in self._buffer if (x._info[0], x._info[1]) not in removed)
        self._want_fetch()

    async def _refresh_topic_ids(self, topics: list[str]) -> None:
        def make(mod: Any, _version: int) -> Any:
            return build(mod.MetadataRequest,
                         topics=tuple(build(mod.MetadataRequestTopic, name=t, topic_id=_ZERO_UUID) for t in topics),
                         allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                         include_topic_authorized_operations=False)

        response = await self._cluster.send(None, METADATA, make, min_version=10)
        self._cluster.apply_metadata(response)
        for t in response.topics:
            if t.error_code == 0 and t.name is not None and t.topic_id is not None and t.topic_id != _ZERO_UUID:
                self._topic_ids[t.name] = t.topic_id
                self._topic_names[t.topic_id] = t.name

    # --- fetching (event loop) ----------------------------------------------------------------

    async def _fetch_loop(self) -> None:
        assert self._fetch_wanted is not None
        while not self._stopping:
            await self._wait(self._fetch_wanted, None)
            self._fetch_wanted.clear()
            with self._lock:
                busy = bool(self._buffer)
            if busy or not self._fetch_enabled or not self._assigned or (
                    self._membership.state is not MemberState.STABLE):
                continue
            try:
                got = await self._fetch_round()
            except Exception as exc:  # surface anything to poll, keep fetching
                log.exception("share consumer: fetch round failed")
                self._report(KafkaError(_TRANSPORT, f"share fetch failed: {exc!r}"))
                got = False
            if not got and self._poll_waiting:
                self._fetch_wanted.set()  # nothing came and poll is still waiting: fetch again
                await asyncio.sleep(0.01)

    async def _fetch_round(self) -> bool:
        """One ShareFetch to every leader of an assigned partition (or a partition with acks to
        send); True when some records arrived."""
        by_node: dict[int, set[TP]] = collections.defaultdict(set)
        for topic, partition in sorted(self._assigned):
            if topic not in self._topic_ids:
                await self._refresh_topic_ids(self._subscription or [topic])
            try:
                leader = await self._cluster.leader(topic, partition, retry_backoff_s=self._retry_backoff_s,
                                                    attempts=2)
            except (BrokerResponseError, ConnectionLostError, RequestTimedOutError):
                continue
            by_node[leader].add((topic, partition))
        with self._lock:
            for tp in self._records.partitions():
                node = self._record_node.get(tp)
                if node is not None and self._records.has_acks([tp]):
                    by_node[node].add(tp)
        if not by_node:
            return False
        results = await asyncio.gather(*(self._fetch_node(n, tps) for n, tps in by_node.items()))
        return any(results)

    def _node_session(self, node: int) -> _NodeSession:
        ns = self._sessions.get(node)
        if ns is None:
            ns = self._sessions[node] = _NodeSession()
        return ns

    async def _fetch_node(self, node: int, tps: set[TP]) -> bool:
        ns = self._node_session(node)
        async with ns.lock:
            if not self._fetch_enabled:
                return False  # closing or unsubscribing meanwhile
            session = ns.session
            if session.state is SessionState.CLOSED:
                ns = self._sessions[node] = _NodeSession()
                session = ns.session
            plan = session.plan_fetch(tps)
            with self._lock:
                acks = self._records.take_acks([tp for tp in tps if self._record_node.get(tp) == node])
            if acks and not plan.acks_allowed:
                # An opening request cannot carry them and the session that acquired them is
                # gone: the broker redelivers those records when their locks expire.
                self._ack_results(acks, {tp: int(ErrorCode.invalid_share_session_epoch) for tp in acks})
                acks = {}
            forgotten = collections.defaultdict(list)
            for topic, partition in plan.forgotten:
                if topic in self._topic_ids:
                    forgotten[self._topic_ids[topic]].append(partition)
            c = self._conf

            def make(mod: Any, version: int) -> Any:
                topics: dict[uuid.UUID, list[Any]] = collections.defaultdict(list)
                for topic, partition in sorted(tps):
                    batches = acks.get((topic, partition), {})
                    topics[self._topic_ids[topic]].append(build(
                        mod.FetchPartition, partition_index=partition,
                        acknowledgement_batches=tuple(_wire_batch(mod, b) for b in ack_batches(batches))))
                extra = {}
                if version >= 2:
                    extra["share_acquire_mode"] = 1 if c["share.acquire.mode"] == "record_limit" else 0
                return build(
                    mod.ShareFetchRequest, group_id=self._group_id, member_id=self._membership.member_id,
                    share_session_epoch=plan.epoch, max_wait=datetime.timedelta(milliseconds=c["fetch.wait.max.ms"]),
                    min_bytes=c["fetch.min.bytes"], max_bytes=c["fetch.max.bytes"], max_records=self._max_poll_records,
                    batch_size=self._max_poll_records,
                    topics=tuple(build(mod.FetchTopic, topic_id=tid, partitions=tuple(parts))
                                 for tid, parts in topics.items()),
                    forgotten_topics_data=tuple(build(mod.ForgottenTopic, topic_id=tid, partitions=tuple(parts))
                                                for tid, parts in forgotten.items()),
                    **extra)

            try:
                response = await self._cluster.send(
                    node, SHARE_FETCH, make, timeout_s=self._cluster.request_timeout_s + c["fetch.wait.max.ms"] / 1000)
            except (ConnectionLostError, RequestTimedOutError, BrokerResponseError) as exc:
                session.on_transport_error()
                code = exc.code if isinstance(exc, BrokerResponseError) else _TRANSPORT
                self._ack_results(acks, dict.fromkeys(acks, code))
                self._session_lost(node, code)
                if isinstance(exc, BrokerResponseError):
                    self._report(KafkaError(code, f"ShareFetch: {exc}"))
                return False
            top = int(response.error_code)
            session.on_response(top)
            if top:
                self._ack_results(acks, dict.fromkeys(acks, top))
                if session.state is SessionState.NEW:
                    self._session_lost(node, top)
                if top not in (int(ErrorCode.share_session_not_found), int(ErrorCode.invalid_share_session_epoch)):
                    self._report(KafkaError(top, f"ShareFetch: {error_name(top)} {response.error_message or ''}"))
                return False
            return self._take_fetch_response(node, response, acks)

    def _take_fetch_response(self, node: int, response: Any, acks: dict[TP, dict[int, int]]) -> bool:
        got = False
        ack_codes: dict[TP, int] = {}
        for topic_response in response.responses:
            topic = self._topic_names.get(topic_response.topic_id)
            if topic is None:
                continue
            for p in topic_response.partitions:
                tp = (topic, int(p.partition_index))
                if tp in acks:
                    ack_codes[tp] = int(p.acknowledge_error_code)
                code = int(p.error_code)
                if code:
                    if code in _LEADER_ERRORS:
                        self._cluster.forget_leader(*tp)
                    else:
                        self._report(KafkaError(code, f"ShareFetch {topic}[{tp[1]}]: {error_name(code)} "
                                                      f"{p.error_message or ''}"))
                    continue
                acquired = [(int(a.first_offset), int(a.last_offset), int(a.delivery_count))
                            for a in p.acquired_records]
                if not acquired:
                    continue
                messages, gaps = acquired_records(p.records, topic, tp[1], acquired, check_crcs=self._check_crcs)
                with self._cond:
                    self._record_node[tp] = node
                    self._records.acquired(tp, [m._offset for m in messages], gaps)
                    if tp not in self._assigned or not self._fetch_enabled:
                        # Revoked (or closing) while the fetch was out: give them back.
                        self._records.release([tp], delivered=False)
                        continue
                    self._buffer.extend(messages)
                    if messages:
                        got = True
                        self._cond.notify_all()
        for tp in acks:
            ack_codes.setdefault(tp, 0)
        self._ack_results(acks, ack_codes)
        return got

    def _session_lost(self, node: int, code: int) -> None:
        """The session with ``node`` is gone, and with it this member's hold on the records it
        acquired: buffered ones are dropped, and the ones the application has (acknowledged or
        not) are reported to the commit callback as failed with ``code``: they will be delivered
        again, and acknowledging them now raises IllegalStateException (no longer in flight)."""
        with self._cond:
            lost = [tp for tp, n in self._record_node.items() if n == node]
            for tp, offsets in self._records.handed_out_offsets(lost).items():
                self._callbacks.append(({TopicPartition(*tp): offsets}, _exception(code)))
            self._records.forget(lost)
            gone = set(lost)
            self._buffer = collections.deque(m for m in self._buffer if (m._info[0], m._info[1]) not in gone)
            for tp in lost:
                del self._record_node[tp]

    # --- ShareAcknowledge (event loop) --------------------------------------------------------

    async def _acknowledge_all(self, *, close: bool) -> dict[TopicPartition, KafkaException | None]:
        """Send every pending acknowledgement in a ShareAcknowledge per node (closing the
        sessions when ``close``); per partition None or the error."""
        with self._lock:
            nodes = {self._record_node[tp] for tp in self._records.partitions() if tp in self._record_node}
        if close:
            nodes |= set(self._sessions)
        results: dict[TopicPartition, KafkaException | None] = {}
        for part in await asyncio.gather(*(self._acknowledge_node(n, close=close) for n in sorted(nodes))):
            results.update(part)
        return results

    async def _acknowledge_node(self, node: int, *, close: bool) -> dict[TopicPartition, KafkaException | None]:
        ns = self._node_session(node)
        async with ns.lock:
            session = ns.session
            with self._lock:
                mine = [tp for tp, n in self._record_node.items() if n == node]
                if close:  # a fetch answered since close() released the rest: give those back too
                    self._records.release(mine)
                    self._buffer = collections.deque(
                        m for m in self._buffer if (m._info[0], m._info[1]) not in set(mine))
                acks = self._records.take_acks(mine, commit=True)
            if close and not session.close():
                self._ack_results(acks, dict.fromkeys(acks, int(ErrorCode.invalid_share_session_epoch)))
                return _result_map(acks, int(ErrorCode.invalid_share_session_epoch))
            if not acks and not close:
                return {}
            if not session.can_acknowledge():
                self._ack_results(acks, dict.fromkeys(acks, int(ErrorCode.invalid_share_session_epoch)))
                return _result_map(acks, int(ErrorCode.invalid_share_session_epoch))
            epoch = session.plan_acknowledge()

            def make(mod: Any, _version: int) -> Any:
                topics: dict[uuid.UUID, list[Any]] = collections.defaultdict(list)
                for (topic, partition), offsets in sorted(acks.items()):
                    topics[self._topic_ids[topic]].append(build(
                        mod.AcknowledgePartition, partition_index=partition,
                        acknowledgement_batches=tuple(_wire_batch(mod, b) for b in ack_batches(offsets))))
                return build(mod.ShareAcknowledgeRequest, group_id=self._group_id,
                             member_id=self._membership.member_id, share_session_epoch=epoch,
                             topics=tuple(build(mod.AcknowledgeTopic, topic_id=tid, partitions=tuple(parts))
                                          for tid, parts in topics.items()))

            try:
                response = await self._cluster.send(node, SHARE_ACKNOWLEDGE, make)
            except (ConnectionLostError, RequestTimedOutError, BrokerResponseError) as exc:
                session.on_transport_error()
                code = exc.code if isinstance(exc, BrokerResponseError) else _TRANSPORT
                self._ack_results(acks, dict.fromkeys(acks, code))
                self._session_lost(node, code)
                return _result_map(acks, code)
            top = int(response.error_code)
            session.on_response(top)
            codes: dict[TP, int] = dict.fromkeys(acks, top)
            if not top:
                for topic_response in response.responses:
                    topic = self._topic_names.get(topic_response.topic_id)
                    for p in topic_response.partitions:
                        tp = (topic or "", int(p.partition_index))
                        if tp in codes:
                            codes[tp] = int(p.error_code)
            elif session.state is SessionState.NEW:
                self._session_lost(node, top)
            self._ack_results(acks, codes)
            out: dict[TopicPartition, KafkaException | None] = {}
            for tp, code in codes.items():
                out[TopicPartition(*tp)] = _exception(code)
            return out

    def _ack_results(self, acks: Mapping[TP, Mapping[int, int]], codes: Mapping[TP, int]) -> None:
        """Answered acknowledgements: no longer held; queue the outcome for the callback (of
        the records the application received: ``InFlightRecords.reportable``)."""
        if not acks:
            return
        with self._cond:
            shown = self._records.reportable(acks)
            self._records.finished(acks)
            applied = {TopicPartition(*tp): offsets for tp, offsets in shown.items() if not codes.get(tp, 0)}
            if applied:
                self._callbacks.append((applied, None))
            for tp, offsets in shown.items():
                code = codes.get(tp, 0)
                if code:
                    self._callbacks.append(({TopicPartition(*tp): offsets}, _exception(code)))
            self._cond.notify_all()

    # --- helpers ------------------------------------------------------------------------------

    def _report(self, error: KafkaError) -> None:
        with self._cond:
            self._errors.append(error)
            self._cond.notify_all()

    def _notify(self) -> None:
        with self._cond:
            self._cond.notify_all()

    @staticmethod
    async def _wait(event: asyncio.Event, timeout_s: float | None) -> None:
        try:
            async with asyncio.timeout(timeout_s):
                await event.wait()
        except TimeoutError:
            pass
        event.clear()


def _wire_batch(mod: Any, batch: AckBatch) -> Any:
    return build(mod.AcknowledgementBatch, first_offset=batch.first_offset, last_offset=batch.last_offset,
                 acknowledge_types=batch.types)


def _exception(code: int) -> KafkaException | None:
    if not code:
        return None
    return KafkaException(KafkaError(code, f"acknowledgement failed: {error_name(code)}"))


def _result_map(acks: Mapping[TP, Any], code: int) -> dict[TopicPartition, KafkaException | None]:
    return {TopicPartition(*tp): _exception(code) for tp in acks}

