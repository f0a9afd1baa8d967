"""The producer's sender: an asyncio task that drains ready batches into pipelined produce requests
and settles their responses (success, retry in order, epoch bump, or failure).

Pipelining: up to ``max.in.flight.requests.per.connection`` produce requests per broker, each
carrying at most one batch per partition, so a partition has at most that many batches in
flight (Kafka allows 5 with idempotence).

Ordering with retries (idempotence): sequence numbers are assigned when a batch is first sent and
kept across retries. When a batch must be retried its partition is muted; once every in-flight
batch of the partition has come back, the failed ones are put back at the front of the queue in
sequence order and the partition is unmuted, so the broker sees them in order again (it discards
the ones it already has as duplicates, returning their original offsets).

KIP-360: OUT_OF_ORDER_SEQUENCE_NUMBER / UNKNOWN_PRODUCER_ID on the first unacknowledged batch
of a partition means the broker lost or never had our sequence state. An idempotent producer then
waits for everything in flight to return, bumps its epoch with InitProducerId(current id, epoch)
(the broker answers with a fresh producer id), resets every partition's sequence to 0 and re-sends
the unacknowledged batches under the new identity. A failed batch that had a sequence (expired,
rejected) leaves a gap, which needs the same bump. A transactional producer cannot bump in the
middle of a transaction: the error makes the transaction abortable, and the bump happens after
``abort_transaction`` (see transactions.py).
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from oncestream.async_wait import wait_event
from oncestream.client.common.cluster import Cluster
from oncestream.client.common.errors import (
    _FAIL,
    _FATAL,
    _MSG_TIMED_OUT,
    _PURGE_QUEUE,
    _TIMED_OUT,
    _TRANSPORT,
    BrokerResponseError,
    ClientInvariantError,
    ConnectionLostError,
    KafkaError,
    RequestTimedOutError,
    broker_error,
    is_retriable_code,
    local_error,
)
from oncestream.client.common.network import PRODUCE_KEY, UnsupportedApiError, produce_request_body
from oncestream.client.producer.accumulator import ProducerBatch, RecordAccumulator, increment_sequence
from oncestream.client.producer.delivery import DeliveryReports
from oncestream.client.producer.transactions import TransactionManager
from oncestream.protocol.api_keys import INIT_PRODUCER_ID
from oncestream.protocol.codec import build
from oncestream.protocol.compression import COMPRESSION_BY_NAME

log = logging.getLogger("oncestream.client")

MAX_IN_FLIGHT_PER_PARTITION = 5
_SEQUENCE_ERRORS = (ErrorCode.out_of_order_sequence_number, ErrorCode.unknown_producer_id)
_EPOCH_ERRORS = (ErrorCode.invalid_producer_epoch, ErrorCode.producer_fenced)
_METADATA_ERRORS = (
    ErrorCode.not_leader_or_follower,
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.leader_not_available,
)
_EXPIRY_CHECK_MS = 100


def monotonic_ms() -> int:
    """Milliseconds of the monotonic clock (scheduling only; record timestamps use wall time)."""
    return int(time.monotonic() * 1000)


class ProducerIdentity:
    """The producer id and epoch the sender stamps on batches (-1/-1 until known)."""

    __slots__ = ("epoch", "producer_id")

    def __init__(self) -> None:
        self.producer_id = -1
        self.epoch = -1

    @property
    def known(self) -> bool:
        """True once InitProducerId succeeded."""
        return self.producer_id >= 0


class PartitionSequences:
    """Idempotence bookkeeping for one partition (event loop only)."""

    __slots__ = ("in_flight", "last_acked", "muted", "next_sequence", "retries")

    def __init__(self) -> None:
        self.next_sequence = 0
        self.last_acked = -1
        self.in_flight: list[ProducerBatch] = []
        self.retries: list[ProducerBatch] = []
        self.muted = False

    def reset(self) -> None:
        """A new producer identity: sequences start again at 0 (KIP-360)."""
        if self.in_flight:
            raise ClientInvariantError("sequences restart at 0 only with no batch of the partition in flight")
        self.next_sequence = 0
        self.last_acked = -1


class Sender:
    """Drains the accumulator and talks produce to the partition leaders."""

    def __init__(
        self,
        conf: dict[str, Any],
        cluster: Cluster,
        accumulator: RecordAccumulator,
        reports: DeliveryReports,
        txn: TransactionManager | None,
    ) -> None:
        self._cluster = cluster
        self._acc = accumulator
        self._reports = reports
        self.txn = txn
        self.identity = ProducerIdentity()
        self.idempotent = bool(conf["enable.idempotence"]) or txn is not None
        self._acks = -1 if self.idempotent else conf["acks"]
        self._compression = COMPRESSION_BY_NAME[conf["compression.type"]]
        self._max_in_flight = max(1, conf["max.in.flight.requests.per.connection"])
        if self.idempotent:
            self._max_in_flight = min(self._max_in_flight, MAX_IN_FLIGHT_PER_PARTITION)
        self._retries = conf["retries"]
        self._delivery_timeout_ms = conf["delivery.timeout.ms"]
        self._request_timeout_ms = conf["request.timeout.ms"]
        self._retry_backoff_ms = conf["retry.backoff.ms"]
        self._retry_backoff_max_ms = max(conf["retry.backoff.max.ms"], self._retry_backoff_ms)
        self._max_request_bytes = conf["max.request.size"]
        self._transactional_id = txn.transactional_id if txn is not None else None
        self._parts: dict[tuple[str, int], PartitionSequences] = {}
        self._event: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._connecting: set[int] = set()
        self._metadata_task: asyncio.Task[None] | None = None
        self._metadata_retry_at = 0.0
        self._bump_needed = False
        self._identity_task: asyncio.Task[None] | None = None
        self._identity_error: KafkaError | None = None
        self._in_flight_requests = 0
        self._last_expiry_check_ms = 0
        self._closing = False
        self._idle_waiters: list[asyncio.Future[Any]] = []
        self.fatal_error: KafkaError | None = None
        self.on_identity_change: list[Callable[[], None]] = []
        self.on_fatal: list[Callable[[KafkaError], None]] = []

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the sender task (call from the event loop)."""
        self._event = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())
        self._task.add_done_callback(self._on_run_exit)

    def _on_run_exit(self, task: asyncio.Task[None]) -> None:
        """The sender task ended. Cancelled by close() is the normal end; anything else is a crash,
        after which nothing would ever be sent: it is logged with its traceback and made the
        producer's fatal error, which fails every queued message to its delivery callback."""
        if task.cancelled() or task.exception() is None:
            return
        crash = task.exception()
        log.error("oncestream producer: the sender task crashed", exc_info=crash)
        error = local_error(_FATAL, f"the producer's sender task crashed: {crash!r}", fatal=True)
        self._set_fatal(error)
        self._fail_all_queued(error)

    def wakeup(self) -> None:
        """Loop thread: re-run the drain now."""
        if self._event is not None:
            self._event.set()

    async def close(self) -> None:
        """Stop the task (after the producer flushed what it wanted to)."""
        self._closing = True
        self.wakeup()
        if self._task is not None:
            self._task.cancel()
            # Waits without raising: a crash was already reported by _on_run_exit.
            await asyncio.wait([self._task])

    # --- main loop ----------------------------------------------------------------------------

    async def _run(self) -> None:
        if self._event is None:
            raise ClientInvariantError("start() creates the wake-up event before the loop runs")
        while not self._closing:
            self._event.clear()
            try:
                timeout_ms = self._run_once()
            except Exception:  # a bug must not silently kill the sender: log and keep going
                log.exception("oncestream producer: sender iteration failed")
                timeout_ms = 100
            if timeout_ms is None or timeout_ms > 0:
                # Not asyncio.wait_for: on 3.11 it can swallow close()'s cancellation (async_wait).
                if timeout_ms is None:
                    await self._event.wait()
                else:
                    await wait_event(self._event, timeout_ms / 1000)
            else:
                await asyncio.sleep(0)

    def _run_once(self) -> int | None:
        now = monotonic_ms()
        acc = self._acc
        acc.sender_wake_at_ms = None  # awake: appends from now on must wake us explicitly
        if now - self._last_expiry_check_ms >= _EXPIRY_CHECK_MS:
            self._last_expiry_check_ms = now
            self._expire(now)
        if self.fatal_error is not None:
            self._fail_all_queued(self.fatal_error)
            return self._sleep_until(None)
        if self.idempotent and not self._ensure_identity():
            return self._sleep_until(None if self._identity_task else now + self._retry_backoff_ms)
        if self.txn is not None:
            self.txn.on_sender_iteration()
        batches, next_ready, unknown = acc.drain(
            now, self._cluster.leader_for, self._sendable, self._max_request_bytes
        )
        if unknown:
            self._request_metadata()
        for node, node_batches in batches.items():
            try:
                self._send(node, node_batches, now)
            except Exception as exc:  # never lose drained batches to a bug: fail them visibly
                log.exception("oncestream producer: sending to broker %s failed", node)
                error = local_error(_FAIL, f"internal error while sending: {exc!r}")
                for batch in node_batches:
                    state = self._parts.get(batch.tp)
                    if state is not None and batch in state.in_flight:
                        state.in_flight.remove(batch)
                    self._finish(batch, error)
        wake_at = next_ready
        if unknown or self._connecting:
            wake_at = _min(wake_at, now + self._retry_backoff_ms)
        return self._sleep_until(wake_at, now)

    def _sleep_until(self, wake_at_ms: int | None, now: int | None = None) -> int | None:
        self._acc.sender_wake_at_ms = wake_at_ms
        if wake_at_ms is None:
            return None
        now = monotonic_ms() if now is None else now
        return max(0, wake_at_ms - now)

    # --- identity (InitProducerId for idempotence, KIP-360 bumps) ------------------------------

    def _ensure_identity(self) -> bool:
        """True when batches may be stamped; otherwise an InitProducerId/bump is under way.

        A transactional producer's identity is set by init_transactions (and bumped by the
        transaction manager); an idempotent one asks for its own, and bumps it once nothing is
        in flight any more (KIP-360).
        """
        if self.txn is not None:
            return self.identity.known
        if self._identity_task is not None:
            return False
        if not self.identity.known or (self._bump_needed and self.idle_in_flight):
            bump = self.identity.known
            self._identity_task = asyncio.get_running_loop().create_task(self._init_idempotent(bump=bump))
            return False
        return not self._bump_needed

    async def _init_idempotent(self, *, bump: bool) -> None:
        try:
            def make(m: Any, version: int) -> Any:
                return build(
                    m.InitProducerIdRequest,
                    transactional_id=None,
                    transaction_timeout=datetime.timedelta(milliseconds=self._request_timeout_ms),
                    producer_id=self.identity.producer_id if bump else -1,
                    producer_epoch=self.identity.epoch if bump else -1,
                )

            while not self._closing:
                try:
                    response = await self._cluster.send(None, INIT_PRODUCER_ID, make)
                except (ConnectionLostError, RequestTimedOutError):
                    await asyncio.sleep(self._retry_backoff_ms / 1000)
                    continue
                except UnsupportedApiError as exc:
                    self._set_fatal(local_error(_TRANSPORT, f"idempotence not supported: {exc}", fatal=True))
                    return
                if response.error_code == 0:
                    self.set_identity(response.producer_id, response.producer_epoch)
                    self._bump_needed = False
                    return
                if is_retriable_code(response.error_code):
                    await asyncio.sleep(self._retry_backoff_ms / 1000)
                    continue
                self._set_fatal(broker_error(response.error_code, "InitProducerId failed"))
                return
        finally:
            self._identity_task = None
            self.wakeup()

    def set_identity(self, producer_id: int, epoch: int) -> None:
        """Adopt a new producer identity; every partition's sequence restarts at 0 and
        unacknowledged batches will be re-stamped when (re)sent."""
        changed = (producer_id, epoch) != (self.identity.producer_id, self.identity.epoch)
        self.identity.producer_id, self.identity.epoch = producer_id, epoch
        if changed:
            self.reset_sequences()
            for callback in self.on_identity_change:
                callback()

    def reset_sequences(self) -> None:
        """Restart sequences at 0 for every partition; queued batches get new sequences."""
        if self._in_flight_requests and any(p.in_flight for p in self._parts.values()):
            raise ClientInvariantError("sequences restart at 0 only with no batch in flight")
        for state in self._parts.values():
            if state.retries:
                self._acc.reenqueue(sorted(state.retries, key=lambda b: b.base_sequence))
                state.retries = []
            state.muted = False
            state.reset()
        for queue in list(self._acc.queues.values()):
            for batch in list(queue):
                batch.base_sequence = -1  # only the sender writes sequences

    def request_epoch_bump(self) -> None:
        """KIP-360 for idempotent producers: bump once nothing is in flight."""
        if self.txn is None:
            self._bump_needed = True
            self.wakeup()

    def _set_fatal(self, error: KafkaError) -> None:
        self.fatal_error = error
        for callback in self.on_fatal:
            callback(error)
        if self.txn is not None:
            self.txn.sm.fail(error)
        self.wakeup()

    # --- draining and sending -----------------------------------------------------------------

    def _sendable(self, batch: ProducerBatch, node: int) -> bool:
        conn = self._cluster.ready_connection(node)
        if conn is None:
            self._connect(node)
            return False
        if conn.in_flight >= self._max_in_flight:
            return False
        if self.idempotent:
            state = self._parts.get(batch.tp)
            if state is None:
                state = self._parts[batch.tp] = PartitionSequences()
            if state.muted or len(state.in_flight) >= MAX_IN_FLIGHT_PER_PARTITION:
                return False
        if self.txn is not None and not self.txn.may_send(batch.tp):
            return False
        return True

    def _connect(self, node: int) -> None:
        if node in self._connecting:
            return
        self._connecting.add(node)

        async def connect() -> None:
            try:
                await self._cluster.connection(node)
            except ConnectionLostError:
                self._request_metadata()
            finally:
                self._connecting.discard(node)
                self.wakeup()

        asyncio.get_running_loop().create_task(connect())

    def _request_metadata(self) -> None:
        if self._metadata_task is not None and not self._metadata_task.done():
            return
        delay = max(0.0, self._metadata_retry_at - time.monotonic())

        async def refresh() -> None:
            if delay:
                await asyncio.sleep(delay)
            try:
                await self._cluster.refresh()
            except (ConnectionLostError, RequestTimedOutError, BrokerResponseError):
                pass
            finally:
                self._metadata_retry_at = time.monotonic() + self._retry_backoff_ms / 1000
                self.wakeup()

        self._metadata_task = asyncio.get_running_loop().create_task(refresh())

    def _send(self, node: int, batches: list[ProducerBatch], now: int) -> None:
        conn = self._cluster.ready_connection(node)
        if conn is None:  # closed between drain and send: put them back
            self._acc.reenqueue(batches)
            return
        try:
            # Produce v12 is transaction version 2 (KIP-890): the broker adds the partition to
            # the transaction itself, so it is only sent when the transaction manager chose it.
            tv2 = self.txn is not None and self.txn.transaction_version >= 2
            version = conn.version_for(PRODUCE_KEY, 12 if tv2 else 11, 12 if tv2 else 3)
        except UnsupportedApiError as exc:
            error = local_error(_TRANSPORT, str(exc), fatal=True)
            for batch in batches:
                self._finish(batch, error)
            return
        identity = self.identity
        transactional = self.txn is not None
        topics: dict[str, list[tuple[int, bytes, bytes]]] = {}
        for batch in batches:
            batch.seal(self._compression)
            if self.idempotent:
                state = self._parts[batch.tp]
                if batch.base_sequence < 0 or batch.producer_id != identity.producer_id \
                        or batch.producer_epoch != identity.epoch:
                    # New, or stamped under an identity replaced by a KIP-360 bump: next sequence.
                    batch.base_sequence = state.next_sequence
                    state.next_sequence = increment_sequence(state.next_sequence, batch.record_count)
                    batch.producer_id, batch.producer_epoch = identity.producer_id, identity.epoch
                state.in_flight.append(batch)
            batch.transactional = transactional
            batch.attempts += 1
            header, payload = batch.wire_parts()
            topics.setdefault(batch.topic, []).append((batch.partition, header, payload))
        if transactional and self.txn is not None:
            self.txn.txn_started = True  # version 2: this Produce starts it on the broker
        body = produce_request_body(version, self._transactional_id, self._acks,
                                    self._request_timeout_ms, topics)
        expect = self._acks != 0
        future = conn.send_frame(PRODUCE_KEY, version, body, expect_response=expect)
        self._in_flight_requests += 1
        future.add_done_callback(functools.partial(self._on_response, batches))

    def _on_response(self, batches: list[ProducerBatch], future: asyncio.Future[Any]) -> None:
        self._in_flight_requests -= 1
        now = monotonic_ms()
        error = future.exception() if not future.cancelled() else ConnectionLostError("cancelled")
        if error is not None:
            code = _TIMED_OUT if isinstance(error, RequestTimedOutError) else _TRANSPORT
            self._request_metadata()
            for batch in batches:
                self._fail_or_retry(batch, code, str(error), now)
        else:
            response = future.result()
            if response is None:  # acks=0: nothing will come back
                for batch in batches:
                    self._complete(batch, -1, -1)
            else:
                results: dict[tuple[str, int], Any] = {}
                for topic in response.responses:
                    for p in topic.partition_responses:
                        results[(topic.name, p.index)] = p
                for batch in batches:
                    p = results.get(batch.tp)
                    if p is None:
                        self._fail_or_retry(batch, _TRANSPORT, "partition missing from produce response", now)
                        continue
                    code = int(p.error_code)
                    if code == 0 or code == ErrorCode.duplicate_sequence_number:
                        append_ms = getattr(p, "log_append_time", None)
                        self._complete(batch, p.base_offset, _to_ms(append_ms))
                    else:
                        self._fail_or_retry(batch, code, getattr(p, "error_message", None) or "", now)
        for batch in batches:
            self._maybe_unmute(batch.tp)
        self._notify_idle()
        self.wakeup()

    # --- settling batches ---------------------------------------------------------------------

    def _complete(self, batch: ProducerBatch, base_offset: int, log_append_time_ms: int) -> None:
        if self.idempotent:
            state = self._parts[batch.tp]
            if batch in state.in_flight:
                state.in_flight.remove(batch)
            state.last_acked = batch.last_sequence
        batch.base_offset = base_offset
        batch.log_append_time_ms = log_append_time_ms
        self._finish(batch, None)

    def _fail_or_retry(self, batch: ProducerBatch, code: int, message: str, now: int) -> None:
        state = self._parts.get(batch.tp) if self.idempotent else None
        if state is not None and batch in state.in_flight:
            state.in_flight.remove(batch)
        retriable = is_retriable_code(code) or code in (_TRANSPORT, _TIMED_OUT)
        bump = False
        if state is not None and code in _SEQUENCE_ERRORS:
            expected = increment_sequence(state.last_acked, 1)
            if batch.producer_id != self.identity.producer_id or batch.base_sequence != expected or \
                    any(b.base_sequence == expected for b in state.retries):
                retriable = True  # an earlier batch of this partition is being retried
            elif self.txn is None:
                retriable, bump = True, True  # KIP-360: the broker lost our state; re-sequence
            else:
                retriable = False  # transactional: the transaction must be aborted
        elif state is not None and code in _EPOCH_ERRORS and self.txn is None:
            retriable, bump = True, True
        if code == ErrorCode.concurrent_transactions:
            retriable = True
        if self.txn is not None and not self.txn.may_retry():
            retriable = False
        expired = now - batch.created_ms >= self._delivery_timeout_ms
        if retriable and batch.attempts <= self._retries and not expired and self.fatal_error is None:
            backoff = min(self._retry_backoff_ms * (2 ** min(batch.attempts - 1, 10)), self._retry_backoff_max_ms)
            if code == ErrorCode.concurrent_transactions:
                backoff = min(backoff, 20)
            batch.retry_at_ms = now + backoff
            if code in _METADATA_ERRORS:
                self._request_metadata()
            if bump:
                self.request_epoch_bump()
            if state is not None:
                state.retries.append(batch)
                state.muted = True
            else:
                self._acc.reenqueue([batch])
            return
        if expired and retriable:
            error = local_error(_MSG_TIMED_OUT, f"message timed out ({message or 'no response'})",
                                txn_requires_abort=self.txn is not None)
        elif code < 0:
            error = local_error(code, message, txn_requires_abort=self.txn is not None)
        else:
            error = broker_error(code, message or None, transactional=self.txn is not None)
        if state is not None and batch.base_sequence >= 0 and self.txn is None:
            self.request_epoch_bump()  # the sequence has a gap now
        self._finish(batch, error)

    def _maybe_unmute(self, tp: tuple[str, int]) -> None:
        state = self._parts.get(tp)
        if state is None or not state.muted or state.in_flight:
            return
        retries = sorted(state.retries, key=lambda b: (b.producer_id != self.identity.producer_id,
                                                         b.base_sequence))
        state.retries = []
        state.muted = False
        if retries:
            self._acc.reenqueue(retries)

    def _finish(self, batch: ProducerBatch, error: KafkaError | None) -> None:
        batch.error = error
        self._acc.release(batch)
        self._reports.put(batch)
        if error is not None and self.txn is not None:
            if batch.base_sequence >= 0:
                self.txn.sequence_gap = True
            self.txn.sm.fail(error)

    def _expire(self, now: int) -> None:
        for batch in self._acc.expired(now, self._delivery_timeout_ms):
            error = local_error(_MSG_TIMED_OUT, "message timed out before it could be sent",
                                txn_requires_abort=self.txn is not None)
            if self.idempotent and batch.base_sequence >= 0 and self.txn is None:
                self.request_epoch_bump()
            self._finish(batch, error)

    def _fail_all_queued(self, error: KafkaError) -> None:
        for batch in self._acc.take_unsent():
            self._finish(batch, error)
        for state in self._parts.values():
            retries, state.retries = state.retries, []
            state.muted = False
            for batch in retries:
                self._finish(batch, error)

    def purge_unsent(self, error: KafkaError | None = None) -> int:
        """Fail every batch not in flight (abort_transaction); returns how many."""
        error = error or local_error(_PURGE_QUEUE, "purged: the transaction was aborted",
                                     txn_requires_abort=False)
        taken = self._acc.take_unsent()
        for state in self._parts.values():
            taken.extend(state.retries)
            state.retries = []
            state.muted = False
        for batch in taken:
            if self.txn is not None and batch.base_sequence >= 0:
                self.txn.sequence_gap = True
            batch.error = error
            self._acc.release(batch)
            self._reports.put(batch)
        return len(taken)

    # --- waiting for quiescence (transactions) ------------------------------------------------

    @property
    def idle_in_flight(self) -> bool:
        """No produce request in flight."""
        return self._in_flight_requests == 0 and not any(p.in_flight for p in self._parts.values())

    @property
    def idle(self) -> bool:
        """Nothing in flight and nothing waiting for a retry."""
        return self._in_flight_requests == 0 and not any(
            p.in_flight or p.retries for p in self._parts.values()
        )

    async def wait_idle(self) -> None:
        """Wait until ``idle``."""
        while not self.idle:
            waiter = asyncio.get_running_loop().create_future()
            self._idle_waiters.append(waiter)
            await waiter

    def _notify_idle(self) -> None:
        if self._idle_waiters and self.idle:
            waiters, self._idle_waiters = self._idle_waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)


def _min(a: int | None, b: int) -> int:
    return b if a is None or b < a else a


def _to_ms(value: Any) -> int:
    """kio gives log_append_time as a datetime (or None / -1 when not LogAppendTime)."""
    if value is None:
        return -1
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    return int(value)
