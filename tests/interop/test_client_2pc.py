"""KIP-939 two-phase commit with oncestream.client against our broker
(``transaction.two.phase.commit.enable=true``), visibility checked with librdkafka readers.

What each test proves:
- a prepared transaction outlives its producer process (SIGKILL), its transaction timeout (a
  plain transaction with the same timeout is aborted meanwhile: the timeout sweep did run) and a
  broker SIGKILL/restart; while it is prepared, a read_committed librdkafka consumer is held at
  the LSO (the prepared records' first offset: it sees nothing from there on, not even later
  non-transactional records); a new process with keep_prepared_txn=True and the state the old
  one stored commits exactly the prepared records;
- complete_transaction with a stale or empty state aborts the kept transaction, including the
  state of an earlier, committed transaction of the same producer (each transaction has its own
  epoch under transaction version 2, which the client therefore requires for 2PC);
- init_transactions without keep_prepared_txn aborts a prepared transaction;
- prepare_transaction flushes and then forbids produce; commit works in the same process;
- asking for 2PC from a broker that has it disabled, or that only finalizes transaction
  version 1, fails init_transactions with a clear, fatal error.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from oncestream.client import (
    KafkaException,
    PreparedTxnState,
    Producer,
)
from tests.support.clients import CLIENT_TIMEOUT_S, create_topic, unique_topic
from tests.support.txn import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    describe_transaction,
    isolated_consumer,
    list_offset,
    plain_produce,
    poll_records_for,
    read_to_end,
    start_txn_broker,
    values_of,
    wait_until,
)

pytestmark = pytest.mark.interop

PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent
TWO_PC = {"transaction.two.phase.commit.enable": "true"}
TXN_TIMEOUT_MS = 1500
# Observation window for "a read_committed reader gets nothing": not a timing assertion.
QUIET_WINDOW_S = 2.0


@pytest.fixture(scope="module")
def tpc_broker(tmp_path_factory):
    broker = start_txn_broker(tmp_path_factory.mktemp("tpc") / "data", extra_config=TWO_PC)
    try:
        yield broker
    finally:
        broker.stop()


def _tpc_producer(bootstrap: str, transactional_id: str, **conf: object) -> Producer:
    base = {
        "bootstrap.servers": bootstrap,
        "transactional.id": transactional_id,
        "transaction.two.phase.commit.enable": True,
        "transaction.timeout.ms": TXN_TIMEOUT_MS,
    }
    base.update(conf)
    return Producer(base)


def _prepare(bootstrap: str, transactional_id: str, topic: str, values: list[bytes]) -> PreparedTxnState:
    """A producer instance that prepares a transaction and is then abandoned (closed without
    completing, as a process that crashed after phase one)."""
    producer = _tpc_producer(bootstrap, transactional_id)
    try:
        producer.init_transactions(CLIENT_TIMEOUT_S)
        producer.begin_transaction()
        for v in values:
            producer.produce(topic, v, partition=0)
        state = producer.prepare_transaction()
        assert str(state)
        assert producer.transaction_state() == "PreparedTransaction"
        return state
    finally:
        producer.close()


def _committed_values(bootstrap: str, topic: str) -> list[bytes]:
    return values_of(read_to_end(bootstrap, topic, 1, isolation=READ_COMMITTED))[0]


def _all_values(bootstrap: str, topic: str) -> list[bytes]:
    return values_of(read_to_end(bootstrap, topic, 1, isolation=READ_UNCOMMITTED))[0]


# -- the producer process that prepares and then waits to be killed ---------------------------

def prepare_process_main(argv: list[str]) -> int:
    """``python -m tests.interop.test_client_2pc --bootstrap ... --state-file ...``: prepare a
    transaction, write its PreparedTxnState (the application's 'database'), wait for SIGKILL."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--state-file", required=True)
    args = parser.parse_args(argv)
    producer = _tpc_producer(args.bootstrap, args.transactional_id)
    producer.init_transactions(CLIENT_TIMEOUT_S)
    producer.begin_transaction()
    for i in range(args.count):
        producer.produce(args.topic, b"prepared-%03d" % i, partition=0)
    state = producer.prepare_transaction()
    tmp = args.state_file + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"state": str(state)}, f)
    os.replace(tmp, args.state_file)
    while True:  # killed with SIGKILL by the test: no completion, no cleanup
        time.sleep(1)


def test_prepared_transaction_survives_producer_kill_timeout_and_broker_restart(tmp_path):
    broker = start_txn_broker(tmp_path / "data", extra_config=TWO_PC)
    process = None
    try:
        bootstrap = broker.bootstrap
        topic, control_topic = unique_topic("tpc-crash"), unique_topic("tpc-control")
        create_topic(bootstrap, topic, partitions=1)
        create_topic(bootstrap, control_topic, partitions=1)
        plain_produce(bootstrap, topic, {0: [b"before-%d" % i for i in range(5)]})
        transactional_id = f"tpc-{uuid.uuid4().hex[:8]}"
        state_file = tmp_path / "prepared-state.json"
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.interop.test_client_2pc", "--bootstrap", bootstrap,
             "--transactional-id", transactional_id, "--topic", topic, "--count", "25",
             "--state-file", str(state_file)],
            cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            start_new_session=True,
        )
        wait_until(lambda: state_file.exists() or process.poll() is not None, CLIENT_TIMEOUT_S,
                   "the producer process to prepare its transaction")
        assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
        stored = PreparedTxnState.from_string(json.loads(state_file.read_text())["state"])
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        plain_produce(bootstrap, topic, {0: [b"after-%d" % i for i in range(3)]})

        # Control: a plain (non-2PC) transaction with the same timeout, abandoned the same way.
        control = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"ctl-{uuid.uuid4().hex[:8]}",
                            "transaction.timeout.ms": TXN_TIMEOUT_MS})
        control.init_transactions(CLIENT_TIMEOUT_S)
        control.begin_transaction()
        control.produce(control_topic, b"abandoned", partition=0)
        assert control.flush(CLIENT_TIMEOUT_S) == 0
        control.close()
        wait_until(lambda: list_offset(bootstrap, control_topic, 0, read_committed=True)
                   == list_offset(bootstrap, control_topic, 0, read_committed=False),
                   CLIENT_TIMEOUT_S, "the coordinator to abort the timed-out plain transaction")

        def assert_held() -> None:
            assert list_offset(bootstrap, topic, 0, read_committed=True) == 5, "LSO moved past the prepared txn"
            assert list_offset(bootstrap, topic, 0, read_committed=False) == 5 + 25 + 3
            reader = isolated_consumer(bootstrap, READ_COMMITTED)
            try:
                reader.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
                seen = poll_records_for(reader, QUIET_WINDOW_S)
            finally:
                reader.close()
            assert [r.value for r in seen] == [b"before-%d" % i for i in range(5)]
            assert describe_transaction(bootstrap, transactional_id).state == "Ongoing"

        assert_held()
        broker.restart(crash=True)
        assert_held()

        recovered = _tpc_producer(bootstrap, transactional_id)
        try:
            recovered.init_transactions(CLIENT_TIMEOUT_S, keep_prepared_txn=True)
            assert recovered.prepared_transaction_state() == stored
            with pytest.raises(KafkaException):
                recovered.produce(topic, b"not allowed while prepared", partition=0)
            assert recovered.complete_transaction(stored, CLIENT_TIMEOUT_S) is True
            # The producer is usable again for the next transaction.
            recovered.begin_transaction()
            recovered.produce(topic, b"next-txn", partition=0)
            recovered.commit_transaction(CLIENT_TIMEOUT_S)
        finally:
            recovered.close()
        expected = ([b"before-%d" % i for i in range(5)] + [b"prepared-%03d" % i for i in range(25)]
                    + [b"after-%d" % i for i in range(3)] + [b"next-txn"])
        assert _committed_values(bootstrap, topic) == expected
    finally:
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()
        broker.kill()


@pytest.mark.parametrize("stale", ["other-epoch", "empty"])
def test_complete_with_a_stale_or_empty_state_aborts(tpc_broker, stale):
    bootstrap = tpc_broker.bootstrap
    topic = unique_topic(f"tpc-stale-{stale}")
    create_topic(bootstrap, topic, partitions=1)
    transactional_id = f"tpc-{uuid.uuid4().hex[:8]}"
    values = [b"p-%d" % i for i in range(10)]
    state = _prepare(bootstrap, transactional_id, topic, values)
    given = PreparedTxnState(state.producer_id, state.epoch + 1) if stale == "other-epoch" else ""
    recovered = _tpc_producer(bootstrap, transactional_id)
    try:
        recovered.init_transactions(CLIENT_TIMEOUT_S, keep_prepared_txn=True)
        assert recovered.prepared_transaction_state() == state
        assert recovered.complete_transaction(given, CLIENT_TIMEOUT_S) is False
    finally:
        recovered.close()
    assert _committed_values(bootstrap, topic) == []
    assert _all_values(bootstrap, topic) == values  # written, then aborted
    assert list_offset(bootstrap, topic, 0, read_committed=True) == list_offset(bootstrap, topic, 0, read_committed=False)


def test_state_of_an_earlier_transaction_of_the_same_producer_aborts(tpc_broker):
    """Two transactions of one producer: the first prepared and committed, the second prepared
    and abandoned. The first's state is stale for the second and must abort it."""
    bootstrap = tpc_broker.bootstrap
    topic = unique_topic("tpc-earlier")
    create_topic(bootstrap, topic, partitions=1)
    transactional_id = f"tpc-{uuid.uuid4().hex[:8]}"
    first_values = [b"first-%d" % i for i in range(5)]
    second_values = [b"second-%d" % i for i in range(5)]
    producer = _tpc_producer(bootstrap, transactional_id)
    try:
        producer.init_transactions(CLIENT_TIMEOUT_S)
        producer.begin_transaction()
        for v in first_values:
            producer.produce(topic, v, partition=0)
        first = producer.prepare_transaction()
        assert producer.complete_transaction(first, CLIENT_TIMEOUT_S) is True
        producer.begin_transaction()
        for v in second_values:
            producer.produce(topic, v, partition=0)
        second = producer.prepare_transaction()
    finally:
        producer.close()  # abandoned after phase one of the second transaction
    assert str(first) != str(second), "each transaction must have its own PreparedTxnState"
    recovered = _tpc_producer(bootstrap, transactional_id)
    try:
        recovered.init_transactions(CLIENT_TIMEOUT_S, keep_prepared_txn=True)
        assert recovered.prepared_transaction_state() == second
        assert recovered.complete_transaction(str(first), CLIENT_TIMEOUT_S) is False
    finally:
        recovered.close()
    assert _committed_values(bootstrap, topic) == first_values
    assert _all_values(bootstrap, topic) == first_values + second_values


def test_init_without_keep_prepared_aborts_the_prepared_transaction(tpc_broker):
    bootstrap = tpc_broker.bootstrap
    topic = unique_topic("tpc-nokeep")
    create_topic(bootstrap, topic, partitions=1)
    transactional_id = f"tpc-{uuid.uuid4().hex[:8]}"
    _prepare(bootstrap, transactional_id, topic, [b"doomed-%d" % i for i in range(8)])
    fresh = _tpc_producer(bootstrap, transactional_id)
    try:
        fresh.init_transactions(CLIENT_TIMEOUT_S)  # keep_prepared_txn=False
        assert fresh.prepared_transaction_state() == PreparedTxnState()
        with pytest.raises(KafkaException):
            fresh.complete_transaction(PreparedTxnState(), CLIENT_TIMEOUT_S)  # nothing is prepared
        fresh.begin_transaction()
        fresh.produce(topic, b"fresh", partition=0)
        fresh.commit_transaction(CLIENT_TIMEOUT_S)
    finally:
        fresh.close()
    assert _committed_values(bootstrap, topic) == [b"fresh"]


def test_prepare_flushes_forbids_produce_and_commits_in_process(tpc_broker):
    bootstrap = tpc_broker.bootstrap
    topic = unique_topic("tpc-inproc")
    create_topic(bootstrap, topic, partitions=1)
    producer = _tpc_producer(bootstrap, f"tpc-{uuid.uuid4().hex[:8]}", **{"linger.ms": 1000})
    delivered: list[int] = []
    try:
        producer.init_transactions(CLIENT_TIMEOUT_S)
        producer.begin_transaction()
        for i in range(20):
            producer.produce(topic, b"v%d" % i, partition=0, on_delivery=lambda e, m: delivered.append(m.offset()))
        state = producer.prepare_transaction()
        assert len(delivered) == 20  # prepare flushed (despite linger.ms=1000) and served reports
        with pytest.raises(KafkaException):
            producer.produce(topic, b"late", partition=0)
        with pytest.raises(KafkaException):
            producer.begin_transaction()
        assert producer.complete_transaction(str(state), CLIENT_TIMEOUT_S) is True
    finally:
        producer.close()
    assert _committed_values(bootstrap, topic) == [b"v%d" % i for i in range(20)]


def test_two_phase_commit_against_a_broker_without_it_fails_clearly(tmp_path):
    broker = start_txn_broker(tmp_path / "data")  # transaction.two.phase.commit.enable is false
    try:
        producer = _tpc_producer(broker.bootstrap, f"tpc-{uuid.uuid4().hex[:8]}")
        try:
            with pytest.raises(KafkaException) as info:
                producer.init_transactions(CLIENT_TIMEOUT_S)
            error = info.value.args[0]
            assert error.fatal()
            assert "transaction.two.phase.commit.enable" in error.str()
            with pytest.raises(KafkaException):
                producer.begin_transaction()
        finally:
            producer.close()
    finally:
        broker.kill()


def test_two_phase_commit_needs_transaction_version_2(tmp_path):
    broker = start_txn_broker(tmp_path / "data", extra_config={**TWO_PC, "transaction.version": "1"})
    try:
        producer = _tpc_producer(broker.bootstrap, f"tpc-{uuid.uuid4().hex[:8]}")
        try:
            with pytest.raises(KafkaException) as info:
                producer.init_transactions(CLIENT_TIMEOUT_S)
            error = info.value.args[0]
            assert error.fatal()
            assert "transaction.version 2" in error.str()
        finally:
            producer.close()
    finally:
        broker.kill()


if __name__ == "__main__":
    sys.exit(prepare_process_main(sys.argv[1:]))
