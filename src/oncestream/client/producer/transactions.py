"""Transactional producer requests (KIP-98, KIP-360, KIP-447, KIP-939), run on the event loop.

The state machine is in txn_state.py; this module talks to the transaction coordinator
(FindCoordinator key_type=1, InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn) and to
the group coordinator (TxnOffsetCommit). Coordinator-side conditions that clear by themselves
(CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
lost connections) are retried with back-off until the caller's timeout; everything else is
classified fatal or abortable (errors.broker_error) and raised.

KIP-939 two-phase commit: InitProducerId v6 carries ``enable2_pc`` (the broker then never times the
transaction out) and ``keep_prepared_txn``. With ``keep_prepared_txn`` the coordinator leaves an
ongoing 2PC transaction open and moves this producer to a new epoch (fencing the old instance);
the response names the kept transaction in ``ongoing_txn_producer_id/epoch``. That pair is the
PreparedTxnState the old instance got from ``prepare_transaction()``; the commit or abort itself
is an EndTxn with this producer's *new* id/epoch (the coordinator checks EndTxn against its
current producer identity, which keepPreparedTxn just moved forward — as Kafka's
TransactionManager does, it only keeps the old pair to compare against the application's state).

Transaction version 2 (KIP-890 part 2) is used when the coordinator's broker finalizes the
``transaction.version`` feature at level 2 and supports Produce v12, EndTxn v5 and TxnOffsetCommit
v5: partitions join the transaction with the first Produce (no AddPartitionsToTxn), offsets with
the TxnOffsetCommit (no AddOffsetsToTxn), and every EndTxn bumps the epoch and returns the identity
for the next transaction. That makes each transaction's (producer id, epoch) unique, which KIP-939
needs: a PreparedTxnState of an earlier transaction of the same producer can then never match the
one the broker holds prepared. Against a version-1 broker the client falls back to KIP-98 requests.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import threading
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from oncestream.client.common.cluster import COORDINATOR_GROUP, COORDINATOR_TRANSACTION, Cluster
from oncestream.client.common.errors import (
    _UNSUPPORTED_FEATURE,
    BrokerResponseError,
    ClientInvariantError,
    ConnectionLostError,
    KafkaError,
    KafkaException,
    RequestTimedOutError,
    broker_error,
    error_name,
)
from oncestream.client.common.message import ConsumerGroupMetadata, TopicPartition
from oncestream.client.common.network import UnsupportedApiError
from oncestream.client.producer.prepared_txn import PreparedTxnState
from oncestream.client.producer.txn_state import TxnState, TxnStateMachine
from oncestream.protocol.api_keys import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    END_TXN,
    INIT_PRODUCER_ID,
    PRODUCE,
    TXN_OFFSET_COMMIT,
)
from oncestream.protocol.codec import build

log = logging.getLogger("oncestream.client")

TRANSACTION_VERSION_FEATURE = "transaction.version"

_S = TxnState
_COORDINATOR_MOVED = (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available)
_RETRY_IN_PLACE = (
    ErrorCode.concurrent_transactions,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.request_timed_out,
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.operation_not_attempted,
    ErrorCode.unstable_offset_commit,
    ErrorCode.network_exception,
)
_CONCURRENT_BACKOFF_S = 0.02


class TransactionManager:
    """Per-producer transaction state plus the coordinator conversations."""

    def __init__(self, conf: dict[str, Any], cluster: Cluster) -> None:
        self.transactional_id: str = conf["transactional.id"]
        self.timeout_ms: int = conf["transaction.timeout.ms"]
        self.two_phase_commit: bool = conf["transaction.two.phase.commit.enable"]
        self._retry_backoff_s: float = conf["retry.backoff.ms"] / 1000
        self._cluster = cluster
        self.sm = TxnStateMachine()
        self._lock = threading.Lock()
        self.added: set[tuple[str, int]] = set()
        self.pending: set[tuple[str, int]] = set()
        self.txn_started = False  # the coordinator knows about this transaction (EndTxn needed)
        self.prepared_state: PreparedTxnState | None = None
        self.sequence_gap = False  # a sequenced batch failed: bump the epoch after the abort
        self._add_task: asyncio.Task[None] | None = None
        self.sender: Any = None  # set by the producer (circular by nature)
        self.pending_operation: tuple[str, Any] | None = None
        # 1: KIP-98 requests; 2: KIP-890 part 2 (decided by init() from the coordinator's broker).
        self.transaction_version = 1

    # --- user thread --------------------------------------------------------------------------

    def note_partition(self, tp: tuple[str, int]) -> bool:
        """produce() to ``tp``: it must be added to the transaction before its batch is sent.
        Returns True when the sender should be woken to add it."""
        if tp in self.added:
            return False
        if self.transaction_version >= 2:
            # Produce v12 adds the partition on the broker: nothing to send first.
            with self._lock:
                self.added.add(tp)
            return False
        with self._lock:
            if tp in self.added or tp in self.pending:
                return False
            self.pending.add(tp)
            return True

    def begin(self) -> None:
        """READY -> IN_TRANSACTION (local only: the coordinator learns of it at the first add)."""
        self.sm.transition(_S.IN_TRANSACTION)
        with self._lock:
            self.added.clear()
            self.pending.clear()
        self.txn_started = False
        self.prepared_state = None

    # --- sender hooks (event loop) ------------------------------------------------------------

    def may_send(self, tp: tuple[str, int]) -> bool:
        """A batch of ``tp`` may go out once the partition is part of the transaction."""
        return tp in self.added

    def may_retry(self) -> bool:
        """No retries once the transaction is doomed or being aborted."""
        return self.sm.state not in (_S.ABORTING_TRANSACTION, _S.ABORTABLE_ERROR, _S.FATAL_ERROR)

    def on_sender_iteration(self) -> None:
        """Before each drain: add pending partitions; drop batches of a doomed transaction."""
        state = self.sm.state
        if state in (_S.ABORTABLE_ERROR, _S.FATAL_ERROR):
            self.sender.purge_unsent(self.sm.last_error)
            return
        if self.pending and self._add_task is None and state in (
            _S.IN_TRANSACTION, _S.COMMITTING_TRANSACTION
        ):
            self._add_task = asyncio.get_running_loop().create_task(self._add_partitions())

    async def _add_partitions(self) -> None:
        try:
            while True:
                with self._lock:
                    parts = sorted(self.pending)
                if not parts or not self.may_retry():
                    return
                identity = self.sender.identity
                by_topic: dict[str, list[int]] = {}
                for topic, partition in parts:
                    by_topic.setdefault(topic, []).append(partition)

                def make(m: Any, version: int, by_topic: dict[str, list[int]] = by_topic, identity: Any = identity) -> Any:
                    topics = tuple(
                        build(m.AddPartitionsToTxnTopic, name=t, partitions=tuple(ps))
                        for t, ps in by_topic.items()
                    )
                    return build(
                        m.AddPartitionsToTxnRequest,
                        v3_and_below_transactional_id=self.transactional_id,
                        v3_and_below_producer_id=identity.producer_id,
                        v3_and_below_producer_epoch=identity.epoch,
                        v3_and_below_topics=topics,
                    )

                try:
                    response = await self._txn_coordinator_send(ADD_PARTITIONS_TO_TXN, make, max_version=3)
                except _Retry as retry:
                    await asyncio.sleep(retry.delay_s)
                    continue
                worst = 0
                for topic in response.results_by_topic_v3_and_below:
                    for p in topic.results_by_partition:
                        code = int(p.partition_error_code)
                        if code != 0 and (worst == 0 or worst in _RETRY_IN_PLACE):
                            worst = code
                if worst == 0:
                    with self._lock:
                        self.added.update(parts)
                        self.pending.difference_update(parts)
                    self.txn_started = True
                    self.sender.wakeup()
                    continue
                if worst in _COORDINATOR_MOVED:
                    self._cluster.forget_coordinator(self.transactional_id, COORDINATOR_TRANSACTION)
                    await asyncio.sleep(self._retry_backoff_s)
                    continue
                if worst in _RETRY_IN_PLACE:
                    delay = _CONCURRENT_BACKOFF_S if worst == ErrorCode.concurrent_transactions else self._retry_backoff_s
                    await asyncio.sleep(delay)
                    continue
                error = broker_error(worst, f"AddPartitionsToTxn failed: {error_name(worst)}",
                                     transactional=True, from_coordinator=True)
                self.sm.fail(error)
                return
        except KafkaException as exc:
            self.sm.fail(exc.args[0])
        finally:
            self._add_task = None
            if self.sender is not None:
                self.sender.wakeup()

    async def wait_add_partitions(self) -> None:
        """Let an AddPartitionsToTxn in flight finish (before EndTxn)."""
        task = self._add_task
        if task is not None:
            await asyncio.wait({task})

    # --- coordinator plumbing -----------------------------------------------------------------

    async def _txn_coordinator_send(self, api_key: int, make: Callable[[Any, int], Any], *,
                                    max_version: int | None = None, min_version: int = 0) -> Any:
        """Send to the transaction coordinator; connection and lookup problems become _Retry."""
        return await self._coordinator_send(self.transactional_id, COORDINATOR_TRANSACTION, api_key,
                                            make, max_version=max_version, min_version=min_version)

    async def _coordinator_send(self, key: str, key_type: int, api_key: int,
                                make: Callable[[Any, int], Any], *, max_version: int | None = None,
                                min_version: int = 0) -> Any:
        try:
            node = await self._cluster.coordinator(key, key_type)
        except BrokerResponseError as exc:
            if exc.retriable:
                raise _Retry(self._retry_backoff_s) from exc
            raise KafkaException(broker_error(exc.code, f"FindCoordinator failed: {exc}",
                                              transactional=True, from_coordinator=True)) from exc
        except (ConnectionLostError, RequestTimedOutError) as exc:
            raise _Retry(self._retry_backoff_s) from exc
        try:
            return await self._cluster.send(node, api_key, make, max_version=max_version,
                                            min_version=min_version)
        except UnsupportedApiError as exc:
            raise KafkaException(KafkaError(_UNSUPPORTED_FEATURE, str(exc), fatal=True)) from exc
        except (ConnectionLostError, RequestTimedOutError) as exc:
            self._cluster.forget_coordinator(key, key_type)
            raise _Retry(self._retry_backoff_s) from exc

    def _classify(self, code: int, what: str, *, key: str | None = None,
                  key_type: int = COORDINATOR_TRANSACTION) -> float:
        """Back-off for a retriable coordinator error, or raise the classified error."""
        if code in _COORDINATOR_MOVED:
            self._cluster.forget_coordinator(key or self.transactional_id, key_type)
            return self._retry_backoff_s
        if code == ErrorCode.concurrent_transactions:
            return _CONCURRENT_BACKOFF_S
        if code in _RETRY_IN_PLACE:
            return self._retry_backoff_s
        raise KafkaException(broker_error(code, f"{what} failed: {error_name(code)}",
                                          transactional=True, from_coordinator=True))

    # --- InitProducerId -----------------------------------------------------------------------

    async def init(self, keep_prepared_txn: bool, *, bump: bool = False) -> None:
        """InitProducerId until it succeeds; sets the sender's identity and the next state.

        ``bump``: re-initialize with the current id/epoch (KIP-360 epoch bump after an abort).
        """
        identity = self.sender.identity
        expected = (identity.producer_id, identity.epoch) if bump else (-1, -1)
        wants_v6 = self.two_phase_commit or keep_prepared_txn
        while True:
            def make(m: Any, version: int) -> Any:
                return build(
                    m.InitProducerIdRequest,
                    transactional_id=self.transactional_id,
                    transaction_timeout=datetime.timedelta(milliseconds=self.timeout_ms),
                    producer_id=expected[0],
                    producer_epoch=expected[1],
                    enable2_pc=self.two_phase_commit,
                    keep_prepared_txn=keep_prepared_txn,
                )

            try:
                node = await self._cluster.coordinator(self.transactional_id, COORDINATOR_TRANSACTION)
                conn = await self._cluster.connection(node)
            except BrokerResponseError as exc:
                if not exc.retriable:
                    raise KafkaException(broker_error(exc.code, f"FindCoordinator failed: {exc}",
                                                      transactional=True, from_coordinator=True)) from exc
                await asyncio.sleep(self._retry_backoff_s)
                continue
            except (ConnectionLostError, RequestTimedOutError):
                self._cluster.forget_coordinator(self.transactional_id, COORDINATOR_TRANSACTION)
                await asyncio.sleep(self._retry_backoff_s)
                continue
            self.transaction_version = _transaction_version(conn)
            if wants_v6 and self.transaction_version < 2:
                # With version 1 consecutive transactions share one (producer id, epoch), so a
                # PreparedTxnState could not tell the prepared transaction from an earlier one.
                raise KafkaException(KafkaError(
                    _UNSUPPORTED_FEATURE,
                    "two-phase commit (KIP-939) needs transaction.version 2 (KIP-890), which broker "
                    f"{conn.host}:{conn.port} does not finalize: without the per-transaction epoch "
                    "bump a PreparedTxnState would not identify one transaction",
                    fatal=True,
                ))
            if wants_v6 and conn.broker_versions.get(INIT_PRODUCER_ID, (0, -1))[1] < 6:
                raise KafkaException(KafkaError(
                    _UNSUPPORTED_FEATURE,
                    "two-phase commit (KIP-939) needs InitProducerId v6, which broker "
                    f"{conn.host}:{conn.port} does not support",
                    fatal=True,
                ))
            try:
                response = await self._txn_coordinator_send(INIT_PRODUCER_ID, make,
                                                            min_version=3 if bump else 0)
            except _Retry as retry:
                await asyncio.sleep(retry.delay_s)
                continue
            code = int(response.error_code)
            if code == 0:
                break
            if code == ErrorCode.transactional_id_authorization_failed and self.two_phase_commit:
                raise KafkaException(KafkaError(
                    code,
                    f"the broker refused two-phase commit for transactional.id "
                    f"{self.transactional_id!r}: transaction.two.phase.commit.enable is not true on "
                    "the broker (or this principal lacks the TWO_PHASE_COMMIT permission)",
                    fatal=True,
                ))
            if code == ErrorCode.invalid_txn_state and keep_prepared_txn:
                raise KafkaException(KafkaError(
                    code,
                    f"keep_prepared_txn: the open transaction of {self.transactional_id!r} is not a "
                    "two-phase-commit transaction, so it cannot be kept",
                    fatal=True,
                ))
            await asyncio.sleep(self._classify(code, "InitProducerId"))
        self.sender.set_identity(response.producer_id, response.producer_epoch)
        self.sequence_gap = False
        ongoing_id = getattr(response, "ongoing_txn_producer_id", -1)
        ongoing_epoch = getattr(response, "ongoing_txn_producer_epoch", -1)
        if bump:
            return
        with self._lock:
            self.added.clear()
            self.pending.clear()
        if keep_prepared_txn and ongoing_id >= 0:
            self.prepared_state = PreparedTxnState(ongoing_id, ongoing_epoch)
            self.txn_started = True
            self.sm.transition(_S.PREPARED_TRANSACTION)
        else:
            self.prepared_state = None
            self.txn_started = False
            self.sm.transition(_S.READY)

    # --- EndTxn -------------------------------------------------------------------------------

    async def end(self, commit: bool) -> None:
        """EndTxn(commit|abort) if the coordinator knows the transaction; then READY.

        Version 2: the response carries the identity for the next transaction (the epoch bumped,
        or a new producer id once the epoch is exhausted); an abort after a sequence gap is sent
        even for a transaction the coordinator never saw, because that bump is the KIP-360
        recovery.
        """
        if not commit:
            self.sender.purge_unsent()
            await self.wait_add_partitions()
            await self.sender.wait_idle()
            self.sender.purge_unsent()
        tv2 = self.transaction_version >= 2
        needs_bump = not commit and self.sequence_gap
        if self.txn_started or (tv2 and needs_bump):
            identity = self.sender.identity
            sent_as = (identity.producer_id, identity.epoch)
            while True:
                def make(m: Any, version: int) -> Any:
                    return build(
                        m.EndTxnRequest,
                        transactional_id=self.transactional_id,
                        producer_id=sent_as[0],
                        producer_epoch=sent_as[1],
                        committed=commit,
                    )

                try:
                    response = await self._txn_coordinator_send(
                        END_TXN, make, max_version=5 if tv2 else 4, min_version=5 if tv2 else 0)
                except _Retry as retry:
                    await asyncio.sleep(retry.delay_s)
                    continue
                code = int(response.error_code)
                if code == 0:
                    break
                await asyncio.sleep(self._classify(code, "EndTxn(commit)" if commit else "EndTxn(abort)"))
            if tv2:
                if response.producer_id < 0 or response.producer_epoch < 0:
                    # KIP-890 part 2: EndTxn v5 returns the identity of the next transaction.
                    raise ClientInvariantError(f"EndTxn v5 answered no producer identity: {response}")
                self.sender.set_identity(response.producer_id, response.producer_epoch)
                self.sequence_gap = False
        with self._lock:
            self.added.clear()
            self.pending.clear()
        self.txn_started = False
        self.prepared_state = None
        if not commit and self.sequence_gap:
            # KIP-360 (version 1): a failed batch left a sequence gap; a new epoch restarts
            # sequences at 0.
            await self.init(False, bump=True)
        self.sm.transition(_S.READY)

    # --- offsets in the transaction (KIP-98 / KIP-447) ----------------------------------------

    async def send_offsets(self, offsets: list[TopicPartition], group: ConsumerGroupMetadata) -> None:
        """AddOffsetsToTxn (version 1 only), then TxnOffsetCommit to the group coordinator."""
        identity = self.sender.identity
        tv2 = self.transaction_version >= 2
        while not tv2:
            def make_add(m: Any, version: int) -> Any:
                return build(
                    m.AddOffsetsToTxnRequest,
                    transactional_id=self.transactional_id,
                    producer_id=identity.producer_id,
                    producer_epoch=identity.epoch,
                    group_id=group.group_id,
                )

            try:
                response = await self._txn_coordinator_send(ADD_OFFSETS_TO_TXN, make_add)
            except _Retry as retry:
                await asyncio.sleep(retry.delay_s)
                continue
            code = int(response.error_code)
            if code == 0:
                break
            await asyncio.sleep(self._classify(code, "AddOffsetsToTxn"))
        self.txn_started = True
        by_topic: dict[str, list[TopicPartition]] = {}
        for tp in offsets:
            by_topic.setdefault(tp.topic, []).append(tp)
        while True:
            def make_commit(m: Any, version: int) -> Any:
                topics = tuple(
                    build(
                        m.TxnOffsetCommitRequestTopic,
                        name=topic,
                        partitions=tuple(
                            build(
                                m.TxnOffsetCommitRequestPartition,
                                partition_index=tp.partition,
                                committed_offset=tp.offset,
                                committed_leader_epoch=tp.leader_epoch if tp.leader_epoch is not None else -1,
                                committed_metadata=tp.metadata if tp.metadata is not None else "",
                            )
                            for tp in tps
                        ),
                    )
                    for topic, tps in by_topic.items()
                )
                return build(
                    m.TxnOffsetCommitRequest,
                    transactional_id=self.transactional_id,
                    group_id=group.group_id,
                    producer_id=identity.producer_id,
                    producer_epoch=identity.epoch,
                    generation_id=group.generation_id,
                    member_id=group.member_id or "",
                    group_instance_id=group.group_instance_id,
                    topics=topics,
                )

            try:
                response = await self._coordinator_send(
                    group.group_id, COORDINATOR_GROUP, TXN_OFFSET_COMMIT, make_commit,
                    max_version=5 if tv2 else 3, min_version=5 if tv2 else 0)
            except _Retry as retry:
                await asyncio.sleep(retry.delay_s)
                continue
            worst = 0
            for topic in response.topics:
                for p in topic.partitions:
                    code = int(p.error_code)
                    if code != 0 and (worst == 0 or worst in _RETRY_IN_PLACE or worst in _COORDINATOR_MOVED):
                        worst = code
            if worst == 0:
                self.txn_started = True  # version 2: the commit added the offsets partition
                return
            await asyncio.sleep(self._classify(worst, "TxnOffsetCommit", key=group.group_id,
                                               key_type=COORDINATOR_GROUP))


def _transaction_version(conn: Any) -> int:
    """2 when the broker finalizes transaction.version >= 2 and has the requests it needs."""
    versions: dict[int, tuple[int, int]] = conn.broker_versions

    def max_of(key: int) -> int:
        return versions.get(key, (0, -1))[1]

    if (conn.finalized_features.get(TRANSACTION_VERSION_FEATURE, 0) >= 2 and max_of(PRODUCE) >= 12
            and max_of(END_TXN) >= 5 and max_of(TXN_OFFSET_COMMIT) >= 5):
        return 2
    return 1


class _Retry(Exception):
    """Internal: the request did not get an answer worth classifying; try again after a delay."""

    def __init__(self, delay_s: float) -> None:
        super().__init__(delay_s)
        self.delay_s = delay_s
