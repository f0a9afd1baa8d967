"""The exactly-once sink when write tasks fail or outlive their attempt.

Tasks are steered with the gates of the tests' step observer (``tests/support/spark_faults.py``,
plugged in with the sink option ``stepObserver``): a task reports its prepared transaction in a
file, can be held after preparing, or made to raise on every attempt, each until the test creates ``release``.
So the test looks at the log while transactions are prepared and undecided, and the failing
task fails only after the others have prepared and reported, so the job's failure reaches the
driver's ``abort`` with real prepared transactions, whatever the speeds.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from oncestream.client import KafkaException
from oncestream.spark.commit_journal import NO_COMMIT, CommitJournal
from oncestream.spark.log_client import LogClient
from oncestream.spark.options import sink_options
from oncestream.spark.sink import _LazyJournal, _TaskWriter, transactional_id
from tests.spark.spark_support import committed_values, read_committed
from tests.support.narrow import present
from tests.support.spark_faults import fault_options
from tests.support.txn import describe_transaction, wait_until

pytestmark = pytest.mark.spark

GATE_WAIT_S = 240.0  # hang guard only: tasks reach their gates in seconds

T = TypeVar("T")


def _topic(bootstrap: str, partitions: int = 1) -> str:
    name = f"fail-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(30)
    return name


def _produce(bootstrap: str, topic: str, values_by_partition: dict[int, list[bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition, values in values_by_partition.items():
        for value in values:
            producer.produce(topic, value=value, partition=partition)
    assert producer.flush(30) == 0


def _offsets(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (last stable offset, high watermark)."""
    with LogClient(bootstrap, client_id="test-check") as client:
        tps = [(topic, p) for p in client.metadata([topic])[topic]]
        lso = client.list_offsets(tps, -1, read_committed=True)
        hw = client.list_offsets(tps, -1, read_committed=False)
    return {tp[1]: (lso[tp], hw[tp]) for tp in tps}


def _open_transactions(bootstrap: str) -> list[tuple[str, int, str]]:
    with LogClient(bootstrap, client_id="test-check") as client:
        return [t for t in present(client.list_transactions(), "transactions") if t[2] == "Ongoing"]


def _prepared(gate: Path, partitions: list[int]) -> dict[int, tuple[str, str]]:
    """Wait until a task of each partition reported its prepared transaction; partition ->
    (transactional id, state)."""
    def reported() -> dict[int, tuple[str, str]]:
        out = {}
        for marker in gate.glob("prepared-*-*"):
            if marker.suffix == ".tmp":
                continue
            _, partition, _attempt = marker.name.split("-")
            txn_id, state = marker.read_text().split()
            out[int(partition)] = (txn_id, state)
        return out

    wait_until(lambda: set(partitions) <= set(reported()), GATE_WAIT_S,
               f"prepared transactions of partitions {partitions} in {gate}")
    return reported()


class Background(Generic[T]):
    """Run a blocking call on a thread; keep its exception."""

    def __init__(self, fn: Callable[[], T]) -> None:
        self.error: BaseException | None = None
        self.result: T | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], T]) -> None:
        try:
            self.result = fn()
        except BaseException as exc:  # noqa: BLE001 - examined by the test
            self.error = exc

    def join(self, timeout_s: float = 300.0) -> None:
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), "the background call did not finish"


def _nothing_visible_yet(bootstrap: str, topic: str) -> None:
    """The tasks' records are in the log (high watermark above 0) but read_committed sees none of
    them: the last stable offset is still at the start of every partition they wrote."""
    offsets = _offsets(bootstrap, topic)
    assert any(hw > 0 for _lso, hw in offsets.values()), offsets
    assert all(lso == 0 for lso, _hw in offsets.values()), offsets


def _all_decided(bootstrap: str, topic: str) -> None:
    """No transaction is open and read_committed can read every partition to its end."""
    assert _open_transactions(bootstrap) == []
    offsets = _offsets(bootstrap, topic)
    assert all(lso == hw for lso, hw in offsets.values()), offsets


def _while_gated(gate: Path, partitions: list[int], look) -> tuple[Background, dict]:
    """On a thread: wait until ``partitions`` prepared, call ``look()``, then create ``release``
    (also when waiting or looking failed, so the job never hangs on its gate). Returns the thread
    and the dict it fills with the prepared transactions. The Spark job itself runs on the
    test's thread: a Python thread of its own has no active session to find the data source in."""
    prepared: dict[int, tuple[str, str]] = {}

    def observe() -> None:
        try:
            prepared.update(_prepared(gate, partitions))
            look()
        finally:
            (gate / "release").touch()

    return Background(observe), prepared


def test_failed_batch_write_job_aborts_the_prepared_transactions(spark, eos_broker, tmp_path):
    """Tasks 0 and 1 prepare; task 2 raises on every attempt, so the job fails and Spark calls the
    writer's abort: before the failure read_committed sees nothing of the prepared data;
    afterwards both prepared transactions are CompleteAbort, none is open, the LSO is the high
    watermark and read_committed sees none of the job's records."""
    bootstrap = eos_broker.bootstrap
    topic = _topic(bootstrap)
    gate = tmp_path / "gate"
    gate.mkdir()
    (gate / "fail-2").touch()
    values = [f"doomed-{i:03d}".encode() for i in range(90)]
    df = spark.createDataFrame([(v,) for v in values], "value binary").repartition(3)
    observer, prepared = _while_gated(gate, [0, 1], lambda: _nothing_visible_yet(bootstrap, topic))
    with pytest.raises(Exception, match="injected failure of partition 2"):
        (df.write.format("oncestream").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
         .options(**fault_options(gate_dir=gate)).mode("append").save())
    observer.join()
    assert observer.error is None, observer.error

    assert not list(gate.glob("prepared-2-*")), "partition 2 must fail before preparing"
    for txn_id, _state in prepared.values():
        assert describe_transaction(bootstrap, txn_id).state == "CompleteAbort", txn_id
    _all_decided(bootstrap, topic)
    assert read_committed(bootstrap, topic) == []


def test_batch_write_is_invisible_until_the_job_commits(spark, eos_broker, tmp_path):
    """Task 1 is held after preparing while task 0 has finished: all rows are in the log and
    prepared, yet read_committed sees none; once the job commits it sees each row once."""
    bootstrap = eos_broker.bootstrap
    topic = _topic(bootstrap)
    gate = tmp_path / "gate"
    gate.mkdir()
    (gate / "hold-1").touch()
    values = [f"atomic-{i:03d}".encode() for i in range(60)]
    df = spark.createDataFrame([(v,) for v in values], "value binary").repartition(2)

    def look() -> None:
        _nothing_visible_yet(bootstrap, topic)
        assert _offsets(bootstrap, topic)[0][1] >= len(values)  # every row is in the log, uncommitted

    observer, prepared = _while_gated(gate, [0, 1], look)
    (df.write.format("oncestream").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
     .options(**fault_options(gate_dir=gate)).mode("append").save())
    observer.join()
    assert observer.error is None, observer.error

    for txn_id, _state in prepared.values():
        assert describe_transaction(bootstrap, txn_id).state == "CompleteCommit", txn_id
    _all_decided(bootstrap, topic)
    assert Counter(v for v in committed_values(bootstrap, topic)) == Counter(values)


def test_failed_micro_batch_aborts_prepared_transactions_and_restart_writes_once(spark, eos_broker, tmp_path):
    """Streaming: in batch 0 task 0 prepares and task 1 raises on every attempt; Spark calls the
    writer's abort for batch 0 and the query fails. Task 0's transaction is then CompleteAbort,
    nothing is open or visible and no commit record exists; the restarted query writes every
    input record exactly once."""
    bootstrap = eos_broker.bootstrap
    topic_in, topic_out = _topic(bootstrap, partitions=2), _topic(bootstrap)
    expected = {p: [f"in-{p}-{i:03d}".encode() for i in range(25)] for p in (0, 1)}
    _produce(bootstrap, topic_in, expected)
    gate = tmp_path / "gate"
    gate.mkdir()
    (gate / "fail-1").touch()

    def start(gate_dir: Path | None):
        source = (spark.readStream.format("oncestream").option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", topic_in).option("startingOffsets", "earliest").load())
        writer = (source.select("value").writeStream.format("oncestream")
                  .option("kafka.bootstrap.servers", bootstrap).option("topic", topic_out)
                  .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True))
        if gate_dir is not None:
            writer = writer.options(**fault_options(gate_dir=gate_dir))
        return writer.start()

    failing = start(gate)
    try:
        prepared = _prepared(gate, [0])
        _nothing_visible_yet(bootstrap, topic_out)
    finally:
        (gate / "release").touch()
    with pytest.raises(Exception, match="injected failure of partition 1"):
        failing.awaitTermination(300)

    txn_id, _state = prepared[0]
    assert describe_transaction(bootstrap, txn_id).state == "CompleteAbort"
    _all_decided(bootstrap, topic_out)
    assert read_committed(bootstrap, topic_out) == []
    journal = CommitJournal(bootstrap)
    try:
        assert journal.last(str(failing.id)) is None
    finally:
        journal.close()

    restarted = start(None)
    restarted.awaitTermination(300)
    assert restarted.exception() is None
    assert Counter(v for v in committed_values(bootstrap, topic_out)) == \
        Counter(v for vs in expected.values() for v in vs)
    _all_decided(bootstrap, topic_out)


def _values_batch(values: list[bytes]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"value": pa.array(values, pa.binary())})


def _run_available_now(spark, bootstrap: str, topic_in: str, checkpoint: Path, options: dict[str, str]):
    """Start a query draining ``topic_in`` (availableNow) into the sink; the caller waits."""
    source = (spark.readStream.format("oncestream").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic_in).option("startingOffsets", "earliest").load())
    return (source.select("value").writeStream.format("oncestream").options(**options)
            .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())


def _finished(query) -> str:
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    return str(query.id)


def _last_record(bootstrap: str, query_id: str):
    journal = CommitJournal(bootstrap)
    try:
        return journal.last(query_id)
    finally:
        journal.close()


def test_zombie_of_an_earlier_batch_cannot_stall_a_later_batch(spark, eos_broker, tmp_path, monkeypatch):
    """Issue 11 (no stalls from stale attempts). Batches 0 and 1 commit; batch 2's task of
    partition 0 prepares and is held. Two zombies then run the real task code: attempt 0 of
    partition 0 of batch 1 (started fresh, after batch 2 prepared: the scenario that aborted batch
    2's transaction and stopped the query) and attempt 0 of partition 0 of batch 0 that passed its
    journal check before batch 0 committed (simulated) and only now initializes, on the very id
    batch 2's task uses (same batch slot). Neither writes or aborts anything; batch 2 commits, the
    query keeps running (batch 3 follows) and the output is every input record exactly once."""
    bootstrap = eos_broker.bootstrap
    topic_in, topic_out = _topic(bootstrap, partitions=2), _topic(bootstrap)
    options = {"kafka.bootstrap.servers": bootstrap, "topic": topic_out}
    checkpoint = tmp_path / "cp"
    inputs = []
    for batch in (0, 1):
        values = {0: [f"b{batch}-0-{i:03d}".encode() for i in range(10)],
                  1: [f"b{batch}-1-{i:03d}".encode() for i in range(10)]}
        _produce(bootstrap, topic_in, values)
        inputs.append(values)
        query_id = _finished(_run_available_now(spark, bootstrap, topic_in, checkpoint, options))
    record = _last_record(bootstrap, query_id)
    assert record is not None
    assert record.batch_id == 1

    gate = tmp_path / "gate"
    gate.mkdir()
    (gate / "hold-0").touch()
    third = {0: [f"b2-0-{i:03d}".encode() for i in range(10)]}
    _produce(bootstrap, topic_in, third)
    inputs.append(third)
    held_query = _run_available_now(spark, bootstrap, topic_in, checkpoint,
                                    {**options, **fault_options(gate_dir=gate)})
    try:
        batch_2_txn, batch_2_state = _prepared(gate, [0])[0]
        task = _TaskWriter(sink_options(options))
        fresh = task.write_attempt(iter([_values_batch([b"zombie-1"])]), query_id, 0, 0, batch_id=1)
        assert fresh.transactional_id is None
        assert fresh.records == 0
        # The late zombie's journal check ran before batch 0 was recorded: it saw nothing committed.
        monkeypatch.setattr(_LazyJournal, "committed_batch", lambda self, q: NO_COMMIT)
        late = task.write_attempt(iter([_values_batch([b"zombie-0"])]), query_id, 0, 0, batch_id=0)
        monkeypatch.undo()
        assert late.transactional_id is None
        assert late.records == 0
        assert transactional_id(sink_options(options).transactional_id_prefix, query_id, 0, 0, 0, 0) \
            == batch_2_txn, "the late zombie must have initialized on batch 2's id"
        assert describe_transaction(bootstrap, batch_2_txn).state == "Ongoing"
    finally:
        (gate / "release").touch()
    assert _finished(held_query) == query_id
    assert describe_transaction(bootstrap, batch_2_txn).state == "CompleteCommit"
    record = _last_record(bootstrap, query_id)
    assert record is not None
    assert record.batch_id == 2
    assert record.txns[batch_2_txn] == batch_2_state

    fourth = {1: [f"b3-1-{i:03d}".encode() for i in range(10)]}
    _produce(bootstrap, topic_in, fourth)
    inputs.append(fourth)
    assert _finished(_run_available_now(spark, bootstrap, topic_in, checkpoint, options)) == query_id
    got = Counter(v for v in committed_values(bootstrap, topic_out))
    want = Counter(v for batch in inputs for vs in batch.values() for v in vs)
    assert got == want, (f"missing {sorted((want - got).elements())[:5]}, "
                         f"extra {sorted((got - want).elements())[:5]}")
    _all_decided(bootstrap, topic_out)


def test_zombie_writing_while_its_batch_commits_cannot_make_its_records_visible(spark, eos_broker, tmp_path):
    """Batch 0 commits attempt 1 of both write tasks (attempt 0 died after prepare). Attempt-0
    zombies of batch 0 then run the real task code: one is halfway through its rows when batch 0
    is recorded, one starts after. The first is fenced or aborts its own transaction once it sees
    the record (step 3b); the second writes nothing. Output: every input record exactly once, no
    zombie record, nothing left open."""
    bootstrap = eos_broker.bootstrap
    topic_in, topic_out = _topic(bootstrap, partitions=2), _topic(bootstrap)
    first = {p: [f"first-{p}-{i:03d}".encode() for i in range(20)] for p in (0, 1)}
    _produce(bootstrap, topic_in, first)
    options = {"kafka.bootstrap.servers": bootstrap, "topic": topic_out}
    checkpoint = tmp_path / "cp"

    # Partition 0's zombie of batch 0 starts before the query: it produces a first Arrow batch,
    # then waits before its second one until batch 0 is committed.
    task = _TaskWriter(sink_options(options))
    go_on = threading.Event()

    def rows():
        yield _values_batch([b"zombie-0-a"])
        go_on.wait(GATE_WAIT_S)
        yield _values_batch([b"zombie-0-b"])

    query = _run_available_now(spark, bootstrap, topic_in, checkpoint,
                               {**options, **fault_options(fail_after_prepare="0")})
    query_id = str(query.id)
    producing_zombie = Background(lambda: task.write_attempt(rows(), query_id, 0, 7, batch_id=0))
    assert _finished(query) == query_id
    record = _last_record(bootstrap, query_id)
    assert record is not None
    assert record.batch_id == 0
    assert sorted(t.rsplit("-", 4)[1:] for t in record.txns) == [["0", "0", "1", "0"], ["0", "1", "1", "0"]], \
        record.txns
    go_on.set()
    producing_zombie.join()
    # Either the zombie's transaction was aborted under it by the driver (fenced: an error) or it
    # saw the record after preparing and aborted itself (no transaction reported).
    if producing_zombie.error is None:
        assert present(producing_zombie.result, "zombie write result").transactional_id is None
    else:
        assert isinstance(producing_zombie.error, KafkaException), producing_zombie.error
    late = task.write_attempt(iter([_values_batch([b"zombie-1"])]), query_id, 1, 0, batch_id=0)
    assert late.transactional_id is None
    assert late.records == 0

    got = Counter(v for v in committed_values(bootstrap, topic_out))
    want = Counter(v for vs in first.values() for v in vs)
    assert got == want, (f"missing {sorted((want - got).elements())[:5]}, "
                         f"extra {sorted((got - want).elements())[:5]}")
    _all_decided(bootstrap, topic_out)
