"""``__transaction_state`` survives log compaction: replaying the compacted partition rebuilds the
transaction coordinator exactly as replaying the full log does (KIP-98: the transaction log is a
compacted topic keyed by transactional id; the latest record per id is the whole state, and an
expired id's tombstone deletes it).

The coordinator writes through the broker's own ``InternalTopic`` into a real ``LogManager``
partition with tiny segments, the broker's ``LogCleaner`` compacts it (twice: the second clean runs
after ``delete.retention.ms``, when the tombstones themselves go, KIP-534), and the data directory
is reopened as a restarted broker would before the coordinator loads it.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

from kio.schema.errors import ErrorCode

from oncestream.broker.cleaner import LogCleaner
from oncestream.broker.internal_topic import InternalTopic
from oncestream.coordinator.txn import Outcome, TopicPartition, TransactionCoordinator, TxnCoordinatorConfig
from oncestream.coordinator.txn.records import decode_key
from oncestream.log.config import LogConfig
from oncestream.log.manager import LogManager

TOPIC = "__transaction_state"
T0 = 1_700_000_000_000
EXPIRATION_MS = 60_000
DELETE_RETENTION_MS = 5_000
# Small enough that every coordinator record lands in a segment of its own: only the very last
# record stays in the (never cleaned) active segment, everything else can be compacted.
TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": "200",
    "min.cleanable.dirty.ratio": "0",
    "delete.retention.ms": str(DELETE_RETENTION_MS),
}
A0, A1, B0 = TopicPartition("orders", 0), TopicPartition("orders", 1), TopicPartition("payments", 0)
IDS = ("committer", "aborter", "tv2", "ongoing", "prepared", "timed-out", "expired", "reborn")


class TxnLogDriver:
    """Plays the broker's TxnService against a real log: every record the coordinator asks for is
    appended to partition 0 of ``__transaction_state`` before ``on_persisted``; markers are
    reported written at once (there are no data partitions here) unless told otherwise."""

    def __init__(self, data_dir: Path) -> None:
        self.now = T0
        self.logs = LogManager.open(data_dir, LogConfig(), self.now)
        self.topic = InternalTopic(self.logs, TOPIC, 1, TOPIC_CONFIGS, self.now)
        self.records_written = 0
        pids = itertools.count(5000)
        self.coord = TransactionCoordinator(
            TxnCoordinatorConfig(transactional_id_expiration_ms=EXPIRATION_MS),
            allocate_producer_id=lambda: next(pids),
            offsets_partition_for=lambda group_id: 0,
        )
        self.coord.load([], self.now)

    def run(self, outcome: Outcome, *, write_markers: bool = True):
        """Perform the outcome's effects until none are left; return the request's response."""
        responses = [outcome.response] if outcome.response is not None else []
        writes, jobs = list(outcome.records_to_persist), list(outcome.markers_to_write)
        while writes or (write_markers and jobs):
            if writes:
                write = writes.pop(0)
                self.topic.append(0, [(write.key, write.value)], self.now)
                self.records_written += 1
                nxt: Outcome[object] | Outcome[None] = self.coord.on_persisted(write.write_id, self.now)
            else:
                job = jobs.pop(0)
                nxt = self.coord.markers_written(job.transactional_id, job.producer_id, job.producer_epoch, self.now)
            if nxt.response is not None:
                responses.append(nxt.response)
            writes += nxt.records_to_persist
            jobs += nxt.markers_to_write
        return responses[0] if responses else None

    def init(self, tid: str, timeout_ms: int = 600_000):
        """InitProducerId; returns (producer id, epoch)."""
        r = self.run(self.coord.init_producer_id(tid, timeout_ms, self.now))
        assert r.error == ErrorCode.none, (tid, r)
        return r.producer_id, r.producer_epoch

    def transaction(self, tid: str, pid: int, epoch: int, parts, *, commit: bool | None, tv: int = 1,
                    write_markers: bool = True):
        """AddPartitions, then EndTxn unless ``commit`` is None (left Ongoing); returns the
        EndTxn response (TV2 carries the next producer identity)."""
        added = self.run(self.coord.add_partitions(tid, pid, epoch, parts, self.now, transaction_version=tv))
        assert added.error == ErrorCode.none, (tid, added)
        if commit is None:
            return None
        ended = self.run(self.coord.end_txn(tid, pid, epoch, commit, self.now, transaction_version=tv),
                         write_markers=write_markers)
        assert ended.error == ErrorCode.none, (tid, ended)
        return ended

    def tick(self) -> None:
        """Timeouts and transactional-id expiry, as the broker's timer does."""
        self.run(self.coord.tick(self.now))

    def clean(self) -> int:
        """One pass of the broker's log cleaner; returns how many logs it compacted."""
        cleaner = LogCleaner(self.logs, lambda: self.now)
        try:
            return asyncio.run(cleaner.clean_once())
        finally:
            cleaner.close()

    def partition_log(self):
        return self.logs.get(TOPIC, 0)


def write_history(driver: TxnLogDriver) -> None:
    """Several transactions for every id, ending in every state a transactional id can be found
    in after a restart, including ids that expired (tombstones) and one reused after expiry."""
    # Two ids finish early and then sit idle until they expire and are tombstoned.
    for tid in ("expired", "reborn"):
        pid, epoch = driver.init(tid)
        driver.transaction(tid, pid, epoch, (A0,), commit=True)
    driver.now += EXPIRATION_MS
    driver.tick()
    assert [d.error for d in driver.coord.describe_transactions(["expired", "reborn"])] == [
        ErrorCode.transactional_id_not_found, ErrorCode.transactional_id_not_found
    ]
    driver.now += 1
    # "reborn" comes back after its tombstone: a brand-new producer id that must win over it.
    pid, epoch = driver.init("reborn")
    driver.transaction("reborn", pid, epoch, (B0,), commit=False)

    # Three committed transactions, then a restarted producer (epoch bump) committing once more.
    pid, epoch = driver.init("committer")
    for parts in ((A0,), (A0, A1), (B0,)):
        driver.now += 10
        driver.transaction("committer", pid, epoch, parts, commit=True)
    pid, epoch = driver.init("committer")
    driver.transaction("committer", pid, epoch, (A1,), commit=True)

    # Commit, abort, and a new session that is left Empty.
    pid, epoch = driver.init("aborter")
    driver.transaction("aborter", pid, epoch, (A0,), commit=True)
    driver.transaction("aborter", pid, epoch, (A1, B0), commit=False)
    driver.init("aborter")

    # Transaction version 2 (KIP-890 part 2): every EndTxn bumps the epoch.
    pid, epoch = driver.init("tv2")
    for commit in (True, False, True):
        ended = driver.transaction("tv2", pid, epoch, (A0,), commit=commit, tv=2)
        pid, epoch = ended.producer_id, ended.producer_epoch

    # Ongoing with partitions added over two requests.
    pid, epoch = driver.init("ongoing")
    driver.transaction("ongoing", pid, epoch, (A0,), commit=True)
    driver.transaction("ongoing", pid, epoch, (A0,), commit=None)
    driver.transaction("ongoing", pid, epoch, (A1, B0), commit=None)

    # A transaction timing out: the coordinator fences it with an epoch bump and aborts it.
    pid, epoch = driver.init("timed-out", timeout_ms=1_000)
    driver.transaction("timed-out", pid, epoch, (B0,), commit=True)
    driver.transaction("timed-out", pid, epoch, (A0,), commit=None)
    driver.now += 1_001
    driver.tick()
    assert driver.coord.describe_transactions(["timed-out"])[0].state == "CompleteAbort"

    # PrepareCommit durable, markers never written: a load must hand the marker job out again.
    pid, epoch = driver.init("prepared")
    driver.transaction("prepared", pid, epoch, (A0,), commit=False)
    driver.transaction("prepared", pid, epoch, (A1, B0), commit=True, write_markers=False)
    assert driver.coord.describe_transactions(["prepared"])[0].state == "PrepareCommit"


def load(records, now_ms: int) -> tuple[TransactionCoordinator, Outcome]:
    """A fresh coordinator (as on broker start) loaded from ``records``."""
    coord = TransactionCoordinator(
        TxnCoordinatorConfig(transactional_id_expiration_ms=EXPIRATION_MS),
        allocate_producer_id=lambda: 10**9,
        offsets_partition_for=lambda group_id: 0,
    )
    return coord, coord.load(records, now_ms)


def test_kip98_transaction_log_replayed_after_compaction_rebuilds_every_transactional_id(tmp_path: Path) -> None:
    driver = TxnLogDriver(tmp_path / "data")
    write_history(driver)
    full_log = list(driver.topic.read_all())
    assert len(full_log) == driver.records_written
    expected, expected_recovery = load(full_log, driver.now)

    # First clean: the latest record per id survives, tombstones are kept with a delete horizon.
    size_before = driver.partition_log().size_bytes
    assert driver.clean() == 1
    assert driver.partition_log().size_bytes < size_before
    # After delete.retention.ms the tombstones go too (the only id still deleted is "expired").
    driver.now += DELETE_RETENTION_MS + 1
    assert driver.clean() == 1

    # Reopen the data directory, as a restarted broker does, and replay what is on disk.
    replay_at = driver.now
    driver.logs.close()
    reopened = LogManager.open(tmp_path / "data", LogConfig(), replay_at)
    try:
        compacted_log = list(InternalTopic(reopened, TOPIC, 1, TOPIC_CONFIGS, replay_at).read_all())
    finally:
        reopened.close()
    keys = [decode_key(key) for key, _ in compacted_log]
    assert len(compacted_log) < len(full_log) // 2, "compaction removed (almost) nothing"
    assert "expired" not in keys, "the expired id's tombstone (and everything before it) should be gone"
    assert all(value is not None for _, value in compacted_log[:-1]), "a tombstone outlived its horizon"
    # Every id keeps exactly one record, except possibly the last one written, which sits in the
    # active segment (never cleaned) next to its older copy.
    duplicated = {k for k in keys if keys.count(k) > 1}
    assert duplicated <= {keys[-1]}

    replayed, recovery = load(compacted_log, replay_at)
    before = {d.transactional_id: d for d in expected.describe_transactions(IDS)}
    after = {d.transactional_id: d for d in replayed.describe_transactions(IDS)}
    summary = {tid: (d.error, d.state, d.producer_id, d.producer_epoch) for tid, d in after.items()}
    assert summary == {tid: (d.error, d.state, d.producer_id, d.producer_epoch) for tid, d in before.items()}
    assert after == before  # timeouts, start times, partitions, 2PC and TV2 identities too
    # The history really reached every state (the comparison would be weak otherwise).
    assert {tid: (d.state or d.error.name) for tid, d in after.items()} == {
        "committer": "CompleteCommit",
        "aborter": "Empty",
        "tv2": "CompleteCommit",
        "ongoing": "Ongoing",
        "prepared": "PrepareCommit",
        "timed-out": "CompleteAbort",
        "expired": "transactional_id_not_found",
        "reborn": "CompleteAbort",
    }
    assert after["committer"].producer_epoch == 1
    assert after["tv2"].producer_epoch == 3
    assert after["timed-out"].producer_epoch == 1  # the fencing bump survived
    # Recovery finishes the same prepared transaction with the same markers either way.
    assert recovery.markers_to_write == expected_recovery.markers_to_write
    (job,) = recovery.markers_to_write
    assert job.transactional_id == "prepared"
    assert job.commit
    assert set(job.partitions) == {A1, B0}
    assert [(w.transactional_id, w.value) for w in recovery.records_to_persist] == [
        (w.transactional_id, w.value) for w in expected_recovery.records_to_persist
    ]
