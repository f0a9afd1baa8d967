"""Atomic commit across broker crashes at every step of the coordinator (KIP-98 recovery).

The broker is started with a transaction step observer injected from the test tree
(``BrokerFaults(txn_crash_point=...)``, tests/support/broker_with_faults.py) that SIGKILLs it
during every committing transaction once PrepareCommit is durable: before any marker, between the
first and the second marker, or after all markers but before CompleteCommit. The transaction's
outcome is decided at that point, so after a restart (same port and data dir, without the
fault) recovery must finish it: every record on every partition readable with
read_committed, the consumer offsets sent with the transaction committed, the transaction in
CompleteCommit, and nothing torn (no partition committed while another is not, no record twice).

What the librdkafka producer's commit_transaction() reports across the crash does not matter
(it may succeed after the restart, time out, or fail); the final state does.
"""

from __future__ import annotations

import threading
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.support.brokers import BrokerFaults
from tests.support.clients import CLIENT_TIMEOUT_S, confluent_produce, create_topic, unique_topic
from tests.support.records import SentRecord
from tests.support.txn import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    TXN_BROKER_CONFIG,
    committed_offsets,
    describe_transaction,
    list_offset,
    produce_values,
    read_to_end,
    run_transaction,
    transaction_values,
    transactional_producer,
    values_of,
)

pytestmark = pytest.mark.chaos

DATA_PARTITIONS = 3
INPUT_PARTITIONS = 2
SIGKILL_EXIT = -9
CRASH_WAIT_S = 60.0


@pytest.mark.parametrize(
    ("crash_point", "with_offsets"),
    [
        ("before-markers", True),
        ("between-markers", True),
        ("between-markers", False),
        ("before-complete", True),
    ],
)
def test_commit_survives_broker_sigkill_at_coordinator_step(broker_factory, crash_point, with_offsets):
    """A transaction over 3 partitions (plus consumer offsets in the offsets variants) is
    committed while the broker kills itself at ``crash_point``; after the restart it is committed
    entirely."""
    broker = broker_factory(config=TXN_BROKER_CONFIG, faults=BrokerFaults(txn_crash_point=crash_point))
    bootstrap = broker.bootstrap
    topic = unique_topic("crash-data")
    input_topic = unique_topic("crash-in")
    group = f"crash-group-{uuid.uuid4().hex[:8]}"
    txn_id = f"crash-{crash_point}-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=DATA_PARTITIONS)
    create_topic(bootstrap, input_topic, partitions=INPUT_PARTITIONS)
    confluent_produce(
        bootstrap, input_topic, [SentRecord(f"k{i}".encode(), f"in-{i}".encode()) for i in range(40)]
    )
    input_ends = {p: list_offset(bootstrap, input_topic, p, read_committed=False) for p in range(INPUT_PARTITIONS)}
    # The offsets this "consume-transform-produce" step claims to have consumed up to.
    consumed_to = {p: max(0, end - 3) for p, end in input_ends.items()}

    # A transaction that commits before the fault matters: the crash hits committing
    # transactions only, so warm-up work must not involve commits. Aborts are safe.
    # metadata.recovery.strategy=none: see tests/support/txn.py copier_main (librdkafka's
    # re-bootstrap after its only broker died can stall transactional requests).
    producer = transactional_producer(
        bootstrap, txn_id, **{"transaction.timeout.ms": 60000, "metadata.recovery.strategy": "none"}
    )
    producer.init_transactions(CLIENT_TIMEOUT_S)
    run_transaction(producer, topic, transaction_values("aborted", range(DATA_PARTITIONS), 3), commit=False)

    committed_values = transaction_values("crash", range(DATA_PARTITIONS), 8)
    producer.begin_transaction()
    produce_values(producer, topic, committed_values)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    if with_offsets:
        metadata_consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
        try:
            producer.send_offsets_to_transaction(
                [TopicPartition(input_topic, p, o) for p, o in consumed_to.items()],
                metadata_consumer.consumer_group_metadata(),
                CLIENT_TIMEOUT_S,
            )
        finally:
            metadata_consumer.close()

    commit_outcome: list[object] = []

    def commit() -> None:
        try:
            producer.commit_transaction(CLIENT_TIMEOUT_S)
            commit_outcome.append("committed")
        except Exception as exc:  # noqa: BLE001 - any outcome is acceptable; the final state is what counts
            commit_outcome.append(exc)

    committer = threading.Thread(target=commit, name="commit-transaction", daemon=True)
    committer.start()
    exit_code = broker.process.wait(timeout=CRASH_WAIT_S)
    assert exit_code == SIGKILL_EXIT, (
        f"the broker should have killed itself at {crash_point}, exit code {exit_code}; "
        f"stderr:\n{broker.stderr_tail()}"
    )

    broker.faults = None
    broker.start()
    committer.join(CLIENT_TIMEOUT_S + 10)
    assert not committer.is_alive(), "commit_transaction() never returned"

    assert describe_transaction(bootstrap, txn_id).state == "CompleteCommit"
    read_committed = values_of(read_to_end(bootstrap, topic, DATA_PARTITIONS, isolation=READ_COMMITTED))
    assert read_committed == committed_values, f"torn or lost commit (producer saw {commit_outcome})"
    read_uncommitted = values_of(read_to_end(bootstrap, topic, DATA_PARTITIONS, isolation=READ_UNCOMMITTED))
    aborted_values = transaction_values("aborted", range(DATA_PARTITIONS), 3)
    assert read_uncommitted == {p: aborted_values[p] + committed_values[p] for p in range(DATA_PARTITIONS)}, (
        "every record exactly once in the log"
    )
    for p in range(DATA_PARTITIONS):
        assert list_offset(bootstrap, topic, p, read_committed=True) == list_offset(
            bootstrap, topic, p, read_committed=False
        )
    if with_offsets:
        assert committed_offsets(bootstrap, group, input_topic, INPUT_PARTITIONS) == consumed_to

    # The coordinator is usable after recovery: the same transactional id commits again.
    successor = transactional_producer(bootstrap, txn_id)
    successor.init_transactions(CLIENT_TIMEOUT_S)
    after = transaction_values("after", range(DATA_PARTITIONS), 2)
    run_transaction(successor, topic, after, commit=True)
    final = values_of(read_to_end(bootstrap, topic, DATA_PARTITIONS, isolation=READ_COMMITTED))
    assert final == {p: committed_values[p] + after[p] for p in range(DATA_PARTITIONS)}
