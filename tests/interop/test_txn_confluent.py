"""Transactions with librdkafka (confluent-kafka) against a real broker process (KIP-98).

What each test proves:
- committed transactions are visible to read_committed consumers on every partition they span;
- aborted transactions are never returned to read_committed consumers, while read_uncommitted
  consumers see every record (so the aborted data really was in the log and was filtered);
- zombie fencing: a second producer with the same transactional.id fences the first, whose open
  transaction is aborted and whose next commit fails fatally;
- the last stable offset holds back records written after an open transaction's first record,
  also non-transactional ones, until the transaction ends (and only on that partition);
- a producer killed with SIGKILL mid-transaction is aborted by the coordinator's timeout: its
  records never become visible and the LSO moves on.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from tests.support.clients import CLIENT_TIMEOUT_S, create_topic, unique_topic
from tests.support.narrow import present
from tests.support.txn import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    TXN_BROKER_CONFIG,
    DeliveryLog,
    describe_transaction,
    fatal_code,
    high_watermarks,
    isolated_consumer,
    list_offset,
    plain_produce,
    poll_records_for,
    poll_until_count,
    produce_values,
    read_to_end,
    run_transaction,
    transaction_values,
    transactional_producer,
    values_of,
    wait_until,
)

pytestmark = [pytest.mark.interop]

PARTITIONS = 3
PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent
# How long a read_committed consumer is watched to show it gets nothing while a transaction is
# open: an observation window, not a timing assertion.
QUIET_WINDOW_S = 3.0
FENCED_CODES = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED)


@pytest.fixture(scope="module")
def txn_broker(module_broker_factory):
    """A broker of the kind under test, configured for transaction tests, shared by this module
    (unique topics)."""
    return module_broker_factory(TXN_BROKER_CONFIG, name="txn-broker")


def _txn_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _merge(*parts: dict[int, list[bytes]]) -> dict[int, list[bytes]]:
    merged: dict[int, list[bytes]] = {}
    for part in parts:
        for p, values in part.items():
            merged.setdefault(p, []).extend(values)
    return merged


def test_committed_transactions_are_visible_to_read_committed_on_every_partition(txn_broker):
    """KIP-98: records of committed transactions spanning several partitions are all returned to
    read_committed consumers, once each, in produce order per partition; the LSO reaches the high
    watermark once the transactions end."""
    bootstrap = txn_broker.bootstrap
    topic = unique_topic("txn-commit")
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    producer = transactional_producer(bootstrap, _txn_id("commit"))
    producer.init_transactions(CLIENT_TIMEOUT_S)
    first = transaction_values("c1", range(PARTITIONS), 20)
    second = transaction_values("c2", range(PARTITIONS), 7)
    run_transaction(producer, topic, first, commit=True)
    run_transaction(producer, topic, second, commit=True)

    committed = values_of(read_to_end(bootstrap, topic, PARTITIONS, isolation=READ_COMMITTED))
    assert committed == _merge(first, second)
    for p in range(PARTITIONS):
        assert list_offset(bootstrap, topic, p, read_committed=True) == list_offset(
            bootstrap, topic, p, read_committed=False
        )


def test_aborted_transactions_are_never_read_committed_but_read_uncommitted(txn_broker):
    """KIP-98 abort: commit, abort, commit, abort (each over all partitions): read_committed sees
    exactly the committed records, read_uncommitted sees every record in log order."""
    bootstrap = txn_broker.bootstrap
    topic = unique_topic("txn-abort")
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    producer = transactional_producer(bootstrap, _txn_id("abort"))
    producer.init_transactions(CLIENT_TIMEOUT_S)
    plan = [("a1", True, 15), ("a2", False, 15), ("a3", True, 4), ("a4", False, 9), ("a5", True, 6), ("a6", False, 3)]
    committed_parts, all_parts = [], []
    for tag, commit, count in plan:
        values = transaction_values(tag, range(PARTITIONS), count)
        run_transaction(producer, topic, values, commit=commit)
        all_parts.append(values)
        if commit:
            committed_parts.append(values)

    read_committed = values_of(read_to_end(bootstrap, topic, PARTITIONS, isolation=READ_COMMITTED))
    read_uncommitted = values_of(read_to_end(bootstrap, topic, PARTITIONS, isolation=READ_UNCOMMITTED))
    assert read_uncommitted == _merge(*all_parts), "read_uncommitted must see aborted data too"
    aborted = {v for (_tag, commit, _count), part in zip(plan, all_parts) if not commit for vs in part.values() for v in vs}
    leaked = [v for vs in read_committed.values() for v in vs if v in aborted]
    assert not leaked, f"read_committed returned aborted records: {leaked[:5]}"
    assert read_committed == _merge(*committed_parts)


def test_second_producer_with_same_transactional_id_fences_the_first(txn_broker):
    """KIP-98 zombie fencing: init_transactions() of a new instance bumps the epoch and aborts the
    old instance's open transaction; the old instance can never commit again: its late produce is
    refused (the partition answers INVALID_PRODUCER_EPOCH, which librdkafka reports as an abortable
    PRODUCER_FENCED, exactly as against Apache Kafka), and the EndTxn it then sends with its old
    epoch is answered PRODUCER_FENCED by the coordinator, which is fatal. None of its records are
    ever read_committed."""
    bootstrap = txn_broker.bootstrap
    topic = unique_topic("txn-fence")
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    txn_id = _txn_id("fence")
    zombie = transactional_producer(bootstrap, txn_id)
    zombie.init_transactions(CLIENT_TIMEOUT_S)
    zombie_values = transaction_values("zombie", range(PARTITIONS), 5)
    zombie.begin_transaction()
    produce_values(zombie, topic, zombie_values)
    assert zombie.flush(CLIENT_TIMEOUT_S) == 0
    before = describe_transaction(bootstrap, txn_id)
    assert before.state == "Ongoing"

    successor = transactional_producer(bootstrap, txn_id)
    successor.init_transactions(CLIENT_TIMEOUT_S)
    after_init = describe_transaction(bootstrap, txn_id)
    assert after_init.producer_id == before.producer_id
    assert after_init.producer_epoch > before.producer_epoch
    # The zombie's transaction was aborted by the coordinator: its records are in the log but
    # the LSO is past them, so read_committed returns nothing.
    assert values_of(read_to_end(bootstrap, topic, PARTITIONS, isolation=READ_COMMITTED)) == {
        p: [] for p in range(PARTITIONS)
    }

    late_log = DeliveryLog()
    produce_values(zombie, topic, {0: [b"zombie-late"]}, late_log)
    zombie.flush(CLIENT_TIMEOUT_S)
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(CLIENT_TIMEOUT_S)
    fatal, code = fatal_code(raised.value)
    assert code in FENCED_CODES, f"expected _FENCED/PRODUCER_FENCED, got {raised.value}"
    assert not late_log.delivered, "a fenced producer's produce must not be acknowledged"
    if not fatal:
        # Abortable at the partition: the abort goes to the coordinator, which fences it for good.
        with pytest.raises(KafkaException) as raised_abort:
            zombie.abort_transaction(CLIENT_TIMEOUT_S)
        fatal, code = fatal_code(raised_abort.value)
        assert fatal, f"the coordinator must fence the zombie, got {raised_abort.value}"
        assert code in FENCED_CODES, f"the coordinator must fence the zombie, got {raised_abort.value}"

    successor_values = transaction_values("successor", range(PARTITIONS), 5)
    run_transaction(successor, topic, successor_values, commit=True)
    read_committed = values_of(read_to_end(bootstrap, topic, PARTITIONS, isolation=READ_COMMITTED))
    assert read_committed == successor_values
    read_uncommitted = values_of(read_to_end(bootstrap, topic, PARTITIONS, isolation=READ_UNCOMMITTED))
    assert read_uncommitted == _merge(zombie_values, successor_values), "the late zombie record must not land"


@pytest.mark.parametrize("ending", ["commit", "abort"])
def test_open_transaction_holds_back_later_records_until_it_ends(txn_broker, ending):
    """KIP-98 LSO: with a transaction open on partition 0, records written to partition 0 after it
    by a non-transactional producer are withheld from read_committed consumers (which still get
    partition 1) until the transaction ends; then they arrive, after the transaction's records if
    it committed, alone if it aborted."""
    bootstrap = txn_broker.bootstrap
    topic = unique_topic(f"txn-lso-{ending}")
    create_topic(bootstrap, topic, partitions=2)
    producer = transactional_producer(bootstrap, _txn_id("lso"))
    producer.init_transactions(CLIENT_TIMEOUT_S)
    txn_values = transaction_values("open", [0], 5)
    producer.begin_transaction()
    produce_values(producer, topic, txn_values)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    later = transaction_values("later", [0, 1], 4)
    plain_produce(bootstrap, topic, later)

    assert high_watermarks(bootstrap, topic, 2) == {0: 9, 1: 4}
    assert list_offset(bootstrap, topic, 0, read_committed=True) == 0, "LSO = first offset of the open txn"
    assert list_offset(bootstrap, topic, 1, read_committed=True) == 4
    uncommitted = values_of(read_to_end(bootstrap, topic, 2, isolation=READ_UNCOMMITTED))
    assert uncommitted == {0: txn_values[0] + later[0], 1: later[1]}

    consumer = isolated_consumer(bootstrap, READ_COMMITTED)
    try:
        consumer.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
        during = poll_records_for(consumer, QUIET_WINDOW_S)
        assert [r.value for r in during if r.partition == 0] == [], "partition 0 is held back by the open txn"
        assert [r.value for r in during if r.partition == 1] == later[1], "partition 1 has no open txn"
        if ending == "commit":
            producer.commit_transaction(CLIENT_TIMEOUT_S)
            expected = txn_values[0] + later[0]
        else:
            producer.abort_transaction(CLIENT_TIMEOUT_S)
            expected = later[0]
        after = poll_until_count(consumer, len(expected))
        after += poll_records_for(consumer, 0.5)  # nothing more may follow
        assert [r.value for r in after] == expected
        assert all(r.partition == 0 for r in after)
    finally:
        consumer.close()
    assert list_offset(bootstrap, topic, 0, read_committed=True) == 10  # past the marker


def test_sigkilled_producer_transaction_is_aborted_by_timeout(txn_broker, tmp_path):
    """KIP-98 transaction timeout: a producer (transaction.timeout.ms=3000) is SIGKILLed with its
    transaction open on two partitions. The coordinator aborts it (fencing the epoch); the LSO
    moves past it, so later records reach read_committed consumers, and the dead producer's
    records never do (though read_uncommitted shows they were written)."""
    bootstrap = txn_broker.bootstrap
    topic = unique_topic("txn-kill9")
    create_topic(bootstrap, topic, partitions=2)
    txn_id = _txn_id("kill9")
    stderr_path = tmp_path / "hang-producer.stderr"
    with open(stderr_path, "wb") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-m", "tests.support.txn", "hang-producer", "--bootstrap", bootstrap,
             "--transactional-id", txn_id, "--topic", topic, "--partitions", "2", "--count", "6",
             "--tag", "hung", "--transaction-timeout-ms", "3000"],
            cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=stderr, start_new_session=True,
        )
    try:
        line = present(child.stdout, "hang-producer stdout").readline()
        assert line, f"hang-producer exited: {stderr_path.read_text()[-2000:]}"
        report = json.loads(line)
        assert "open" in report, report
        hung_values = {v.encode() for v in report["open"]}
        assert len(hung_values) == 12
        assert describe_transaction(bootstrap, txn_id).state == "Ongoing"
    finally:
        child.kill()  # SIGKILL: no abort, no close
        child.wait()
        present(child.stdout, "hang-producer stdout").close()

    later = transaction_values("after-kill", [0, 1], 3)
    plain_produce(bootstrap, topic, later)
    wait_until(
        lambda: describe_transaction(bootstrap, txn_id).state == "CompleteAbort",
        CLIENT_TIMEOUT_S,
        "the coordinator to abort the timed-out transaction",
    )
    read_committed = values_of(read_to_end(bootstrap, topic, 2, isolation=READ_COMMITTED))
    assert read_committed == later, "only the later records are committed data"
    read_uncommitted = values_of(read_to_end(bootstrap, topic, 2, isolation=READ_UNCOMMITTED))
    assert {v for vs in read_uncommitted.values() for v in vs} == hung_values | {v for vs in later.values() for v in vs}
    for p in range(2):
        assert list_offset(bootstrap, topic, p, read_committed=True) == list_offset(
            bootstrap, topic, p, read_committed=False
        ), "the LSO advanced past the aborted transaction"
