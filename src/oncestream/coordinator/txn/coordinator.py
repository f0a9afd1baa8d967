"""The transaction coordinator (KIP-98 with KIP-360, KIP-447, KIP-664, KIP-890, KIP-939), sans-io.

Behaviour follows Apache Kafka's TransactionCoordinator / TransactionStateManager; the structure is
ours. Every request method validates the request against the transactional id's current
(producer id, epoch) and state, then either answers at once or *prepares* a transition: the
returned :class:`Outcome` carries the transaction-log record to persist, and the transition (and
any response that depends on it) happens only in :meth:`on_persisted`. Markers are handed out only
after the Prepare* record is durable, and the Complete* record only after the markers are written,
so recovery is "replay the log, finish what was prepared" (:meth:`load`).

Driving it (effects are returned, never queued inside):

* call a request method; send ``outcome.response`` if it is not None;
* append each ``outcome.records_to_persist`` to ``__transaction_state`` and, once durable, call
  ``on_persisted(write_id, now_ms)`` (or ``on_persist_failed(write_id, error)``); the outcome of
  that call carries the deferred response of the request that made the write, if any, and the
  next effects;
* write each ``outcome.markers_to_write`` job's markers, then call ``markers_written(...)``;
* call ``tick(now_ms)`` every ``abort_timed_out_transaction_cleanup_interval_ms`` for timeouts and
  transactional-id expiry.

Clocks: ``now_ms`` is wall-clock time and only ends up in records (start and last-update
timestamps, as Kafka persists them). Transaction timeouts and transactional-id expiry run on the
monotonic clock given as the keyword ``mono_ms`` to :meth:`load`, :meth:`on_persisted` and
:meth:`tick` (callers with one clock for both, such as tests, may leave it out): the coordinator
notes (in :class:`~oncestream.coordinator.txn.timeouts.TxnTimers`) the monotonic time at which a
transaction started and each id last changed, so a wall-clock step either way neither aborts a
transaction early nor keeps it open forever. Monotonic times are
never persisted; after a restart they are derived once from the persisted wall timestamps, the
age clamped to ``[0, timeout]`` so a wall step while the broker was down cannot stretch a timeout.

At most one transition per transactional id is in flight; requests meanwhile get
CONCURRENT_TRANSACTIONS (retriable), exactly as Kafka answers while a pending state is set.

Kept apart: the monotonic timers (``timeouts.py``), InitProducerId's identity rules
(``producer_identity.py``) and the read-only KIP-664 queries (``admin_queries.py``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Sequence

from kio.schema.errors import ErrorCode

from oncestream.coordinator.txn import metadata as m
from oncestream.coordinator.txn.admin_queries import (
    TransactionCounts,
    describe_transactions,
    list_transactions,
    transaction_counts,
)
from oncestream.coordinator.txn.config import TxnCoordinatorConfig
from oncestream.coordinator.txn.messages import (
    CONSUMER_OFFSETS_TOPIC,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TWO_PHASE_COMMIT_TIMEOUT_MS,
    AddPartitionsResponse,
    EndTxnResponse,
    InitProducerIdResponse,
    ListTransactionsResponse,
    MarkerJob,
    Outcome,
    PendingWrite,
    TopicPartition,
    TransactionDescription,
    VerifyPartitionsResponse,
)
from oncestream.coordinator.txn.metadata import (
    PendingTransition,
    TransactionMetadata,
    TxnSnapshot,
    WriteKind,
)
from oncestream.coordinator.txn.producer_identity import (
    expected_identity,
    init_response,
    is_valid_expected_producer_id,
    keep_prepared_response,
)
from oncestream.coordinator.txn.records import encode_key, encode_value, replay
from oncestream.coordinator.txn.state import TxnState
from oncestream.coordinator.txn.timeouts import TimerAction, TxnTimers
from oncestream.coordinator.txn.verify import verify_snapshot
from oncestream.errors import (
    ConcurrentTransactionsError,
    CoordinatorInvariantError,
    CoordinatorLoadInProgressError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    OnceStreamError,
    ProducerFencedError,
    TransactionalIdAuthorizationFailedError,
)

_S = TxnState
_PREPARED = frozenset({_S.PREPARE_COMMIT, _S.PREPARE_ABORT})
_IDLE = frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT})
_log = logging.getLogger(__name__)


class TransactionCoordinator:
    """Owns every transactional id of this broker's ``__transaction_state``; see module docstring.

    ``allocate_producer_id`` hands out producer ids that never repeat (the broker's durable
    allocator); ``offsets_partition_for(group_id)`` is the group's ``__consumer_offsets``
    partition. Until :meth:`load` has run, requests answer COORDINATOR_LOAD_IN_PROGRESS.
    """

    def __init__(
        self,
        config: TxnCoordinatorConfig,
        allocate_producer_id: Callable[[], int],
        offsets_partition_for: Callable[[str], int],
    ) -> None:
        self._config = config
        self._allocate_producer_id = allocate_producer_id
        self._offsets_partition_for = offsets_partition_for
        self._txns: dict[str, TransactionMetadata] = {}
        # write id -> transactional id of the pending transition that write carries.
        self._writes: dict[int, str] = {}
        self._next_write_id = 1
        # Writes handed out before the latest load() belong to a discarded in-memory state.
        self._first_live_write_id = 1
        self._loaded = False
        self._coordinator_epoch = 0
        # Monotonic ms at which each Ongoing transaction started / each id last changed state.
        self._timers = TxnTimers()

    # --- loading / recovery -------------------------------------------------------------------

    @property
    def loaded(self) -> bool:
        """Whether :meth:`load` has run (requests are served only then)."""
        return self._loaded

    @property
    def coordinator_epoch(self) -> int:
        """The coordinator epoch given to the latest :meth:`load`; markers carry it."""
        return self._coordinator_epoch

    def load(
        self,
        records: Iterable[tuple[bytes, bytes | None]],
        now_ms: int,
        *,
        coordinator_epoch: int = 0,
        mono_ms: int | None = None,
    ) -> Outcome[None]:
        """Rebuild every transactional id from the transaction log (latest value per key wins,
        tombstones delete) and resume what was prepared but not finished.

        Every transaction left in PrepareCommit/PrepareAbort (a coordinator fence is persisted as
        PrepareAbort with the fencing epoch) comes back as a marker job to perform, or, when it
        has no partitions, directly as its Complete* record. Ongoing transactions keep their
        start time, so their timeouts resume on the next :meth:`tick`. Any state held before is
        discarded, including pending writes (their late callbacks are ignored).
        """
        snapshots = replay(records)
        self._txns = {tid: TransactionMetadata(tid, snap) for tid, snap in snapshots.items()}
        self._writes.clear()
        self._first_live_write_id = self._next_write_id
        self._coordinator_epoch = coordinator_epoch
        self._loaded = True
        mono = now_ms if mono_ms is None else mono_ms
        self._timers.reset(self._txns, now_ms, mono, self._config.transactional_id_expiration_ms)
        writes: list[PendingWrite] = []
        markers: list[MarkerJob] = []
        for tid in sorted(self._txns):
            meta = self._txns[tid]
            if meta.current.state in _PREPARED:
                effect_writes, effect_markers = self._start_completion(meta, now_ms)
                writes.extend(effect_writes)
                markers.extend(effect_markers)
        return Outcome(None, tuple(writes), tuple(markers))

    def prepared_transactions(self) -> tuple[MarkerJob, ...]:
        """Marker jobs of every transaction in PrepareCommit/PrepareAbort with no write in flight
        (what a recovery or a retry after a failed completion still has to finish)."""
        return tuple(
            self._marker_job(meta)
            for tid, meta in sorted(self._txns.items())
            if meta.current.state in _PREPARED and meta.pending is None
        )

    # --- InitProducerId -----------------------------------------------------------------------

    def init_producer_id(
        self,
        transactional_id: str | None,
        transaction_timeout_ms: int,
        now_ms: int,
        *,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        enable_2pc: bool = False,
        keep_prepared_txn: bool = False,
    ) -> Outcome[InitProducerIdResponse]:
        """InitProducerId. A new transactional id gets a new producer id at epoch 0; a known one
        gets its epoch bumped (KIP-360 rules for ``producer_id``/``producer_epoch``). An Ongoing
        transaction is aborted with a fencing epoch and the caller gets CONCURRENT_TRANSACTIONS
        until that completes, unless ``keep_prepared_txn`` keeps a KIP-939 two-phase-commit
        transaction open and returns its identity in ``ongoing_txn_producer_*``.
        """
        try:
            return self._init_producer_id(
                transactional_id,
                transaction_timeout_ms,
                now_ms,
                producer_id,
                producer_epoch,
                enable_2pc,
                keep_prepared_txn,
            )
        except OnceStreamError as exc:
            return Outcome(InitProducerIdResponse(exc.code))

    def _init_producer_id(
        self,
        transactional_id: str | None,
        timeout_ms: int,
        now_ms: int,
        producer_id: int,
        producer_epoch: int,
        enable_2pc: bool,
        keep_prepared_txn: bool,
    ) -> Outcome[InitProducerIdResponse]:
        if transactional_id is None:
            # Idempotent producer: always a fresh producer id (a clean sequence space, KIP-360).
            if enable_2pc or keep_prepared_txn:
                raise InvalidRequestError("2PC needs a transactional id")
            return Outcome(InitProducerIdResponse(ErrorCode.none, self._allocate_producer_id(), 0))
        self._ensure_loaded()
        if not transactional_id:
            raise InvalidRequestError("empty transactional id")
        if enable_2pc and not self._config.two_phase_commit_enable:
            # KIP-939: an authorization failure, so that a client cannot probe the broker setting.
            raise TransactionalIdAuthorizationFailedError(
                "transaction.two.phase.commit.enable is false"
            )
        if not enable_2pc and not 0 < timeout_ms <= self._config.transaction_max_timeout_ms:
            raise InvalidTransactionTimeoutError(
                f"transaction timeout {timeout_ms} ms not in (0, "
                f"{self._config.transaction_max_timeout_ms}]"
            )
        # KIP-939: a two-phase-commit transaction never times out (Kafka stores Integer.MAX).
        resolved_timeout_ms = TWO_PHASE_COMMIT_TIMEOUT_MS if enable_2pc else timeout_ms
        expected = expected_identity(producer_id, producer_epoch)

        meta = self._txns.get(transactional_id)
        if meta is None:
            snapshot = TxnSnapshot.fresh(self._allocate_producer_id(), resolved_timeout_ms, now_ms)
            meta = TransactionMetadata(transactional_id, snapshot)
            self._txns[transactional_id] = meta
        if meta.pending is not None:
            raise ConcurrentTransactionsError(f"{transactional_id}: a transition is in flight")
        s = meta.current
        if expected is not None and not is_valid_expected_producer_id(s, expected):
            raise ProducerFencedError(f"{transactional_id}: producer id {expected[0]} is stale")

        if s.state in _PREPARED:
            raise ConcurrentTransactionsError(f"{transactional_id}: completing {s.state.value}")
        if s.state in _IDLE:
            if s.is_epoch_exhausted and (expected is None or expected[1] == s.producer_epoch):
                target = m.rotate_producer_id(
                    s,
                    self._allocate_producer_id(),
                    timeout_ms=resolved_timeout_ms,
                    two_phase_commit=enable_2pc,
                    remember_last=expected is not None,
                    now_ms=now_ms,
                )
            else:
                target = m.bump_epoch_for_init(
                    s,
                    timeout_ms=resolved_timeout_ms,
                    two_phase_commit=enable_2pc,
                    expected=expected,
                    now_ms=now_ms,
                )
            write = self._prepare(
                meta,
                WriteKind.INIT_PRODUCER_ID,
                target,
                respond=init_response,
                respond_error=InitProducerIdResponse,
            )
            return Outcome(None, (write,))
        if s.state is not _S.ONGOING:
            raise CoordinatorInvariantError(str(s.state))
        if keep_prepared_txn:
            return self._keep_prepared(meta, expected, resolved_timeout_ms, enable_2pc, now_ms)
        # Abort the open transaction first, fencing its producer; the client retries and its next
        # InitProducerId bumps the epoch again (or rotates the id if the fence exhausted it).
        write = self._prepare_fence(meta, now_ms)
        return Outcome(InitProducerIdResponse(ErrorCode.concurrent_transactions), (write,))

    def _keep_prepared(
        self,
        meta: TransactionMetadata,
        expected: tuple[int, int] | None,
        timeout_ms: int,
        enable_2pc: bool,
        now_ms: int,
    ) -> Outcome[InitProducerIdResponse]:
        s = meta.current
        if not s.two_phase_commit:
            # Only a 2PC transaction is exempt from the timeout, so only it can be "prepared".
            raise InvalidTxnStateError(f"{meta.transactional_id}: the open transaction is not 2PC")
        if expected is not None and expected[1] != s.producer_epoch:
            raise ProducerFencedError(f"{meta.transactional_id}: epoch {expected[1]} is stale")
        if s.is_epoch_exhausted:
            client_id, client_epoch = self._allocate_producer_id(), 0
        else:
            client_id, client_epoch = s.producer_id, s.producer_epoch + 1
        target = m.keep_prepared(
            s,
            client_id,
            client_epoch,
            timeout_ms=timeout_ms,
            two_phase_commit=enable_2pc,
            now_ms=now_ms,
        )
        write = self._prepare(
            meta,
            WriteKind.KEEP_PREPARED,
            target,
            respond=keep_prepared_response,
            respond_error=InitProducerIdResponse,
        )
        return Outcome(None, (write,))

    # --- AddPartitionsToTxn / AddOffsetsToTxn / verification ----------------------------------

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
        now_ms: int,
        *,
        transaction_version: int = 1,
    ) -> Outcome[AddPartitionsResponse]:
        """AddPartitionsToTxn (client form, or the broker's implicit add with version 2): the
        partitions join the transaction, which becomes Ongoing once the record is durable."""
        parts = tuple(partitions)
        try:
            return self._add_partitions(
                transactional_id, producer_id, producer_epoch, parts, now_ms, transaction_version
            )
        except OnceStreamError as exc:
            return Outcome(AddPartitionsResponse(exc.code, parts))

    def add_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        now_ms: int,
        *,
        transaction_version: int = 1,
    ) -> Outcome[AddPartitionsResponse]:
        """AddOffsetsToTxn (KIP-98/KIP-447): the group's ``__consumer_offsets`` partition joins the
        transaction, so the commit/abort marker also settles the group's pending offsets."""
        partition = TopicPartition(CONSUMER_OFFSETS_TOPIC, self._offsets_partition_for(group_id))
        return self.add_partitions(
            transactional_id,
            producer_id,
            producer_epoch,
            (partition,),
            now_ms,
            transaction_version=transaction_version,
        )

    def _add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: tuple[TopicPartition, ...],
        now_ms: int,
        transaction_version: int,
    ) -> Outcome[AddPartitionsResponse]:
        _check_transaction_version(transaction_version)
        meta = self._current_for_producer(transactional_id, producer_id, producer_epoch)
        s = meta.current
        if meta.pending is not None or s.state in _PREPARED:
            raise ConcurrentTransactionsError(f"{transactional_id}: a transition is in flight")
        if s.has_kept_transaction:
            # KIP-939: a prepared transaction kept by a new instance may only be committed or
            # aborted; adding partitions would mix new writes into it.
            raise InvalidTxnStateError(f"{transactional_id}: the kept transaction is prepared")
        if not partitions or (s.state is _S.ONGOING and set(partitions) <= s.partitions):
            return Outcome(AddPartitionsResponse(ErrorCode.none, partitions))
        target = m.add_partitions(
            s, partitions, transaction_version=transaction_version, now_ms=now_ms
        )
        write = self._prepare(
            meta,
            WriteKind.ADD_PARTITIONS,
            target,
            respond=lambda _snap: AddPartitionsResponse(ErrorCode.none, partitions),
            respond_error=lambda error: AddPartitionsResponse(error, partitions),
        )
        return Outcome(None, (write,))

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> VerifyPartitionsResponse:
        """KIP-890 part 1: before a transactional produce is appended, check that the partition is
        in the producer's ongoing transaction. Per partition NONE, or INVALID_TXN_STATE for one
        that was not added; one error for all when the producer itself is wrong."""
        try:
            self._ensure_loaded()
        except OnceStreamError as exc:
            return VerifyPartitionsResponse(dict.fromkeys(partitions, exc.code))
        if not transactional_id:
            return VerifyPartitionsResponse(dict.fromkeys(partitions, ErrorCode.invalid_request))
        meta = self._txns.get(transactional_id)
        return VerifyPartitionsResponse(verify_snapshot(
            None if meta is None else meta.current, producer_id, producer_epoch, partitions))

    # --- EndTxn -------------------------------------------------------------------------------

    def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        now_ms: int,
        *,
        transaction_version: int = 1,
    ) -> Outcome[EndTxnResponse]:
        """EndTxn. Ongoing -> PrepareCommit/PrepareAbort (persisted; the response is sent then,
        the outcome is decided) -> markers -> CompleteCommit/CompleteAbort (persisted).

        ``transaction_version`` 2 (KIP-890 part 2) bumps the epoch on every commit and abort and
        returns the new producer id/epoch; retries are recognised by the previous identity.
        """
        try:
            _check_transaction_version(transaction_version)
            self._ensure_loaded()
            if not transactional_id:
                raise InvalidRequestError("empty transactional id")
            if transaction_version >= 2:
                return self._end_txn_v2(
                    transactional_id, producer_id, producer_epoch, commit, now_ms
                )
            return self._end_txn_v1(transactional_id, producer_id, producer_epoch, commit, now_ms)
        except OnceStreamError as exc:
            return Outcome(EndTxnResponse(exc.code))

    def _end_txn_v1(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        now_ms: int,
    ) -> Outcome[EndTxnResponse]:
        meta = self._current_for_producer(transactional_id, producer_id, producer_epoch)
        s = meta.current
        if meta.pending is not None:
            raise ConcurrentTransactionsError(f"{transactional_id}: a transition is in flight")
        wanted_prepare = _S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT
        wanted_complete = _S.COMPLETE_COMMIT if commit else _S.COMPLETE_ABORT
        if s.state is _S.ONGOING:
            target = m.prepare_end(
                s,
                commit=commit,
                transaction_version=1,
                next_producer_id=NO_PRODUCER_ID,
                now_ms=now_ms,
            )
            return self._prepare_end_write(meta, target, version=1)
        if s.state is wanted_complete:
            return Outcome(EndTxnResponse(ErrorCode.none))  # retry of a finished EndTxn
        if s.state is wanted_prepare:
            raise ConcurrentTransactionsError(f"{transactional_id}: still writing markers")
        raise InvalidTxnStateError(
            f"{transactional_id}: {'commit' if commit else 'abort'} in state {s.state.value}"
        )

    def _end_txn_v2(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        now_ms: int,
    ) -> Outcome[EndTxnResponse]:
        meta = self._txns.get(transactional_id)
        if meta is None:
            raise InvalidProducerIdMappingError(f"{transactional_id}: unknown transactional id")
        s = meta.current
        # With version 2, state + same epoch does not identify a retry (the same epoch starts the
        # next transaction); a retry carries the identity from before the bump.
        # Only a state reached by a version-2 EndTxn holds that identity (a version-1 state may
        # hold an InitProducerId retry identity, which must not pass for an EndTxn retry).
        is_retry = (
            s.state in (_PREPARED | {_S.COMPLETE_COMMIT, _S.COMPLETE_ABORT})
            and s.supports_epoch_bump
            and s.last_identity == (producer_id, producer_epoch)
        )
        if producer_id != s.producer_id and not is_retry:
            raise InvalidProducerIdMappingError(f"{transactional_id}: producer id {producer_id}")
        if meta.pending is not None:
            raise ConcurrentTransactionsError(f"{transactional_id}: a transition is in flight")
        if s.state in _PREPARED:
            epoch_ok = is_retry
        elif s.state in (_S.COMPLETE_COMMIT, _S.COMPLETE_ABORT):
            epoch_ok = is_retry or producer_epoch == s.producer_epoch
        else:
            epoch_ok = producer_epoch == s.producer_epoch
        if not epoch_ok:
            raise ProducerFencedError(f"{transactional_id}: epoch {producer_epoch} is not current")

        def prepare(target_commit: bool) -> Outcome[EndTxnResponse]:
            next_id = self._allocate_producer_id() if s.is_epoch_exhausted else NO_PRODUCER_ID
            target = m.prepare_end(
                s,
                commit=target_commit,
                transaction_version=2,
                next_producer_id=next_id,
                now_ms=now_ms,
            )
            return self._prepare_end_write(meta, target, version=2)

        invalid = InvalidTxnStateError(
            f"{transactional_id}: {'commit' if commit else 'abort'} in state {s.state.value}"
        )
        if s.state is _S.ONGOING:
            return prepare(commit)
        if s.state is _S.COMPLETE_COMMIT:
            if commit and is_retry:
                return Outcome(EndTxnResponse(ErrorCode.none, s.producer_id, s.producer_epoch))
            if not commit and not is_retry:
                return prepare(False)  # a version-2 client may always abort
            raise invalid
        if s.state is _S.COMPLETE_ABORT:
            if not commit and is_retry:
                return Outcome(EndTxnResponse(ErrorCode.none, s.producer_id, s.producer_epoch))
            if not commit:
                return prepare(False)
            raise invalid
        if s.state is _S.EMPTY:
            if not commit:
                return prepare(False)
            raise invalid
        # PrepareCommit / PrepareAbort: the same decision retried waits for the markers.
        if (s.state is _S.PREPARE_COMMIT) == commit:
            raise ConcurrentTransactionsError(f"{transactional_id}: still writing markers")
        raise invalid

    def _prepare_end_write(
        self, meta: TransactionMetadata, target: TxnSnapshot, *, version: int
    ) -> Outcome[EndTxnResponse]:
        def respond(snap: TxnSnapshot) -> EndTxnResponse:
            if version < 2:
                return EndTxnResponse(ErrorCode.none)
            if snap.next_producer_id != NO_PRODUCER_ID:
                return EndTxnResponse(ErrorCode.none, snap.next_producer_id, 0)
            return EndTxnResponse(ErrorCode.none, snap.producer_id, snap.producer_epoch)

        write = self._prepare(
            meta, WriteKind.END_TXN, target, respond=respond, respond_error=EndTxnResponse
        )
        return Outcome(None, (write,))

    # --- callbacks from the embedding layer ---------------------------------------------------

    def on_persisted(self, write_id: int, now_ms: int, *, mono_ms: int | None = None) -> Outcome[object]:
        """The record of ``write_id`` is durable: apply its transition. Returns the deferred
        response of the request that made the write (if any) and the next effects (markers after
        a Prepare*, the Complete* record of a transaction without partitions)."""
        meta = self._meta_for_write(write_id)
        if meta is None:
            return Outcome()
        was_ongoing = meta.current.state is _S.ONGOING
        pending = meta.complete(write_id)
        tid = meta.transactional_id
        if pending.kind is WriteKind.EXPIRE:
            del self._txns[tid]
            self._timers.forget(tid)
            return Outcome()
        mono = now_ms if mono_ms is None else mono_ms
        self._timers.on_transition(tid, was_ongoing, meta.current.state is _S.ONGOING, mono)
        response = pending.respond(meta.current) if pending.respond is not None else None
        writes: tuple[PendingWrite, ...] = ()
        markers: tuple[MarkerJob, ...] = ()
        if meta.current.state in _PREPARED:
            writes, markers = self._start_completion(meta, now_ms)
        return Outcome(response, writes, markers)

    def on_persist_failed(
        self, write_id: int, error: ErrorCode = ErrorCode.coordinator_not_available
    ) -> Outcome[object]:
        """The record of ``write_id`` could not be made durable: drop the transition (the state is
        as before) and answer the waiting request with ``error``. A failed Complete* write hands
        its marker job out again: markers are idempotent, and the retry ends in markers_written.
        """
        meta = self._meta_for_write(write_id)
        if meta is None:
            return Outcome()
        pending = meta.abort_pending(write_id)
        response = pending.respond_error(error) if pending.respond_error is not None else None
        if pending.kind is WriteKind.COMPLETE:
            return Outcome(response, (), (self._marker_job(meta),))
        return Outcome(response)

    def markers_written(
        self, transactional_id: str, producer_id: int, producer_epoch: int, now_ms: int
    ) -> Outcome[None]:
        """Every partition of the marker job for (``producer_id``, ``producer_epoch``) has its
        marker: persist CompleteCommit/CompleteAbort. A stale or duplicate report (the job is no
        longer the transaction's, or its completion is already being written) changes nothing."""
        meta = self._txns.get(transactional_id)
        if meta is None or meta.pending is not None or meta.current.state not in _PREPARED:
            return Outcome()
        if meta.current.marker_identity() != (producer_id, producer_epoch):
            return Outcome()
        return Outcome(None, (self._prepare_complete(meta, now_ms),))

    # --- timers -------------------------------------------------------------------------------

    def tick(self, now_ms: int, *, mono_ms: int | None = None) -> Outcome[None]:
        """Abort transactions Ongoing past their timeout with an epoch bump that fences the stalled
        producer (KIP-939 two-phase-commit transactions never time out), and expire transactional
        ids idle in Empty/Complete* for transactional.id.expiration.ms (tombstone)."""
        if not self._loaded:
            return Outcome()
        writes: list[PendingWrite] = []
        mono = now_ms if mono_ms is None else mono_ms
        for meta, action in self._timers.due(self._txns, mono, self._config.transactional_id_expiration_ms):
            if action is TimerAction.FENCE:
                # Kafka's "Aborting ... due to timeout" line: the stalled producer is fenced.
                _log.info("aborting transaction %s: open longer than its timeout", meta.transactional_id,
                          extra={"event": "transaction_timed_out", "transactional_id": meta.transactional_id,
                                 "producer_id": meta.current.producer_id,
                                 "producer_epoch": meta.current.producer_epoch})
                writes.append(self._prepare_fence(meta, now_ms))
            else:
                writes.append(self._prepare(meta, WriteKind.EXPIRE, _dead(meta.current)))
        return Outcome(None, tuple(writes))

    # --- KIP-664 admin (read-only; the queries live in admin_queries.py) -----------------------

    def describe_transactions(
        self, transactional_ids: Iterable[str]
    ) -> tuple[TransactionDescription, ...]:
        """DescribeTransactions: one entry per id, TRANSACTIONAL_ID_NOT_FOUND for unknown ids."""
        return describe_transactions(self._txns, self._loaded, transactional_ids)

    def list_transactions(
        self,
        now_ms: int,
        *,
        state_filters: Iterable[str] = (),
        producer_id_filters: Iterable[int] = (),
        duration_filter_ms: int = -1,
        transactional_id_pattern: str | None = None,
    ) -> ListTransactionsResponse:
        """ListTransactions (KIP-664, KIP-994 duration filter, KIP-1152 id pattern); see
        :func:`~oncestream.coordinator.txn.admin_queries.list_transactions`."""
        return list_transactions(
            self._txns,
            self._loaded,
            now_ms,
            state_filters=state_filters,
            producer_id_filters=producer_id_filters,
            duration_filter_ms=duration_filter_ms,
            transactional_id_pattern=transactional_id_pattern,
        )

    def transaction_counts(self, now_ms: int) -> TransactionCounts:
        """Open, prepared (KIP-939) and completing transactions and the oldest one's age, for the
        broker's metrics; see :func:`~oncestream.coordinator.txn.admin_queries.transaction_counts`."""
        return transaction_counts(self._txns, now_ms)

    @property
    def transaction_max_timeout_ms(self) -> int:
        """``transaction.max.timeout.ms``: an open transaction in a partition older than this is
        hanging (Kafka's kafka-transactions.sh find-hanging rule)."""
        return self._config.transaction_max_timeout_ms

    # --- internals ----------------------------------------------------------------------------

    def _ensure_loaded(self) -> None:
        if not self._loaded:
            raise CoordinatorLoadInProgressError("transaction log not loaded yet")

    def _current_for_producer(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> TransactionMetadata:
        """The metadata of ``transactional_id`` if (producer_id, producer_epoch) is its current
        client identity; the matching error otherwise (Kafka's order of checks)."""
        self._ensure_loaded()
        if not transactional_id:
            raise InvalidRequestError("empty transactional id")
        meta = self._txns.get(transactional_id)
        if meta is None or meta.current.producer_id != producer_id:
            raise InvalidProducerIdMappingError(
                f"{transactional_id}: producer id {producer_id} is not mapped to it"
            )
        if meta.current.producer_epoch != producer_epoch:
            raise ProducerFencedError(
                f"{transactional_id}: epoch {producer_epoch}, current {meta.current.producer_epoch}"
            )
        return meta

    def _prepare(
        self,
        meta: TransactionMetadata,
        kind: WriteKind,
        target: TxnSnapshot,
        *,
        respond: Callable[[TxnSnapshot], object] | None = None,
        respond_error: Callable[[ErrorCode], object] | None = None,
        via: TxnState | None = None,
    ) -> PendingWrite:
        """Prepare ``meta``'s transition to ``target`` and hand out the record carrying it."""
        write_id = self._next_write_id
        pending = PendingTransition(
            write_id=write_id,
            kind=kind,
            target=target,
            pending_state=via if via is not None else target.state,
            respond=respond,
            respond_error=respond_error,
        )
        meta.prepare(pending, via=via)
        self._next_write_id += 1
        self._writes[write_id] = meta.transactional_id
        value = None if target.state is _S.DEAD else encode_value(target)
        key = encode_key(meta.transactional_id)
        return PendingWrite(write_id, meta.transactional_id, key, value)

    def _prepare_fence(self, meta: TransactionMetadata, now_ms: int) -> PendingWrite:
        """Ongoing -> (PrepareEpochFence) -> PrepareAbort with the fencing epoch, one record."""
        target = m.fence_and_abort(meta.current, now_ms=now_ms)
        return self._prepare(meta, WriteKind.FENCE, target, via=_S.PREPARE_EPOCH_FENCE)

    def _prepare_complete(self, meta: TransactionMetadata, now_ms: int) -> PendingWrite:
        return self._prepare(meta, WriteKind.COMPLETE, m.complete(meta.current, now_ms=now_ms))

    def _start_completion(
        self, meta: TransactionMetadata, now_ms: int
    ) -> tuple[tuple[PendingWrite, ...], tuple[MarkerJob, ...]]:
        """A Prepare* is durable: markers for its partitions, or straight to Complete* without."""
        if not (meta.current.state in _PREPARED and meta.pending is None):
            raise CoordinatorInvariantError(
                f"transaction {meta.transactional_id}: completion starts only from a durable Prepare state with "
                f"no transition in flight, but it is {meta.current.state.name} with pending {meta.pending}")
        if meta.current.partitions:
            return (), (self._marker_job(meta),)
        return (self._prepare_complete(meta, now_ms),), ()

    def _marker_job(self, meta: TransactionMetadata) -> MarkerJob:
        s = meta.current
        if s.state not in _PREPARED:
            raise CoordinatorInvariantError(
                f"transaction {meta.transactional_id}: markers are written only from a Prepare state, not {s.state.name}")
        producer_id, epoch = s.marker_identity()
        return MarkerJob(
            transactional_id=meta.transactional_id,
            producer_id=producer_id,
            producer_epoch=epoch,
            commit=s.state is _S.PREPARE_COMMIT,
            partitions=tuple(sorted(s.partitions)),
            coordinator_epoch=self._coordinator_epoch,
            transaction_version=max(1, s.client_transaction_version),
        )

    def _meta_for_write(self, write_id: int) -> TransactionMetadata | None:
        if write_id < self._first_live_write_id:
            return None  # handed out before the latest load(); that state is gone
        tid = self._writes.pop(write_id, None)
        if tid is None:
            raise CoordinatorInvariantError(f"write {write_id} is unknown or already settled")
        return self._txns[tid]


def _check_transaction_version(version: int) -> None:
    if version not in (0, 1, 2):
        raise InvalidRequestError(f"unknown transaction version {version}")


def _dead(s: TxnSnapshot) -> TxnSnapshot:
    """The target of an expiry: Dead is never persisted as a value (the record is a tombstone)."""
    return dataclasses.replace(s, state=_S.DEAD)
