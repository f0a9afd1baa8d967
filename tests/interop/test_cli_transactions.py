"""``oncestream transactions list|describe|abort`` (KIP-664) against a real broker process."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from tests.interop.test_cli import run_cli
from tests.support.clients import create_topic, unique_topic
from tests.support.txn import READ_COMMITTED, list_offset, read_to_end, values_of

pytestmark = [pytest.mark.interop]


def test_list_describe_and_abort_a_hanging_transaction(broker) -> None:
    bs = ["-b", broker.bootstrap]
    topic = unique_topic("cli-hang")
    create_topic(broker.bootstrap, topic, partitions=2)
    txn_id = unique_topic("hanging")
    stuck = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id, "transaction.timeout.ms": 600000})
    stuck.init_transactions(30)
    stuck.begin_transaction()
    stuck.produce(topic, b"never-committed", partition=0)
    assert stuck.flush(30) == 0
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic, b"after", partition=0)
    plain.produce(topic, b"other", partition=1)
    assert plain.flush(30) == 0

    listing = run_cli("transactions", "list", *bs).stdout.decode()
    assert any(line.split("\t")[0] == txn_id and line.endswith("Ongoing") for line in listing.splitlines())
    described = run_cli("transactions", "describe", "--transactional-id", txn_id, *bs).stdout.decode()
    assert "state Ongoing" in described
    assert f"{topic}: partitions [0]" in described
    # The open transaction holds partition 0 back from read_committed readers: LSO 0, HW 2.
    assert list_offset(broker.bootstrap, topic, 0, read_committed=True) == 0
    assert list_offset(broker.bootstrap, topic, 0, read_committed=False) == 2

    # Aborted through its coordinator (WriteTxnMarkers from a client is refused): the stuck
    # producer is fenced and its transaction ends CompleteAbort.
    aborted = run_cli("transactions", "abort", "--topic", topic, "--partition", "0", *bs).stdout.decode()
    assert f"aborted transaction {txn_id!r}" in aborted
    assert "starting at offset 0" in aborted
    described = run_cli("transactions", "describe", "--transactional-id", txn_id, *bs).stdout.decode()
    assert "state CompleteAbort" in described
    assert values_of(read_to_end(broker.bootstrap, topic, 2, isolation=READ_COMMITTED)) == {0: [b"after"], 1: [b"other"]}
    nothing = run_cli("transactions", "abort", "--topic", topic, "--partition", "0", *bs, check=False)
    assert nothing.returncode == 1
    assert b"no open transaction" in nothing.stderr


def test_describe_of_an_unknown_transactional_id_is_a_clear_error(broker) -> None:
    """DescribeTransactions answers an unknown id with TRANSACTIONAL_ID_NOT_FOUND and a -1 start
    time; the CLI prints the error (the raw-request CLI died decoding that start time)."""
    result = run_cli("transactions", "describe", "--transactional-id", unique_topic("nobody"),
                     "-b", broker.bootstrap, check=False)
    assert result.returncode == 1
    assert b"TRANSACTIONAL_ID_NOT_FOUND" in result.stderr
    assert b"Traceback" not in result.stderr
