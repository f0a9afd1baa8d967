"""The exactly-once sink (KIP-939 two-phase commit) under driver SIGKILLs and task failures.

Output is checked with librdkafka (confluent-kafka) read_committed: it must equal the committed
input exactly, record for record, whatever the crashes.
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.errors import StreamingQueryException

from oncestream.spark.commit_journal import CommitJournal
from oncestream.spark.log_client import LogClient
from tests.spark.spark_support import DriverRun, committed_values, drain_in_session
from tests.support.narrow import present
from tests.support.spark_faults import fault_options

pytestmark = [pytest.mark.spark, pytest.mark.chaos]


def _topics(bootstrap: str, *names: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(n, partitions, 1) for n in names]).values():
        future.result(30)


def _produce(bootstrap: str, topic: str, start: int, count: int, aborted: int = 5) -> list[bytes]:
    """``count`` committed records (in several transactions) plus ``aborted`` aborted ones."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"gen-{topic}-{start}",
                         "linger.ms": 5})
    producer.init_transactions(30)
    values = []
    for chunk_start in range(start, start + count, 40):
        producer.begin_transaction()
        for i in range(chunk_start, min(chunk_start + 40, start + count)):
            value = f"rec-{i:06d}".encode()
            producer.produce(topic, value=value, key=f"key-{i % 17}".encode())
            values.append(value)
        producer.commit_transaction(30)
        producer.begin_transaction()
        for j in range(aborted):
            producer.produce(topic, value=f"aborted-{chunk_start}-{j}".encode())
        producer.flush(30)
        producer.abort_transaction(30)
    return values


def _driver_argv(tmp: Path, bootstrap: str, topic_in: str, topic_out: str) -> list[str]:
    """tests/spark/crash_driver.py's arguments of the passthrough pipeline in -> out."""
    return ["--bootstrap", bootstrap, "--checkpoint", str(tmp / "checkpoint"), "--in-topic", topic_in,
            "--out-topic", topic_out, "--max-offsets", "60"]


def _driver(tmp: Path, bootstrap: str, topic_in: str, topic_out: str, *, crash_at: str | None = None) -> DriverRun:
    return DriverRun(tmp / "logs", _driver_argv(tmp, bootstrap, topic_in, topic_out), crash_at=crash_at)


# The driver is SIGKILLed at these (commit step, batch) points in turn. The default run kills it
# where the commit record exists and the transactions are not all complete (recovery must complete
# them, never abort or redo them); the slow soak adds the steps on either side (before the record:
# recovery aborts; after completing: Spark replays a batch that is already in the log).
COMMIT_STEPS_DEFAULT = (("after-record", 1), ("mid-complete", 2))
COMMIT_STEPS_ALL = (("before-record", 1), ("after-record", 2), ("mid-complete", 3), ("after-complete", 4))


@pytest.mark.parametrize("steps", [
    pytest.param(COMMIT_STEPS_DEFAULT, id="record-written"),
    pytest.param(COMMIT_STEPS_ALL, id="every-step", marks=pytest.mark.slow),
])
@pytest.mark.timeout(900)  # a driver run per step and a randomly killed one, each starting a JVM
def test_passthrough_survives_driver_sigkill_at_every_commit_step(tmp_path, eos_broker, spark, steps):
    """in -> out with the driver SIGKILLed at commit steps (``steps``: every step in the slow soak:
    before the commit record, after it, halfway through completing the transactions, after
    completing them, where Spark replays the batch), then at a random moment; the query, resumed in
    the test's session, drains the input: read_committed output equals the input exactly once."""
    bootstrap = eos_broker.bootstrap
    topic_in, topic_out = f"in-{uuid.uuid4().hex[:8]}", f"out-{uuid.uuid4().hex[:8]}"
    _topics(bootstrap, topic_in, topic_out)
    expected = _produce(bootstrap, topic_in, 0, 400)
    for step, batch in steps:
        run = _driver(tmp_path, bootstrap, topic_in, topic_out, crash_at=f"{step}:{batch}")
        run.wait(300)
        assert run.killed_itself(), f"{step}: driver ended with {run.process.returncode}:\n{run.stderr_tail()}"
        expected += _produce(bootstrap, topic_in, len(expected) + 10_000 * batch, 60)
    run = _driver(tmp_path, bootstrap, topic_in, topic_out)
    run.wait_for_batches(2)
    run.kill()
    drain_in_session(spark, _driver_argv(tmp_path, bootstrap, topic_in, topic_out))

    got = Counter(v for v in committed_values(bootstrap, topic_out))
    want = Counter(expected)
    assert got == want, (f"missing {sorted((want - got).elements())[:10]}, "
                         f"duplicated or foreign {sorted((got - want).elements())[:10]}")
    with LogClient(bootstrap) as client:
        assert [t for t in present(client.list_transactions(), "transactions") if t[2] == "Ongoing"] == []


def test_task_failing_after_prepare_is_retried_without_duplicates(spark, eos_broker, tmp_path):
    """A write task dies after prepare_transaction (attempt 0, every partition); Spark retries it as
    attempt 1 under another transactional id. The driver commits attempt 1 and aborts attempt 0's
    prepared leftover: each record once, no transaction left open."""
    bootstrap = eos_broker.bootstrap
    topic_in, topic_out = f"in-{uuid.uuid4().hex[:8]}", f"out-{uuid.uuid4().hex[:8]}"
    _topics(bootstrap, topic_in, topic_out)
    expected = _produce(bootstrap, topic_in, 0, 120)
    source = (spark.readStream.format("oncestream").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic_in).option("startingOffsets", "earliest").load())
    query = (source.select("key", "value").writeStream.format("oncestream")
             .option("kafka.bootstrap.servers", bootstrap).option("topic", topic_out)
             .options(**fault_options(fail_after_prepare="0"))
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None
    assert Counter(v for v in committed_values(bootstrap, topic_out)) == Counter(expected)
    with LogClient(bootstrap) as client:
        assert [t for t in present(client.list_transactions(), "transactions") if t[2] == "Ongoing"] == []
    journal = CommitJournal(bootstrap)
    try:
        record = journal.last(str(query.id))
    finally:
        journal.close()
    assert record is not None
    assert record.batch_id == 0
    # <prefix>-<query>-<slot>-<partition>-<attempt>-<alternative>: attempt 1 won everywhere.
    assert record.txns, record.txns
    assert all(txn_id.rsplit("-", 2)[1] == "1" for txn_id in record.txns), record.txns


def test_batch_crashing_in_every_attempt_then_restart_is_exactly_once(spark, eos_broker, tmp_path):
    """Every attempt of every write task dies after prepare: the query fails with its prepared
    transactions open (nobody reported them). The restarted query settles them and writes the
    batch: the output holds every record once and no transaction stays open."""
    bootstrap = eos_broker.bootstrap
    topic_in, topic_out = f"in-{uuid.uuid4().hex[:8]}", f"out-{uuid.uuid4().hex[:8]}"
    _topics(bootstrap, topic_in, topic_out)
    expected = _produce(bootstrap, topic_in, 0, 40)

    def start(fail_attempts: str):
        source = (spark.readStream.format("oncestream").option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", topic_in).option("startingOffsets", "earliest").load())
        writer = (source.select("value").writeStream.format("oncestream")
                  .option("kafka.bootstrap.servers", bootstrap).option("topic", topic_out)
                  .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True))
        if fail_attempts:
            writer = writer.options(**fault_options(fail_after_prepare=fail_attempts))
        return writer.start()

    failed = start("0,1,2,3")
    with pytest.raises(StreamingQueryException):
        failed.awaitTermination(300)
    with LogClient(bootstrap) as client:
        assert [t for t in present(client.list_transactions(), "transactions") if t[2] == "Ongoing" and str(failed.id) in t[0]], \
            "the crashed attempts' prepared transactions should still be open"
    restarted = start("")
    restarted.awaitTermination(300)
    assert restarted.exception() is None
    assert Counter(v for v in committed_values(bootstrap, topic_out)) == Counter(expected)
    with LogClient(bootstrap) as client:
        assert [t for t in present(client.list_transactions(), "transactions") if t[2] == "Ongoing"] == []
