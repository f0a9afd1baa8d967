"""Transaction coordinator behaviour, request by request (KIP-98, KIP-360, KIP-447, KIP-664,
KIP-890, KIP-939), and recovery from the transaction log.

The ``Lead`` below plays the broker's part: it appends records to an in-memory transaction log,
reports them durable, writes markers and reports them written, so every test drives the real
"persist before acting" protocol.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from kio.schema.errors import ErrorCode as E

from oncestream.coordinator.txn import (
    CONSUMER_OFFSETS_TOPIC,
    MAX_PRODUCER_EPOCH,
    TWO_PHASE_COMMIT_TIMEOUT_MS,
    EndTxnResponse,
    InitProducerIdResponse,
    MarkerJob,
    Outcome,
    TopicPartition,
    TransactionCoordinator,
    TxnCoordinatorConfig,
    TxnState,
)
from oncestream.coordinator.txn.metadata import TxnSnapshot
from oncestream.coordinator.txn.records import decode_key, decode_value, encode_key, encode_value
from oncestream.errors import InvalidConfigError
from tests.support.narrow import of_type, present

S = TxnState
A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
TIMEOUT_MS = 60_000


def offsets_partition_for(group_id: str) -> int:
    return len(group_id) % 50


class Lead:
    """Performs the coordinator's effects like the broker will, with a controllable clock."""

    def __init__(self, config: TxnCoordinatorConfig | None = None, first_pid: int = 1000) -> None:
        self.config = config or TxnCoordinatorConfig(two_phase_commit_enable=True)
        self._pids = itertools.count(first_pid)
        self.log: list[tuple[bytes, bytes | None]] = []
        self.markers: list[MarkerJob] = []
        self.now = 1_000_000
        self.coord = self._new_coordinator()
        self.coord.load([], self.now)

    def _new_coordinator(self) -> TransactionCoordinator:
        return TransactionCoordinator(self.config, lambda: next(self._pids), offsets_partition_for)

    def run(self, outcome: Outcome, *, write_markers: bool = True):
        """Perform every effect until nothing is left; return the response (immediate or the one
        deferred until its record was durable), None if there is none."""
        responses = [outcome.response] if outcome.response is not None else []
        writes, jobs = list(outcome.records_to_persist), list(outcome.markers_to_write)
        while writes or (write_markers and jobs):
            if writes:
                write = writes.pop(0)
                self.log.append((write.key, write.value))
                nxt: Outcome[object] | Outcome[None] = self.coord.on_persisted(write.write_id, self.now)
            else:
                job = jobs.pop(0)
                self.markers.append(job)
                nxt = self.coord.markers_written(
                    job.transactional_id, job.producer_id, job.producer_epoch, self.now
                )
            if nxt.response is not None:
                responses.append(nxt.response)
            writes += nxt.records_to_persist
            jobs += nxt.markers_to_write
        if not write_markers:
            self.unwritten_markers = jobs
        assert len(responses) <= 1, responses
        return responses[0] if responses else None

    def restart(self) -> Outcome:
        """A new coordinator process loading the transaction log as it is on disk."""
        self.coord = self._new_coordinator()
        return self.coord.load(list(self.log), self.now)

    # --- request helpers ---------------------------------------------------------------------

    def init(self, tid: str = "t", timeout_ms: int = TIMEOUT_MS, **kw):
        return self.run(self.coord.init_producer_id(tid, timeout_ms, self.now, **kw))

    def add(self, tid, pid, epoch, parts=(A0,), tv=1):
        return self.run(
            self.coord.add_partitions(tid, pid, epoch, parts, self.now, transaction_version=tv)
        )

    def end(self, tid, pid, epoch, commit, tv=1, **kw):
        return self.run(
            self.coord.end_txn(tid, pid, epoch, commit, self.now, transaction_version=tv), **kw
        )

    def tick(self, **kw):
        return self.run(self.coord.tick(self.now), **kw)

    def describe(self, tid: str = "t"):
        (description,) = self.coord.describe_transactions([tid])
        return description

    def state(self, tid: str = "t") -> str:
        return self.describe(tid).state


def started(lead: Lead, tid: str = "t", parts=(A0, A1), tv: int = 1, **kw) -> tuple[int, int]:
    """InitProducerId then AddPartitions: an Ongoing transaction; returns (pid, epoch)."""
    r = lead.init(tid, **kw)
    assert r.error == E.none
    assert lead.add(tid, r.producer_id, r.producer_epoch, parts, tv=tv).error == E.none
    return r.producer_id, r.producer_epoch


def snapshot_record(tid: str, **fields) -> tuple[bytes, bytes]:
    """A transaction-log record holding a hand-made snapshot."""
    base = TxnSnapshot.fresh(fields.pop("producer_id", 7), TIMEOUT_MS, 0)
    return encode_key(tid), encode_value(dataclasses.replace(base, **fields))


# --- InitProducerId -----------------------------------------------------------------------------


def test_init_new_transactional_id_allocates_a_producer_id_at_epoch_zero() -> None:
    lead = Lead()
    outcome = lead.coord.init_producer_id("t", TIMEOUT_MS, lead.now)
    # Persist before acting: no answer until the record is durable.
    assert outcome.response is None
    assert len(outcome.records_to_persist) == 1
    write = outcome.records_to_persist[0]
    assert decode_key(write.key) == "t"
    assert decode_value(present(write.value, "record value")).producer_epoch == 0
    assert lead.describe().pending_state == "Empty"
    response = of_type(lead.coord.on_persisted(write.write_id, lead.now).response, InitProducerIdResponse)
    assert (response.error, response.producer_id, response.producer_epoch) == (E.none, 1000, 0)
    assert lead.describe().pending_state == ""


def test_init_existing_id_bumps_the_epoch_of_the_same_producer_id() -> None:
    lead = Lead()
    first = lead.init()
    second = lead.init()
    assert (second.producer_id, second.producer_epoch) == (first.producer_id, 1)
    assert lead.state() == "Empty"


def test_init_rejects_bad_requests() -> None:
    lead = Lead(TxnCoordinatorConfig(transaction_max_timeout_ms=10_000))
    assert lead.init("", 1000).error == E.invalid_request
    assert lead.init("t", 10_001).error == E.invalid_transaction_timeout
    assert lead.init("t", 0).error == E.invalid_transaction_timeout
    assert lead.init("t", 10_000).error == E.none
    # KIP-360: producer id and epoch come together or not at all.
    assert lead.init("t", 1000, producer_id=1000, producer_epoch=-1).error == E.invalid_request


def test_init_without_transactional_id_always_hands_out_a_fresh_producer_id() -> None:
    lead = Lead()
    outcomes = [lead.coord.init_producer_id(None, 0, lead.now) for _ in range(2)]
    assert [present(o.response, "response").producer_id for o in outcomes] == [1000, 1001]
    assert all(present(o.response, "response").producer_epoch == 0 and not o.records_to_persist for o in outcomes)


def test_requests_before_load_get_coordinator_load_in_progress() -> None:
    coord = TransactionCoordinator(TxnCoordinatorConfig(), lambda: 1, offsets_partition_for)
    loading = E.coordinator_load_in_progress
    assert present(coord.init_producer_id("t", TIMEOUT_MS, 0).response, "response").error == loading
    assert present(coord.add_partitions("t", 1, 0, [A0], 0).response, "response").error == E.coordinator_load_in_progress
    assert present(coord.end_txn("t", 1, 0, True, 0).response, "response").error == E.coordinator_load_in_progress
    assert coord.verify_partitions("t", 1, 0, [A0]).errors == {A0: E.coordinator_load_in_progress}
    assert coord.describe_transactions(["t"])[0].error == E.coordinator_load_in_progress
    assert coord.list_transactions(0).error == E.coordinator_load_in_progress
    assert coord.tick(0) == Outcome()


def test_init_with_ongoing_transaction_fences_and_aborts_it_first() -> None:
    lead = Lead()
    pid, epoch = started(lead)
    # The new instance is told to retry while the old transaction is aborted with a bumped epoch.
    assert lead.init().error == E.concurrent_transactions
    (job,) = lead.markers
    assert (job.producer_id, job.producer_epoch, job.commit) == (pid, epoch + 1, False)
    assert job.partitions == (A0, A1)
    assert lead.state() == "CompleteAbort"
    # The zombie can neither commit nor add partitions nor bump its own epoch any more.
    assert lead.end("t", pid, epoch, True).error == E.producer_fenced
    assert lead.add("t", pid, epoch).error == E.producer_fenced
    assert lead.init(producer_id=pid, producer_epoch=epoch).error == E.producer_fenced
    retry = lead.init()
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (E.none, pid, epoch + 2)


def test_init_while_markers_are_being_written_answers_concurrent_transactions() -> None:
    lead = Lead()
    pid, epoch = started(lead)
    assert lead.end("t", pid, epoch, True, write_markers=False).error == E.none
    assert lead.state() == "PrepareCommit"
    assert lead.init().error == E.concurrent_transactions
    assert present(lead.coord.end_txn("t", pid, epoch, True, lead.now).response, "response").error == (
        E.concurrent_transactions
    )


def test_any_request_while_a_write_is_in_flight_answers_concurrent_transactions() -> None:
    lead = Lead()
    r = lead.init()
    pending = lead.coord.add_partitions("t", r.producer_id, 0, [A0], lead.now)
    assert pending.response is None
    assert lead.init().error == E.concurrent_transactions
    assert present(lead.coord.add_partitions("t", r.producer_id, 0, [B0], lead.now).response, "response").error == (
        E.concurrent_transactions
    )
    assert lead.run(pending).error == E.none


def test_epoch_exhaustion_moves_to_a_new_producer_id() -> None:
    lead = Lead()
    lead.log.append(snapshot_record("t", producer_id=7, producer_epoch=MAX_PRODUCER_EPOCH - 2))
    lead.restart()
    r = lead.init()
    assert (r.producer_id, r.producer_epoch) == (7, MAX_PRODUCER_EPOCH - 1)  # last usable epoch
    r = lead.init()
    assert (r.producer_id, r.producer_epoch) == (1000, 0)


def test_epoch_exhaustion_with_kip360_retry_returns_the_same_new_producer_id() -> None:
    lead = Lead()
    lead.log.append(snapshot_record("t", producer_id=7, producer_epoch=MAX_PRODUCER_EPOCH - 1))
    lead.restart()
    r = lead.init(producer_id=7, producer_epoch=MAX_PRODUCER_EPOCH - 1)
    assert (r.producer_id, r.producer_epoch) == (1000, 0)
    # The response was lost; the producer retries with its old identity and gets the same answer.
    again = lead.init(producer_id=7, producer_epoch=MAX_PRODUCER_EPOCH - 1)
    assert (again.error, again.producer_id, again.producer_epoch) == (E.none, 1000, 0)


def test_kip360_bump_with_current_identity_and_retry_and_stale_identity() -> None:
    lead = Lead()
    r = lead.init()
    lead.init()  # epoch 1
    bumped = lead.init(producer_id=r.producer_id, producer_epoch=1)
    assert (bumped.producer_id, bumped.producer_epoch) == (r.producer_id, 2)
    # A retry of that request (response lost) returns the same epoch without bumping again.
    retry = lead.init(producer_id=r.producer_id, producer_epoch=1)
    assert (retry.error, retry.producer_epoch) == (E.none, 2)
    # An older epoch is a zombie; another producer id is not this transactional id's.
    assert lead.init(producer_id=r.producer_id, producer_epoch=0).error == E.producer_fenced
    assert lead.init(producer_id=r.producer_id + 5, producer_epoch=2).error == E.producer_fenced
    # A new instance (no identity) bumps and forgets the retry identity.
    assert lead.init().producer_epoch == 3
    assert lead.init(producer_id=r.producer_id, producer_epoch=1).error == E.producer_fenced


def test_kip360_retry_succeeds_even_when_the_bump_exhausted_the_epoch() -> None:
    lead = Lead()
    lead.log.append(snapshot_record("t", producer_id=7, producer_epoch=MAX_PRODUCER_EPOCH - 2))
    lead.restart()
    r = lead.init(producer_id=7, producer_epoch=MAX_PRODUCER_EPOCH - 2)
    assert (r.producer_id, r.producer_epoch) == (7, MAX_PRODUCER_EPOCH - 1)
    again = lead.init(producer_id=7, producer_epoch=MAX_PRODUCER_EPOCH - 2)
    assert (again.error, again.producer_id, again.producer_epoch) == (
        E.none, 7, MAX_PRODUCER_EPOCH - 1,
    )  # fmt: skip


def test_kip360_identity_on_an_expired_id_gets_a_new_producer_id() -> None:
    lead = Lead()
    r = lead.init(producer_id=4242, producer_epoch=3)
    assert (r.error, r.producer_id, r.producer_epoch) == (E.none, 1000, 0)


# --- AddPartitionsToTxn / AddOffsetsToTxn / verify-only ------------------------------------------


def test_add_partitions_starts_the_transaction_and_accumulates_partitions() -> None:
    lead = Lead()
    r = lead.init()
    start_ms = lead.now
    assert lead.add("t", r.producer_id, 0, (A0,)).error == E.none
    lead.now += 50
    assert lead.add("t", r.producer_id, 0, (B0, A0)).error == E.none
    d = lead.describe()
    assert (d.state, d.partitions, d.transaction_start_time_ms) == ("Ongoing", (A0, B0), start_ms)
    assert d.last_update_time_ms == lead.now
    # Partitions already in the transaction: answered at once, nothing written.
    outcome = lead.coord.add_partitions("t", r.producer_id, 0, [A0], lead.now)
    assert present(outcome.response, "response").error == E.none
    assert not outcome.records_to_persist


def test_add_partitions_errors() -> None:
    lead = Lead()
    pid, epoch = started(lead)
    assert lead.add("nope", pid, epoch).error == E.invalid_producer_id_mapping
    assert lead.add("t", pid + 1, epoch).error == E.invalid_producer_id_mapping
    assert lead.add("t", pid, epoch - 1 if epoch else epoch + 1).error == E.producer_fenced
    assert lead.add("", pid, epoch).error == E.invalid_request
    lead.end("t", pid, epoch, True, write_markers=False)
    assert lead.add("t", pid, epoch, (B0,)).error == E.concurrent_transactions
    response = present(lead.coord.add_partitions("t", pid, epoch, [A0, B0], lead.now).response, "response")
    assert response.partitions == (A0, B0)


def test_add_offsets_adds_the_groups_consumer_offsets_partition() -> None:
    lead = Lead()
    r = lead.init()
    outcome = lead.coord.add_offsets("t", r.producer_id, 0, "group-1", lead.now)
    assert lead.run(outcome).error == E.none
    offsets_tp = TopicPartition(CONSUMER_OFFSETS_TOPIC, offsets_partition_for("group-1"))
    assert lead.describe().partitions == (offsets_tp,)
    lead.end("t", r.producer_id, 0, True)
    assert lead.markers[-1].partitions == (offsets_tp,)
    assert lead.markers[-1].commit


def test_verify_partitions_accepts_only_partitions_of_the_ongoing_transaction() -> None:
    lead = Lead()
    r = lead.init()
    pid = r.producer_id
    # KIP-890 part 1: a produce to a partition never added is rejected, also with no transaction.
    assert lead.coord.verify_partitions("t", pid, 0, [A0]).errors == {A0: E.invalid_txn_state}
    lead.add("t", pid, 0, (A0,))
    errors = lead.coord.verify_partitions("t", pid, 0, [A0, B0]).errors
    assert errors == {A0: E.none, B0: E.invalid_txn_state}
    assert lead.coord.verify_partitions("t", pid, 1, [A0]).errors == {A0: E.producer_fenced}
    assert lead.coord.verify_partitions("t", pid + 1, 0, [A0]).errors == {
        A0: E.invalid_producer_id_mapping
    }
    assert lead.coord.verify_partitions("x", pid, 0, [A0]).errors == {
        A0: E.invalid_producer_id_mapping
    }
    lead.end("t", pid, 0, False, write_markers=False)
    assert lead.coord.verify_partitions("t", pid, 0, [A0]).errors == {
        A0: E.concurrent_transactions
    }
    lead.run(Outcome(markers_to_write=tuple(lead.unwritten_markers)))
    # The finished transaction's partitions are gone: a late produce cannot join it.
    assert lead.coord.verify_partitions("t", pid, 0, [A0]).errors == {A0: E.invalid_txn_state}


# --- EndTxn -------------------------------------------------------------------------------------


@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_prepares_writes_markers_then_completes(commit: bool) -> None:
    lead = Lead()
    lead.coord.load([], lead.now, coordinator_epoch=3)
    pid, epoch = started(lead)
    outcome = lead.coord.end_txn("t", pid, epoch, commit, lead.now)
    assert outcome.response is None
    assert not outcome.markers_to_write
    (prepare,) = outcome.records_to_persist
    assert decode_value(present(prepare.value, "record value")).state is (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT)
    after_prepare = lead.coord.on_persisted(prepare.write_id, lead.now)
    # The decision is durable: the client is answered, and only now are markers handed out.
    assert of_type(after_prepare.response, EndTxnResponse).error == E.none
    (job,) = after_prepare.markers_to_write
    assert job == MarkerJob("t", pid, epoch, commit, (A0, A1), 3, 1)
    assert lead.state() == ("PrepareCommit" if commit else "PrepareAbort")
    completion = lead.coord.markers_written("t", pid, epoch, lead.now)
    (complete,) = completion.records_to_persist
    assert lead.state() == ("PrepareCommit" if commit else "PrepareAbort")
    assert lead.coord.on_persisted(complete.write_id, lead.now) == Outcome()
    d = lead.describe()
    assert d.state == ("CompleteCommit" if commit else "CompleteAbort")
    assert d.partitions == ()
    assert (d.producer_id, d.producer_epoch) == (pid, epoch)  # version 1 keeps the epoch


def test_end_txn_v1_retries_are_idempotent_and_mismatches_rejected() -> None:
    lead = Lead()
    pid, epoch = started(lead)
    assert lead.end("t", pid, epoch, True, write_markers=False).error == E.none
    assert lead.end("t", pid, epoch, True).error == E.concurrent_transactions
    assert lead.end("t", pid, epoch, False).error == E.invalid_txn_state
    lead.run(Outcome(markers_to_write=tuple(lead.unwritten_markers)))
    assert lead.state() == "CompleteCommit"
    assert lead.end("t", pid, epoch, True).error == E.none
    assert lead.end("t", pid, epoch, False).error == E.invalid_txn_state
    assert lead.end("t", pid, epoch + 1, True).error == E.producer_fenced
    assert lead.end("t", pid + 1, epoch, True).error == E.invalid_producer_id_mapping
    assert lead.end("x", pid, epoch, True).error == E.invalid_producer_id_mapping
    assert len(lead.markers) == 1  # no retry wrote markers again


def test_end_txn_v1_on_an_empty_transaction_is_invalid() -> None:
    lead = Lead()
    r = lead.init()
    assert lead.end("t", r.producer_id, 0, True).error == E.invalid_txn_state
    assert lead.end("t", r.producer_id, 0, False).error == E.invalid_txn_state


@pytest.mark.parametrize("commit", [True, False])
def test_tv2_bumps_the_epoch_on_commit_and_abort(commit: bool) -> None:
    lead = Lead()
    pid, epoch = started(lead, tv=2)
    response = lead.end("t", pid, epoch, commit, tv=2)
    assert (response.error, response.producer_id) == (E.none, pid)
    assert response.producer_epoch == epoch + 1
    (job,) = lead.markers
    # Markers carry the bumped epoch: strictly above every data batch of the transaction.
    assert (job.producer_epoch, job.commit, job.transaction_version) == (epoch + 1, commit, 2)
    assert lead.describe().producer_epoch == epoch + 1
    # The old epoch can no longer add to the next transaction.
    assert lead.add("t", pid, epoch, tv=2).error == E.producer_fenced
    assert lead.add("t", pid, epoch + 1, tv=2).error == E.none


def test_tv2_retries_are_recognised_by_the_previous_epoch() -> None:
    lead = Lead()
    pid, epoch = started(lead, tv=2)
    assert lead.end("t", pid, epoch, True, tv=2, write_markers=False).error == E.none
    assert lead.end("t", pid, epoch, True, tv=2).error == E.concurrent_transactions
    assert lead.end("t", pid, epoch, False, tv=2).error == E.invalid_txn_state
    lead.run(Outcome(markers_to_write=tuple(lead.unwritten_markers)))
    retry = lead.end("t", pid, epoch, True, tv=2)
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (E.none, pid, epoch + 1)
    assert lead.end("t", pid, epoch, False, tv=2).error == E.invalid_txn_state
    # With the current epoch the same commit is a new, empty transaction: invalid.
    assert lead.end("t", pid, epoch + 1, True, tv=2).error == E.invalid_txn_state
    assert lead.end("t", pid, epoch - 1 if epoch else epoch + 5, True, tv=2).error == (
        E.producer_fenced
    )
    assert len(lead.markers) == 1


def test_tv2_retry_identity_comes_only_from_a_version_2_end_txn() -> None:
    lead = Lead()
    r = lead.init()
    lead.init(producer_id=r.producer_id, producer_epoch=0)  # KIP-360 bump: retry identity (pid, 0)
    lead.add("t", r.producer_id, 1)
    lead.end("t", r.producer_id, 1, True)  # version 1: CompleteCommit at epoch 1
    assert lead.end("t", r.producer_id, 0, True, tv=2).error == E.producer_fenced


def test_tv2_abort_without_partitions_completes_without_markers() -> None:
    lead = Lead()
    r = lead.init()
    assert lead.end("t", r.producer_id, 0, True, tv=2).error == E.invalid_txn_state
    response = lead.end("t", r.producer_id, 0, False, tv=2)
    assert (response.error, response.producer_epoch) == (E.none, 1)
    assert lead.markers == []
    assert lead.state() == "CompleteAbort"
    # A TV2 client unsure of the server state may abort again with the current epoch.
    assert lead.end("t", r.producer_id, 1, False, tv=2).producer_epoch == 2
    assert lead.end("t", r.producer_id, 1, False, tv=2).producer_epoch == 2  # retry


def test_tv2_epoch_overflow_moves_to_the_next_producer_id() -> None:
    lead = Lead()
    lead.log.append(
        snapshot_record(
            "t",
            producer_id=7,
            producer_epoch=MAX_PRODUCER_EPOCH - 1,
            state=S.ONGOING,
            partitions=frozenset({A0}),
            start_timestamp_ms=lead.now,
            client_transaction_version=2,
        )
    )
    lead.restart()
    response = lead.end("t", 7, MAX_PRODUCER_EPOCH - 1, True, tv=2)
    assert (response.error, response.producer_id, response.producer_epoch) == (E.none, 1000, 0)
    (job,) = lead.markers
    assert (job.producer_id, job.producer_epoch) == (7, MAX_PRODUCER_EPOCH)
    d = lead.describe()
    assert (d.state, d.producer_id, d.producer_epoch) == ("CompleteCommit", 1000, 0)
    retry = lead.end("t", 7, MAX_PRODUCER_EPOCH - 1, True, tv=2)
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (E.none, 1000, 0)
    assert lead.add("t", 1000, 0, tv=2).error == E.none


def test_markers_written_reports_that_do_not_match_are_ignored() -> None:
    lead = Lead()
    pid, epoch = started(lead)
    lead.end("t", pid, epoch, True, write_markers=False)
    assert lead.coord.markers_written("t", pid, epoch + 1, lead.now) == Outcome()
    assert lead.coord.markers_written("t", pid + 1, epoch, lead.now) == Outcome()
    assert lead.coord.markers_written("other", pid, epoch, lead.now) == Outcome()
    first = lead.coord.markers_written("t", pid, epoch, lead.now)
    assert len(first.records_to_persist) == 1
    assert lead.coord.markers_written("t", pid, epoch, lead.now) == Outcome()  # duplicate


# --- failed writes ------------------------------------------------------------------------------


def test_failed_write_answers_the_error_and_leaves_the_state_unchanged() -> None:
    lead = Lead()
    outcome = lead.coord.init_producer_id("t", TIMEOUT_MS, lead.now)
    failed = lead.coord.on_persist_failed(outcome.records_to_persist[0].write_id, E.not_coordinator)
    failed_init = of_type(failed.response, InitProducerIdResponse)
    assert failed_init.error == E.not_coordinator
    assert failed_init.producer_id == -1
    assert lead.describe().producer_epoch == -1  # never durable
    assert lead.init().producer_epoch == 0
    pid, epoch = 1000, 0
    lead.add("t", pid, epoch)
    end = lead.coord.end_txn("t", pid, epoch, True, lead.now)
    failed = lead.coord.on_persist_failed(end.records_to_persist[0].write_id)
    assert of_type(failed.response, EndTxnResponse).error == E.coordinator_not_available
    assert not failed.markers_to_write
    assert lead.state() == "Ongoing"
    assert lead.end("t", pid, epoch, True).error == E.none
    assert lead.state() == "CompleteCommit"


def test_failed_completion_write_hands_the_marker_job_out_again() -> None:
    lead = Lead()
    pid, epoch = started(lead)
    lead.end("t", pid, epoch, False, write_markers=False)
    (job,) = lead.unwritten_markers
    complete = lead.coord.markers_written("t", pid, epoch, lead.now).records_to_persist[0]
    retried = lead.coord.on_persist_failed(complete.write_id)
    assert retried.markers_to_write == (job,)
    assert lead.state() == "PrepareAbort"
    assert lead.coord.prepared_transactions() == (job,)
    lead.run(retried)
    assert lead.state() == "CompleteAbort"
    assert lead.coord.prepared_transactions() == ()


def test_failed_fence_write_is_retried_with_the_same_epoch() -> None:
    lead = Lead()
    _pid, epoch = started(lead)
    lead.now += TIMEOUT_MS + 1
    first = lead.coord.tick(lead.now)
    (write,) = first.records_to_persist
    assert decode_value(present(write.value, "record value")).producer_epoch == epoch + 1
    lead.coord.on_persist_failed(write.write_id)
    assert lead.state() == "Ongoing"
    assert lead.describe().producer_epoch == epoch
    lead.tick()
    assert lead.markers[-1].producer_epoch == epoch + 1
    assert lead.state() == "CompleteAbort"


def test_late_callbacks_from_before_a_reload_are_ignored() -> None:
    lead = Lead()
    outcome = lead.coord.init_producer_id("t", TIMEOUT_MS, lead.now)
    lead.coord.load([], lead.now)
    assert lead.coord.on_persisted(outcome.records_to_persist[0].write_id, lead.now) == Outcome()
    assert lead.coord.describe_transactions(["t"])[0].error == E.transactional_id_not_found


# --- timeouts and expiry ------------------------------------------------------------------------


def test_timeout_aborts_with_an_epoch_fence() -> None:
    lead = Lead()
    pid, epoch = started(lead)
    lead.now += TIMEOUT_MS  # start + timeout == now: not yet
    assert lead.tick() is None
    assert lead.state() == "Ongoing"
    lead.now += 1
    lead.tick()
    (job,) = lead.markers
    assert (job.producer_id, job.producer_epoch, job.commit) == (pid, epoch + 1, False)
    assert lead.state() == "CompleteAbort"
    # The stalled producer wakes up: it is fenced, it cannot commit what was aborted.
    assert lead.end("t", pid, epoch, True).error == E.producer_fenced
    assert lead.add("t", pid, epoch).error == E.producer_fenced
    assert lead.init().producer_epoch == epoch + 2


def test_fence_is_visible_as_prepare_epoch_fence_while_its_write_is_in_flight() -> None:
    lead = Lead()
    started(lead)
    lead.now += TIMEOUT_MS + 1
    outcome = lead.coord.tick(lead.now)
    d = lead.describe()
    assert (d.state, d.pending_state) == ("Ongoing", "PrepareEpochFence")
    assert lead.coord.tick(lead.now) == Outcome()  # no second abort while one is in flight
    lead.run(outcome)
    assert lead.state() == "CompleteAbort"


def test_transactional_ids_expire_after_inactivity() -> None:
    config = TxnCoordinatorConfig(transactional_id_expiration_ms=1000, two_phase_commit_enable=True)
    lead = Lead(config)
    lead.init("idle")
    started(lead, "busy", timeout_ms=900_000)
    lead.init("done")
    lead.add("done", 1002, 0)
    lead.end("done", 1002, 0, True)
    lead.now += 1000
    outcome = lead.coord.tick(lead.now)
    tombstones = {decode_key(w.key) for w in outcome.records_to_persist if w.value is None}
    assert tombstones == {"idle", "done"}  # an Ongoing transaction never expires
    assert lead.init("idle").error == E.concurrent_transactions  # tombstone in flight
    lead.run(outcome)
    assert [d.error for d in lead.coord.describe_transactions(["idle", "done", "busy"])] == [
        E.transactional_id_not_found, E.transactional_id_not_found, E.none,
    ]  # fmt: skip
    assert lead.log[-1][1] is None
    again = lead.init("idle")
    assert (again.producer_id, again.producer_epoch) == (1003, 0)  # a brand-new producer id


def test_an_id_used_recently_does_not_expire() -> None:
    config = TxnCoordinatorConfig(transactional_id_expiration_ms=1000)
    lead = Lead(config)
    lead.init()
    lead.now += 999
    assert lead.coord.tick(lead.now) == Outcome()
    lead.init()
    lead.now += 999
    assert lead.coord.tick(lead.now) == Outcome()


# --- KIP-939 two-phase commit -------------------------------------------------------------------


def test_2pc_disabled_on_the_broker_is_an_authorization_failure() -> None:
    lead = Lead(TxnCoordinatorConfig())
    assert lead.init(enable_2pc=True).error == E.transactional_id_authorization_failed
    assert present(lead.coord.init_producer_id(None, 0, 0, enable_2pc=True).response, "response").error == (
        E.invalid_request
    )


def test_2pc_transaction_never_times_out() -> None:
    lead = Lead()
    started(lead, enable_2pc=True, timeout_ms=10 * TIMEOUT_MS * 1000)  # above the max: ignored
    d = lead.describe()
    assert d.two_phase_commit
    assert d.transaction_timeout_ms == TWO_PHASE_COMMIT_TIMEOUT_MS
    lead.now += 365 * 24 * 3600 * 1000
    assert lead.tick() is None
    assert lead.state() == "Ongoing"


@pytest.mark.parametrize("commit", [True, False])
def test_keep_prepared_txn_returns_the_ongoing_identity_and_can_complete_it(commit: bool) -> None:
    lead = Lead()
    pid, epoch = started(lead, enable_2pc=True)
    # The producer "prepared" (flushed) and crashed; a new instance recovers without aborting.
    r = lead.init(enable_2pc=True, keep_prepared_txn=True)
    assert (r.error, r.producer_id, r.producer_epoch) == (E.none, pid, epoch + 1)
    assert (r.ongoing_txn_producer_id, r.ongoing_txn_producer_epoch) == (pid, epoch)
    d = lead.describe()
    assert (d.state, d.partitions, lead.markers) == ("Ongoing", (A0, A1), [])
    # The old instance is fenced everywhere.
    assert lead.end("t", pid, epoch, True).error == E.producer_fenced
    assert lead.coord.verify_partitions("t", pid, epoch, [A0]).errors == {A0: E.producer_fenced}
    # The new instance may only complete the prepared transaction: no new data may join it.
    assert lead.add("t", pid, epoch + 1, (B0,)).error == E.invalid_txn_state
    assert lead.coord.verify_partitions("t", pid, epoch + 1, [A0]).errors == {
        A0: E.invalid_txn_state
    }
    assert lead.end("t", pid, epoch + 1, commit).error == E.none
    (job,) = lead.markers
    assert (job.producer_id, job.producer_epoch, job.commit, job.partitions) == (
        pid, epoch + 1, commit, (A0, A1),
    )  # fmt: skip
    d = lead.describe()
    assert d.state == ("CompleteCommit" if commit else "CompleteAbort")
    assert (d.ongoing_txn_producer_id, d.ongoing_txn_producer_epoch) == (-1, -1)


def test_keep_prepared_txn_false_aborts_the_2pc_transaction() -> None:
    lead = Lead()
    pid, epoch = started(lead, enable_2pc=True)
    assert lead.init(enable_2pc=True).error == E.concurrent_transactions
    (job,) = lead.markers
    assert (job.producer_id, job.producer_epoch, job.commit) == (pid, epoch + 1, False)
    r = lead.init(enable_2pc=True)
    assert (r.producer_epoch, r.ongoing_txn_producer_id) == (epoch + 2, -1)


def test_keep_prepared_txn_without_an_ongoing_transaction_is_a_plain_init() -> None:
    lead = Lead()
    lead.init(enable_2pc=True)
    r = lead.init(enable_2pc=True, keep_prepared_txn=True)
    assert (r.error, r.producer_epoch, r.ongoing_txn_producer_id, r.ongoing_txn_producer_epoch) == (
        E.none, 1, -1, -1,
    )  # fmt: skip


def test_keep_prepared_txn_refuses_a_transaction_that_is_not_2pc() -> None:
    lead = Lead()
    started(lead)
    assert lead.init(enable_2pc=True, keep_prepared_txn=True).error == E.invalid_txn_state
    assert lead.state() == "Ongoing"
    assert lead.markers == []


def test_keep_prepared_txn_twice_keeps_the_original_transaction_identity() -> None:
    lead = Lead()
    pid, epoch = started(lead, enable_2pc=True)
    lead.init(enable_2pc=True, keep_prepared_txn=True)
    r = lead.init(enable_2pc=True, keep_prepared_txn=True)  # the recovering instance crashed too
    assert (r.producer_epoch, r.ongoing_txn_producer_id, r.ongoing_txn_producer_epoch) == (
        epoch + 2, pid, epoch,
    )  # fmt: skip
    assert lead.end("t", pid, epoch + 2, True, tv=2).producer_epoch == epoch + 3
    assert lead.markers[-1].producer_epoch == epoch + 3


def test_keep_prepared_txn_with_an_exhausted_epoch_moves_the_client_to_a_new_producer_id() -> None:
    lead = Lead()
    lead.log.append(
        snapshot_record(
            "t",
            producer_id=7,
            producer_epoch=MAX_PRODUCER_EPOCH - 1,
            state=S.ONGOING,
            partitions=frozenset({A0}),
            start_timestamp_ms=lead.now,
            two_phase_commit=True,
            timeout_ms=TWO_PHASE_COMMIT_TIMEOUT_MS,
        )
    )
    lead.restart()
    r = lead.init(enable_2pc=True, keep_prepared_txn=True)
    assert (r.producer_id, r.producer_epoch) == (1000, 0)
    assert (r.ongoing_txn_producer_id, r.ongoing_txn_producer_epoch) == (7, MAX_PRODUCER_EPOCH - 1)
    assert lead.end("t", 1000, 0, True).error == E.none
    (job,) = lead.markers
    # The transaction's own producer id is fenced with the reserved epoch.
    assert (job.producer_id, job.producer_epoch, job.commit) == (7, MAX_PRODUCER_EPOCH, True)
    assert (lead.describe().producer_id, lead.describe().producer_epoch) == (1000, 0)


def test_a_kept_transaction_stays_exempt_from_timeout_whatever_the_new_session_asks() -> None:
    lead = Lead()
    pid, epoch = started(lead, enable_2pc=True)
    r = lead.init(keep_prepared_txn=True)  # the recovering instance does not ask for 2PC
    assert r.ongoing_txn_producer_id == pid
    lead.now += 10 * TIMEOUT_MS
    assert lead.tick() is None
    assert lead.state() == "Ongoing"
    assert lead.end("t", pid, epoch + 1, False).error == E.none
    # The next transaction of this session is an ordinary one and does time out.
    lead.add("t", pid, epoch + 1)
    lead.now += TIMEOUT_MS + 1
    lead.tick()
    assert lead.state() == "CompleteAbort"
    assert lead.markers[-1].producer_epoch == epoch + 2


def test_2pc_flag_and_kept_identity_survive_a_restart() -> None:
    lead = Lead()
    pid, epoch = started(lead, enable_2pc=True)
    lead.init(enable_2pc=True, keep_prepared_txn=True)
    assert lead.restart() == Outcome()
    d = lead.describe()
    assert d.two_phase_commit
    assert d.state == "Ongoing"
    assert (d.ongoing_txn_producer_id, d.ongoing_txn_producer_epoch) == (pid, epoch)
    lead.now += 10**12
    assert lead.tick() is None
    assert lead.state() == "Ongoing"
    assert lead.end("t", pid, epoch + 1, True).error == E.none
    assert lead.state() == "CompleteCommit"


# --- KIP-664 describe / list --------------------------------------------------------------------


def test_describe_transactions_reports_state_timeout_start_partitions_and_identity() -> None:
    lead = Lead()
    start_ms = lead.now
    pid, epoch = started(lead, parts=(B0, A0))
    d = lead.describe()
    assert (d.error, d.state, d.producer_id, d.producer_epoch) == (E.none, "Ongoing", pid, epoch)
    assert (d.transaction_timeout_ms, d.transaction_start_time_ms) == (TIMEOUT_MS, start_ms)
    assert d.partitions == (A0, B0)
    assert not d.two_phase_commit
    descriptions = lead.coord.describe_transactions(["missing", ""])
    assert [x.error for x in descriptions] == [E.transactional_id_not_found, E.invalid_request]


def test_list_transactions_filters() -> None:
    lead = Lead()
    started(lead, "old")  # pid 1000
    lead.now += 5000
    started(lead, "new")  # pid 1001
    lead.init("idle")  # pid 1002
    listing = lead.coord.list_transactions(lead.now)
    assert [(t.transactional_id, t.producer_id, t.state) for t in listing.transactions] == [
        ("idle", 1002, "Empty"), ("new", 1001, "Ongoing"), ("old", 1000, "Ongoing"),
    ]  # fmt: skip
    by_state = lead.coord.list_transactions(lead.now, state_filters=["Empty", "Bogus"])
    assert [t.transactional_id for t in by_state.transactions] == ["idle"]
    assert by_state.unknown_state_filters == ("Bogus",)
    only_unknown = lead.coord.list_transactions(lead.now, state_filters=["Bogus"])
    assert only_unknown.transactions == ()
    assert only_unknown.unknown_state_filters == ("Bogus",)
    by_pid = lead.coord.list_transactions(lead.now, producer_id_filters=[1001])
    assert [t.transactional_id for t in by_pid.transactions] == ["new"]
    # KIP-994: only transactions running longer than the duration (idle ids are not running).
    by_duration = lead.coord.list_transactions(lead.now, duration_filter_ms=1000)
    assert [t.transactional_id for t in by_duration.transactions] == ["old"]
    by_pattern = lead.coord.list_transactions(lead.now, transactional_id_pattern="n.w|idl")
    assert [t.transactional_id for t in by_pattern.transactions] == ["new"]
    assert lead.coord.list_transactions(lead.now, transactional_id_pattern="(").error == (
        E.invalid_regular_expression
    )


# --- recovery: replay the log, finish what was prepared -----------------------------------------


@pytest.mark.parametrize("commit", [True, False])
def test_recovery_finishes_a_prepared_transaction_whose_markers_were_not_written(
    commit: bool,
) -> None:
    lead = Lead()
    pid, epoch = started(lead)
    lead.end("t", pid, epoch, commit, write_markers=False)  # PrepareX durable, then crash
    recovered = lead.restart()
    assert recovered.records_to_persist == ()
    (job,) = recovered.markers_to_write
    assert (job.producer_id, job.producer_epoch, job.commit, job.partitions) == (
        pid, epoch, commit, (A0, A1),
    )  # fmt: skip
    assert lead.coord.prepared_transactions() == (job,)
    assert lead.state() == ("PrepareCommit" if commit else "PrepareAbort")
    assert lead.init().error == E.concurrent_transactions
    lead.run(recovered)
    assert lead.state() == ("CompleteCommit" if commit else "CompleteAbort")


def test_recovery_when_the_prepare_record_was_written_but_never_acknowledged() -> None:
    lead = Lead()
    pid, epoch = started(lead)
    outcome = lead.coord.end_txn("t", pid, epoch, True, lead.now)
    write = outcome.records_to_persist[0]
    lead.log.append((write.key, write.value))  # on disk, but the process died before acting
    (job,) = lead.restart().markers_to_write
    assert job.commit
    assert job.producer_epoch == epoch
    lead.run(Outcome(markers_to_write=(job,)))
    assert lead.state() == "CompleteCommit"


def test_recovery_after_markers_were_written_but_before_completion_rewrites_them() -> None:
    lead = Lead()
    pid, epoch = started(lead)
    lead.end("t", pid, epoch, True, write_markers=False)
    lead.markers.extend(lead.unwritten_markers)  # markers on the partitions; completion lost
    recovered = lead.restart()
    assert recovered.markers_to_write == tuple(lead.unwritten_markers)  # idempotent re-send
    lead.run(recovered)
    assert lead.state() == "CompleteCommit"


def test_recovery_of_a_fence_resends_markers_with_the_fencing_epoch() -> None:
    lead = Lead()
    pid, epoch = started(lead)
    lead.now += TIMEOUT_MS + 1
    lead.tick(write_markers=False)
    (job,) = lead.restart().markers_to_write
    assert (job.producer_id, job.producer_epoch, job.commit) == (pid, epoch + 1, False)
    lead.run(Outcome(markers_to_write=(job,)))
    assert lead.end("t", pid, epoch, False).error == E.producer_fenced


def test_recovery_of_an_empty_tv2_abort_completes_it_directly() -> None:
    lead = Lead()
    r = lead.init()
    outcome = lead.coord.end_txn("t", r.producer_id, 0, False, lead.now, transaction_version=2)
    lead.log.append((outcome.records_to_persist[0].key, outcome.records_to_persist[0].value))
    recovered = lead.restart()
    assert recovered.markers_to_write == ()
    (complete,) = recovered.records_to_persist
    assert decode_value(present(complete.value, "record value")).state is S.COMPLETE_ABORT
    lead.run(recovered)
    assert (lead.state(), lead.describe().producer_epoch) == ("CompleteAbort", 1)


@pytest.mark.parametrize(
    ("reach", "state"),
    [
        ("init", "Empty"),
        ("ongoing", "Ongoing"),
        ("commit", "CompleteCommit"),
        ("abort", "CompleteAbort"),
    ],
)
def test_recovery_of_every_settled_state_resumes_it_as_it_was(reach: str, state: str) -> None:
    lead = Lead()
    r = lead.init()
    if reach != "init":
        lead.add("t", r.producer_id, 0, (A0,))
    if reach in ("commit", "abort"):
        lead.end("t", r.producer_id, 0, reach == "commit")
    before = lead.describe()
    assert lead.restart() == Outcome()
    assert lead.describe() == before
    assert before.state == state
    # Requests carry on against the recovered identity.
    if reach == "ongoing":
        assert lead.end("t", r.producer_id, 0, True).error == E.none
    else:
        assert lead.init().producer_epoch == 1


def test_recovery_resumes_timeouts_from_the_persisted_start_time() -> None:
    lead = Lead()
    _pid, epoch = started(lead)
    lead.now += TIMEOUT_MS // 2
    lead.restart()
    assert lead.tick() is None
    assert lead.state() == "Ongoing"
    lead.now += TIMEOUT_MS // 2 + 1
    lead.tick()
    assert lead.state() == "CompleteAbort"
    assert lead.markers[-1].producer_epoch == epoch + 1


def test_recovery_forgets_expired_ids() -> None:
    lead = Lead(TxnCoordinatorConfig(transactional_id_expiration_ms=10))
    lead.init()
    lead.now += 10
    lead.tick()
    lead.restart()
    assert lead.describe().error == E.transactional_id_not_found


# --- configuration ------------------------------------------------------------------------------


def test_config_from_kafka_property_names() -> None:
    config = TxnCoordinatorConfig.from_properties(
        {
            "transaction.max.timeout.ms": "5000",
            "transactional.id.expiration.ms": "7000",
            "transaction.two.phase.commit.enable": "true",
            "unrelated.property": "x",
        }
    )
    assert config.transaction_max_timeout_ms == 5000
    assert config.transactional_id_expiration_ms == 7000
    assert config.two_phase_commit_enable
    assert not TxnCoordinatorConfig.from_properties({}).two_phase_commit_enable
    for bad in ({"transaction.max.timeout.ms": "0"}, {"transaction.max.timeout.ms": "x"},
                {"transaction.two.phase.commit.enable": "yes"}):  # fmt: skip
        with pytest.raises(InvalidConfigError):
            TxnCoordinatorConfig.from_properties(bad)
