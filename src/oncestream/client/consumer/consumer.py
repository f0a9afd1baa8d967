"""``Consumer``: confluent-kafka's consumer API over our fetcher and group membership.

Threads: the caller's thread runs ``poll``/``consume`` (record decoding, rebalance callbacks,
commit callbacks); the background event loop runs the fetcher, heartbeats and every request.
The fast path of ``poll`` returns the next already-decoded message with two attribute reads; the
position of the partition being read is materialized from the decoded list only when someone
needs it (commit, position, seek, rebalance), not per message. Sending commits and fetching
committed offsets is :class:`~oncestream.client.consumer.offset_commits.OffsetCommitter`'s job; the
consumer decides which offsets (positions or stored offsets) and when.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from oncestream.client.common.cluster import Cluster
from oncestream.client.common.config import resolve
from oncestream.client.common.errors import (
    _AUTO_OFFSET_RESET,
    _FATAL,
    _INVALID_ARG,
    _MAX_POLL_EXCEEDED,
    _STATE,
    BrokerResponseError,
    ConnectionLostError,
    KafkaError,
    KafkaException,
    RequestTimedOutError,
    error_name,
    local_error,
)
from oncestream.client.common.io_thread import IoThread
from oncestream.client.common.list_offsets import EARLIEST, LATEST, list_offsets
from oncestream.client.common.message import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    OFFSET_STORED,
    ConsumerGroupMetadata,
    Message,
    TopicPartition,
)
from oncestream.client.consumer import incremental_rebalance
from oncestream.client.consumer.assignors import parse_strategies
from oncestream.client.consumer.consumer_group_member import ConsumerGroupMember
from oncestream.client.consumer.fetch_decoder import decode_partition
from oncestream.client.consumer.fetcher import CompletedFetch, Fetcher, PartitionState
from oncestream.client.consumer.group import GroupMembership
from oncestream.client.consumer.offset_commits import OffsetCommitter, require_group

TP = tuple[str, int]
log = logging.getLogger("oncestream.client")

RebalanceCallback = Callable[["Consumer", list[TopicPartition]], Any]


class Consumer:
    """A Kafka consumer configured with a dict of Kafka property names."""

    def __init__(self, conf: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        merged = dict(conf or {})
        merged.update(kwargs)
        self._conf = c = resolve(merged, "consumer")
        try:
            self._strategies = parse_strategies(c["partition.assignment.strategy"])
        except ValueError as exc:
            raise KafkaException(KafkaError(_INVALID_ARG, str(exc))) from None
        self._group_id: str | None = c["group.id"]
        self._read_committed = c["isolation.level"] == "read_committed"
        self._reset_policy: str = c["auto.offset.reset"]
        self._auto_commit = bool(c["enable.auto.commit"]) and self._group_id is not None
        self._auto_store = bool(c["enable.auto.offset.store"])
        self._auto_commit_interval_s = c["auto.commit.interval.ms"] / 1000
        self._on_commit = c["on_commit"]
        # librdkafka bounds close() (its final commit included) by about session.timeout.ms.
        self._commit_timeout_s = c["session.timeout.ms"] / 1000
        self._error_cb = c["error_cb"]
        self._check_crcs = c["check.crcs"]
        self._retry_backoff_s = c["retry.backoff.ms"] / 1000
        self._cluster = Cluster.from_config(c)
        # Shared with the fetcher; structure changes happen under _state_lock.
        self._state_lock = threading.Lock()
        self._partitions: dict[TP, PartitionState] = {}
        self._completed: collections.deque[CompletedFetch] = collections.deque()
        self._cond = threading.Condition()
        self._fetcher = Fetcher(c, self._cluster, self._partitions, self._state_lock, self._completed,
                                self._notify)
        self._group: GroupMembership | None = None
        if self._group_id is not None and c["group.protocol"] == "consumer":
            self._group = ConsumerGroupMember(c, self._cluster, self._notify)  # KIP-848
        elif self._group_id is not None:
            self._group = GroupMembership(c, self._cluster, self._strategies, self._notify)
        # subscription state (user thread)
        self._subscription: list[str] | None = None
        self._patterns: list[re.Pattern[str]] = []
        self._on_assign: RebalanceCallback | None = None
        self._on_revoke: RebalanceCallback | None = None
        self._on_lost: RebalanceCallback | None = None
        self._in_rebalance_callback = False
        self._join_future: concurrent.futures.Future[tuple[list[str], list[tuple[str, int]]]] | None = None
        self._assign_called_in_callback: list[TopicPartition] | None = None
        self._subscribed_counts: dict[str, int] = {}
        self._metadata_seen = 0
        # decoded records being handed out (user thread)
        self._rec_list: list[Message] = []
        self._rec_pos = 0
        self._rec_len = 0
        self._rec_state: PartitionState | None = None
        self._rec_epoch = -1
        self._rec_next_offset = -1
        self._attention = True  # something besides handing out records needs poll's slow path
        self._stored: dict[TP, tuple[int, str | None]] = {}
        self._next_auto_commit = time.monotonic() + self._auto_commit_interval_s
        self._pending_errors: collections.deque[KafkaError] = collections.deque()
        self._fetch_crash_reported = False
        self._closed = False
        self._io = IoThread("oncestream-consumer")
        self._committer = OffsetCommitter(self._io, self._on_commit, self._notify)
        self._io.run(self._start(), 10)

    async def _start(self) -> None:
        self._cluster.start()
        self._fetcher.start()
        if self._auto_commit:
            asyncio.get_running_loop().create_task(self._auto_commit_ticker())

    async def _auto_commit_ticker(self) -> None:
        """Send poll's fast path into its slow path once per auto.commit.interval.ms."""
        while not self._closed:
            await asyncio.sleep(self._auto_commit_interval_s)
            self._notify()

    def _notify(self) -> None:
        """Any thread: something for poll to look at (data, rebalance, commit result)."""
        self._attention = True
        with self._cond:
            self._cond.notify_all()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("Consumer closed")

    # --- subscription / assignment ------------------------------------------------------------

    def subscribe(self, topics: list[str], on_assign: RebalanceCallback | None = None,
                  on_revoke: RebalanceCallback | None = None, on_lost: RebalanceCallback | None = None) -> None:
        """Join the consumer group for ``topics`` (names, or regexes starting with ``^``)."""
        self._check_open()
        if self._group is None:
            raise KafkaException(KafkaError(_INVALID_ARG, "subscribe() requires group.id"))
        if isinstance(topics, str):
            raise TypeError("topics must be a list")
        self._subscription = [t for t in topics if not t.startswith("^")]
        self._patterns = [re.compile(t) for t in topics if t.startswith("^")]
        self._cluster.want_all_topics = bool(self._patterns)
        self._on_assign, self._on_revoke, self._on_lost = on_assign, on_revoke, on_lost
        self._group.rejoin_needed = True
        self._attention = True
        self._io.call_soon(self._cluster.add_topics, list(self._subscription))
        if isinstance(self._group, ConsumerGroupMember):
            # The coordinator matches the regexes (RE2, as Kafka); librdkafka sends them joined so.
            self._group.subscribe(self._subscription, "|".join(t for t in topics if t.startswith("^")) or None)
            self._io.call_soon(self._group.start)

    def unsubscribe(self) -> None:
        """Leave the group and drop the assignment."""
        self._check_open()
        if self._subscription is None:
            return
        self._cancel_join()
        self._release_for_leave()
        self._subscription = None
        self._patterns = []
        if self._group is not None:
            try:
                self._io.run(self._group.leave(), 10)
            except (TimeoutError, ConnectionLostError, RequestTimedOutError, BrokerResponseError):
                pass

    def _release_for_leave(self) -> None:
        if isinstance(self._group, ConsumerGroupMember):
            incremental_rebalance.release_for_leave(self, self._group)
        else:
            self._revoke_all(lost=False)

    def _cancel_join(self) -> None:
        if self._join_future is not None:
            self._join_future.cancel()
            self._join_future = None

    def assign(self, partitions: list[TopicPartition]) -> None:
        """Set the assignment to exactly ``partitions`` (offsets in them are start positions)."""
        self._check_open()
        if self._in_rebalance_callback:
            self._assign_called_in_callback = list(partitions)
        self._sync_position()
        wanted = {(tp.topic, tp.partition): tp for tp in partitions}
        with self._state_lock:
            for key in list(self._partitions):
                if key not in wanted:
                    del self._partitions[key]
            for key, tp in wanted.items():
                state = self._partitions.get(key)
                if state is None:
                    state = PartitionState(*key)
                    self._partitions[key] = state
                self._set_start(state, tp.offset)
        self._drop_buffered()
        self._after_assignment_change([t for t, _ in wanted])

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        """Add partitions to the assignment."""
        self._check_open()
        if self._in_rebalance_callback:
            self._assign_called_in_callback = list(partitions)
        with self._state_lock:
            for tp in partitions:
                key = (tp.topic, tp.partition)
                state = self._partitions.get(key)
                if state is None:
                    state = PartitionState(*key)
                    self._partitions[key] = state
                self._set_start(state, tp.offset)
        self._after_assignment_change([tp.topic for tp in partitions])

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        """Remove partitions from the assignment."""
        self._check_open()
        self._sync_position()
        with self._state_lock:
            removed = [self._partitions.pop((tp.topic, tp.partition), None) for tp in partitions]
        if any(state is self._rec_state for state in removed if state is not None):
            self._drop_buffered()  # records of partitions kept stay buffered: no pause for them
        self._io.call_soon(self._fetcher.wakeup)

    def unassign(self) -> None:
        """Drop the whole assignment."""
        self.assign([])

    def assignment(self) -> list[TopicPartition]:
        """The current assignment."""
        return [TopicPartition(t, p) for t, p in sorted(self._partitions)]

    def _set_start(self, state: PartitionState, offset: int) -> None:
        """Lock held. Start position from an assign()/seek() offset (special values resolved later)."""
        state.epoch += 1
        if offset is not None and offset >= 0:
            state.position = state.fetch_position = offset
        else:
            state.position = state.fetch_position = None
            state.reset_error = offset if offset is not None else OFFSET_INVALID

    def _after_assignment_change(self, topics: list[str]) -> None:
        self._attention = True
        self._io.call_soon(self._cluster.add_topics, topics)
        self._io.call_soon(self._fetcher.wakeup)

    def _drop_buffered(self) -> None:
        """Forget decoded-but-unreturned records (after a seek or assignment change)."""
        self._rec_list, self._rec_pos, self._rec_len, self._rec_state = [], 0, 0, None

    # --- positions ----------------------------------------------------------------------------

    def _sync_position(self) -> None:
        """Write the position of the partition being read back from the decoded list."""
        state = self._rec_state
        if state is None or state.epoch != self._rec_epoch:
            return
        if self._rec_pos >= self._rec_len:
            if self._rec_next_offset > (state.position or -1):
                state.position = self._rec_next_offset
        elif self._rec_pos > 0:
            state.position = self._rec_list[self._rec_pos - 1]._offset + 1

    def _resolve_positions(self, timeout_s: float | None) -> None:
        """Give every assigned partition without a position one: committed offset (group),
        else auto.offset.reset (OFFSET_BEGINNING / OFFSET_END requests are honoured directly)."""
        missing = [(k, s) for k, s in list(self._partitions.items()) if s.position is None]
        if not missing:
            return
        resets: dict[TP, int] = {}
        need_committed = [k for k, s in missing if s.reset_error in (OFFSET_STORED, OFFSET_INVALID)]
        committed: dict[TP, tuple[int, str | None, int]] = {}
        if need_committed and self._group is not None:
            committed = self._io.run(
                self._group.fetch_committed(need_committed, require_stable=self._read_committed), timeout_s)
        for key, state in missing:
            if state.reset_error == OFFSET_BEGINNING:
                resets[key] = EARLIEST
            elif state.reset_error == OFFSET_END:
                resets[key] = LATEST
            elif key in committed and committed[key][0] >= 0:
                with self._state_lock:
                    if state.position is None:
                        state.position = state.fetch_position = committed[key][0]
                        state.epoch += 1
            elif self._reset_policy == "earliest":
                resets[key] = EARLIEST
            elif self._reset_policy == "latest":
                resets[key] = LATEST
            else:
                state.paused = True  # nothing to do without a position; surface the error
                self._pending_errors.append(KafkaError(
                    _AUTO_OFFSET_RESET, f"no committed offset for {key[0]}[{key[1]}] and "
                    "auto.offset.reset=error"))
        if resets:
            answers = self._io.run(
                list_offsets(self._cluster, resets, read_committed=self._read_committed,
                             retry_backoff_s=self._retry_backoff_s), timeout_s)
            with self._state_lock:
                for key, (offset, _ts, code) in answers.items():
                    reset = self._partitions.get(key)
                    if reset is None or reset.position is not None:
                        continue
                    if code == 0 and offset >= 0:
                        reset.position = reset.fetch_position = offset
                        reset.epoch += 1
                    else:
                        self._pending_errors.append(KafkaError(code, f"ListOffsets for {key}: {error_name(code)}"))
        self._io.call_soon(self._fetcher.wakeup)

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Next offset to be returned per partition (OFFSET_INVALID when not known yet)."""
        self._sync_position()
        out = []
        for tp in partitions:
            state = self._partitions.get((tp.topic, tp.partition))
            pos = state.position if state is not None and state.position is not None else OFFSET_INVALID
            out.append(TopicPartition(tp.topic, tp.partition, pos))
        return out

    def seek(self, partition: TopicPartition) -> None:
        """Continue reading ``partition`` at ``partition.offset`` (or OFFSET_BEGINNING/END)."""
        self._check_open()
        key = (partition.topic, partition.partition)
        state = self._partitions.get(key)
        if state is None:
            raise KafkaException(KafkaError(_STATE, f"{key[0]}[{key[1]}] is not assigned"))
        self._sync_position()
        with self._state_lock:
            self._set_start(state, partition.offset)
        if self._rec_state is state:
            self._drop_buffered()
        self._attention = True
        self._io.call_soon(self._fetcher.wakeup)

    def pause(self, partitions: list[TopicPartition]) -> None:
        """Stop fetching these partitions (buffered records of them are dropped)."""
        self._sync_position()
        for tp in partitions:
            state = self._partitions.get((tp.topic, tp.partition))
            if state is not None:
                with self._state_lock:
                    state.paused = True
                    state.epoch += 1
                    state.fetch_position = state.position
                if self._rec_state is state:
                    self._drop_buffered()

    def resume(self, partitions: list[TopicPartition]) -> None:
        """Fetch these partitions again."""
        for tp in partitions:
            state = self._partitions.get((tp.topic, tp.partition))
            if state is not None:
                state.paused = False
        self._io.call_soon(self._fetcher.wakeup)

    # --- polling ------------------------------------------------------------------------------

    def poll(self, timeout: float | None = None) -> Message | None:
        """Next message (or an error event as a Message with ``error()`` set), None on timeout.
        ``timeout`` in seconds; None or negative waits indefinitely."""
        pos = self._rec_pos
        if pos < self._rec_len and not self._attention:
            self._rec_pos = pos + 1
            return self._rec_list[pos]
        batch = self._poll(1, timeout)
        return batch[0] if batch else None

    def consume(self, num_messages: int = 1, timeout: float | None = None) -> list[Message]:
        """Up to ``num_messages`` messages, waiting up to ``timeout`` seconds for the first."""
        if num_messages < 1:
            raise ValueError("num_messages must be >= 1")
        pos = self._rec_pos
        if pos < self._rec_len and not self._attention:
            end = min(self._rec_len, pos + num_messages)
            self._rec_pos = end
            return self._rec_list[pos:end]
        return self._poll(num_messages, timeout)

    def _poll(self, num: int, timeout: float | None) -> list[Message]:
        self._check_open()
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        out: list[Message] = []
        while True:
            self._attention = False
            if self._group is not None:
                self._group.last_poll_monotonic = time.monotonic()
            error = self._housekeeping(deadline)
            if error is not None:
                return [Message(None, -1, OFFSET_INVALID, 0, 0, None, None, None, error)]
            self._take_records(num - len(out), out)
            if out:
                return out
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return out
            with self._cond:
                if not self._completed and not self._attention:
                    self._cond.wait(0.2 if remaining is None else min(remaining, 0.2))

    def _take_records(self, wanted: int, out: list[Message]) -> None:
        while wanted > 0:
            pos = self._rec_pos
            if pos < self._rec_len:
                state = self._rec_state
                if state is not None and state.epoch == self._rec_epoch and not state.paused:
                    end = min(self._rec_len, pos + wanted)
                    out.extend(self._rec_list[pos:end])
                    wanted -= end - pos
                    self._rec_pos = end
                    continue
                self._drop_buffered()
            self._sync_position()
            if not self._next_completed():
                return

    def _next_completed(self) -> bool:
        """Decode the next completed fetch into the record list; False when none is queued."""
        while self._completed:
            fetch = self._completed.popleft()
            state = fetch.state
            with self._state_lock:
                state.queued -= 1
            self._fetcher.consumed_bytes += len(fetch.records)
            self._io.call_soon(self._fetcher.wakeup)
            key = (state.topic, state.partition)
            if self._partitions.get(key) is not state or state.epoch != fetch.epoch or \
                    state.position is None or state.paused:
                continue
            if fetch.error_code:
                self._handle_fetch_error(state, fetch.error_code)
                continue
            if fetch.fetch_offset != state.position:
                # Data fetched for a position the application has moved away from.
                with self._state_lock:
                    state.epoch += 1
                    state.fetch_position = state.position
                continue
            items, next_offset = self._decode_fetch(fetch, state)
            self._rec_list = items
            self._rec_pos = 0
            self._rec_len = len(items)
            self._rec_state = state
            self._rec_epoch = state.epoch
            self._rec_next_offset = next_offset
            if not self._rec_len:
                self._sync_position()  # e.g. only aborted or control batches: move past them
                continue
            return True
        return False

    def _decode_fetch(self, fetch: CompletedFetch, state: PartitionState) -> tuple[list[Any], int]:
        """The items one completed fetch hands out (here its messages) and the offset after its
        complete batches (-1: none). ``client.batch_reader.ColumnConsumer`` decodes to columns instead."""
        result = decode_partition(fetch.records, state.topic, state.partition, state.position or 0,
                                  read_committed=self._read_committed, aborted=fetch.aborted or (),
                                  check_crcs=self._check_crcs)
        return result.messages, result.next_offset

    def _handle_fetch_error(self, state: PartitionState, code: int) -> None:
        if code == ErrorCode.offset_out_of_range:
            with self._state_lock:
                state.epoch += 1
                state.position = state.fetch_position = None
                state.reset_error = OFFSET_INVALID if self._reset_policy != "error" else 0
            if self._reset_policy == "error":
                self._pending_errors.append(KafkaError(
                    _AUTO_OFFSET_RESET, f"offset out of range for {state.topic}[{state.partition}]"))
            else:
                # Out of range: the committed offset is no use, reset by policy.
                state.reset_error = OFFSET_BEGINNING if self._reset_policy == "earliest" else OFFSET_END
            self._attention = True
        else:
            self._pending_errors.append(KafkaError(code, f"fetch {state.topic}[{state.partition}]: {error_name(code)}"))

    def _housekeeping(self, deadline: float | None) -> KafkaError | None:
        """Everything poll does besides returning records; returns an error event to deliver."""
        if self._fetcher.crash_error is not None and not self._fetch_crash_reported:
            self._fetch_crash_reported = True  # nothing is fetched any more: say so, once
            self._pending_errors.append(local_error(
                _FATAL, f"the consumer's fetch task crashed: {self._fetcher.crash_error!r}", fatal=True))
        if self._pending_errors:
            return self._pending_errors.popleft()
        group = self._group
        if group is not None:
            if group.fatal_error is not None:
                raise KafkaException(group.fatal_error)
            if group.max_poll_exceeded:
                group.max_poll_exceeded = False
                self._pending_errors.append(KafkaError(
                    _MAX_POLL_EXCEEDED, "max.poll.interval.ms exceeded: the consumer left the group and rejoins"))
            if self._subscription is not None and isinstance(group, ConsumerGroupMember):
                incremental_rebalance.poll_step(self, group)
            elif self._subscription is not None:
                self._check_subscription_metadata()
                if group.rejoin_needed or self._join_future is not None:
                    self._rebalance(deadline)
        self._committer.serve_results()
        if self._auto_commit and time.monotonic() >= self._next_auto_commit:
            self._next_auto_commit = time.monotonic() + self._auto_commit_interval_s
            self._commit_positions(asynchronous=True)
        if any(s.position is None and not s.paused for s in list(self._partitions.values())):
            remaining = None if deadline is None else max(0.5, deadline - time.monotonic())
            try:
                self._resolve_positions(remaining)
            except TimeoutError:
                pass
        if self._pending_errors:
            return self._pending_errors.popleft()
        return None

    # --- rebalancing --------------------------------------------------------------------------

    def _subscribed_topics(self) -> list[str]:
        topics = set(self._subscription or ())
        if self._patterns:
            for name in list(self._cluster.topics):
                if any(p.match(name) for p in self._patterns) and not name.startswith("__"):
                    topics.add(name)
        return sorted(topics)

    def _check_subscription_metadata(self) -> None:
        """Rejoin when the partition count of a subscribed topic changed (or a pattern matches a
        new topic): the leader must redistribute."""
        version = self._cluster.metadata_version
        if version == self._metadata_seen:
            return
        self._metadata_seen = version
        if self._group is None or self._group.rejoin_needed:
            return
        counts = {t: n for t in self._subscribed_topics() if (n := self._cluster.partition_count(t))}
        known = {t: n for t, n in self._subscribed_counts.items() if n}
        if known and counts != known:
            self._group.rejoin_needed = True
        self._subscribed_counts = counts

    def _rebalance(self, deadline: float | None) -> None:
        """Drive a rebalance without blocking past ``deadline``: the first call gives up the
        assignment and starts the join in the background; calls after it pick up the result
        (as Kafka's consumer does across polls), so one thread can poll several members."""
        group = self._require_group()
        if self._join_future is None:
            self._revoke_all(lost=group.assignment_lost)
            self._join_future = self._io.submit(self._join())
            self._join_future.add_done_callback(lambda _f: self._notify())
        remaining = 0.0 if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            topics, assigned = self._join_future.result(timeout=min(remaining, 0.2) if deadline else 0.2)
        except concurrent.futures.TimeoutError:
            return
        finally:
            if self._join_future is not None and self._join_future.done():
                self._join_future = None
        self._subscribed_counts = {t: n for t in topics if (n := self._cluster.partition_count(t))}
        self._metadata_seen = self._cluster.metadata_version
        partitions = [TopicPartition(t, p) for t, p in sorted(assigned)]
        if self._on_assign is not None:
            self._assign_called_in_callback = None
            self._in_rebalance_callback = True
            try:
                self._on_assign(self, partitions)
            finally:
                self._in_rebalance_callback = False
            if self._assign_called_in_callback is None:
                self.assign(partitions)
        else:
            self.assign(partitions)

    async def _join(self) -> tuple[list[str], list[tuple[str, int]]]:
        group = self._require_group()
        if self._patterns:
            try:
                await self._cluster.refresh(all_topics=True)
            except (ConnectionLostError, RequestTimedOutError, BrokerResponseError):
                pass
        try:
            # Partition counts must be known before the join completes: they are the baseline
            # that later metadata is compared with to decide whether the group must rebalance.
            await self._cluster.refresh(self._subscription or [])
        except (ConnectionLostError, RequestTimedOutError, BrokerResponseError):
            pass
        topics = self._subscribed_topics()
        return topics, await group.join(topics, [])

    def _revoke_all(self, *, lost: bool) -> None:
        """Give up the current assignment (eager protocol): commit, callback, unassign."""
        current = self.assignment()
        if not current and self._on_revoke is None:
            return
        self._sync_position()
        if current and self._auto_commit and not lost:
            self._final_commit(self._commit_timeout_s)
        callback = (self._on_lost or self._on_revoke) if lost else self._on_revoke
        if callback is not None and current:
            self._in_rebalance_callback = True
            try:
                callback(self, current)
            finally:
                self._in_rebalance_callback = False
        with self._state_lock:
            self._partitions.clear()
        self._drop_buffered()
        self._completed.clear()

    # --- commits ------------------------------------------------------------------------------

    def _require_group(self) -> GroupMembership:
        return require_group(self._group)

    def _offsets_to_commit(self) -> list[TopicPartition]:
        self._sync_position()
        if self._auto_store:
            return [TopicPartition(s.topic, s.partition, s.position)
                    for s in list(self._partitions.values()) if s.position is not None]
        return [TopicPartition(t, p, o, md) for (t, p), (o, md) in self._stored.items()]

    def _commit_positions(self, *, asynchronous: bool) -> list[TopicPartition] | None:
        offsets = self._offsets_to_commit()
        if not offsets:
            return [] if not asynchronous else None
        return self._commit(offsets, asynchronous)

    def _final_commit(self, timeout_s: float) -> None:
        """The auto-commit of an assignment given up (rebalance, close); never raises (see
        :meth:`OffsetCommitter.final_commit`)."""
        offsets = self._offsets_to_commit()
        if not offsets:
            return
        self._committer.final_commit(self._group, offsets, timeout_s, subscribed=self._subscription is not None)

    def commit(self, message: Message | None = None, offsets: list[TopicPartition] | None = None,
               asynchronous: bool = True) -> list[TopicPartition] | None:
        """Commit ``message``'s offset + 1, or ``offsets``, or the current positions.
        Synchronous commits return the partitions (with ``error`` set on failures) and raise
        KafkaException if the whole commit failed; asynchronous ones report to ``on_commit``."""
        self._check_open()
        if self._group is None:
            raise KafkaException(KafkaError(_INVALID_ARG, "commit() requires group.id"))
        if message is not None and offsets is not None:
            raise KafkaException(KafkaError(_INVALID_ARG, "give message or offsets, not both"))
        if message is not None:
            topic = message.topic()
            if topic is None:
                raise KafkaException(KafkaError(_INVALID_ARG, "an error event has no offset to commit"))
            offsets = [TopicPartition(topic, message.partition(), message.offset() + 1)]
        if offsets is None:
            return self._commit_positions(asynchronous=asynchronous)
        return self._commit(list(offsets), asynchronous)

    def _commit(self, offsets: list[TopicPartition], asynchronous: bool,
                timeout_s: float = 60.0) -> list[TopicPartition] | None:
        return self._committer.commit(self._group, offsets, asynchronous, subscribed=self._subscription is not None,
                                      timeout_s=timeout_s)

    def store_offsets(self, message: Message | None = None, offsets: list[TopicPartition] | None = None) -> None:
        """Store offsets to be committed (with enable.auto.offset.store=false)."""
        if message is not None:
            topic = message.topic()
            if topic is None:
                raise KafkaException(KafkaError(_INVALID_ARG, "an error event has no offset to store"))
            self._stored[(topic, message.partition())] = (message.offset() + 1, None)
        for tp in offsets or ():
            self._stored[(tp.topic, tp.partition)] = (tp.offset, tp.metadata)

    def committed(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        """Committed offsets (OFFSET_INVALID where none)."""
        self._check_open()
        if self._group is None:
            raise KafkaException(KafkaError(_INVALID_ARG, "committed() requires group.id"))
        timeout_s = None if timeout is None or timeout < 0 else timeout
        return self._committer.committed(self._group, partitions, timeout_s, require_stable=self._read_committed)

    # --- metadata queries ---------------------------------------------------------------------

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float | None = None,
                              cached: bool = False) -> tuple[int, int]:
        """(low, high) watermarks; ``cached`` answers from the last fetch response."""
        key = (partition.topic, partition.partition)
        if cached:
            state = self._partitions.get(key)
            if state is None:
                return (OFFSET_INVALID, OFFSET_INVALID)
            return (state.log_start_offset, state.high_watermark)
        timeout_s = None if timeout is None or timeout < 0 else timeout
        low = self._io.run(list_offsets(self._cluster, {key: EARLIEST}, read_committed=False,
                                        retry_backoff_s=self._retry_backoff_s), timeout_s)[key]
        high = self._io.run(list_offsets(self._cluster, {key: LATEST}, read_committed=False,
                                         retry_backoff_s=self._retry_backoff_s), timeout_s)[key]
        for _offset, _ts, code in (low, high):
            if code:
                raise KafkaException(KafkaError(code))
        return (low[0], high[0])

    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        """For each partition (offset field = timestamp ms), the earliest offset at or after it."""
        stamps = {(tp.topic, tp.partition): tp.offset for tp in partitions}
        timeout_s = None if timeout is None or timeout < 0 else timeout
        answers = self._io.run(list_offsets(self._cluster, stamps, read_committed=self._read_committed,
                                            retry_backoff_s=self._retry_backoff_s), timeout_s)
        out = []
        for tp in partitions:
            offset, _ts, code = answers[(tp.topic, tp.partition)]
            r = TopicPartition(tp.topic, tp.partition, offset)
            if code:
                r.error = KafkaError(code)
            out.append(r)
        return out

    def list_topics(self, topic: str | None = None, timeout: float | None = None) -> dict[str, int]:
        """Topic name -> partition count."""
        timeout_s = None if timeout is None or timeout < 0 else timeout
        self._io.run(self._cluster.refresh([topic] if topic else None, all_topics=topic is None), timeout_s)
        return {name: len(info.leaders) for name, info in self._cluster.topics.items() if info.error == 0}

    def consumer_group_metadata(self) -> ConsumerGroupMetadata:
        """Group id, generation, member id and instance id for send_offsets_to_transaction."""
        if self._group is None:
            raise KafkaException(KafkaError(_INVALID_ARG, "no group.id configured"))
        return ConsumerGroupMetadata(self._group.group_id, self._group.generation_id,
                                     self._group.member_id, self._group.group_instance_id)

    def memberid(self) -> str | None:
        """This member's id in its group (None before joining)."""
        return self._group.member_id or None if self._group is not None else None

    # --- closing ------------------------------------------------------------------------------

    def close(self) -> None:
        """Commit (if auto commit), leave the group (dynamic members), stop the thread. As with
        librdkafka, a failed final commit is reported to ``on_commit`` and close() still closes;
        the commit and the LeaveGroup together take at most about ``session.timeout.ms``."""
        if self._closed:
            return
        deadline = time.monotonic() + self._commit_timeout_s
        try:
            if self._subscription is not None and self._group is not None:
                self._cancel_join()
                try:
                    self._release_for_leave()
                    # Leaving only spares the group a session timeout: never wait past the budget.
                    self._io.run(self._group.leave(), max(0.5, min(10.0, deadline - time.monotonic())))
                except (TimeoutError, ConnectionLostError, RequestTimedOutError, BrokerResponseError,
                        KafkaException):
                    pass
            elif self._auto_commit and self._partitions:
                self._final_commit(self._commit_timeout_s)
            self._committer.serve_results()
        finally:
            self._closed = True
            self._io.shut_down(self._shutdown())

    async def _shutdown(self) -> None:
        if self._group is not None:
            self._group.stop_heartbeats()
        await self._fetcher.close()
        await self._cluster.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
