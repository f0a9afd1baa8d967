"""``oncestream groups`` and ``Admin``'s group methods on a KIP-848 consumer group: librdkafka
consumers with ``group.protocol=consumer`` against a real broker process, every effect checked
with librdkafka (its AdminClient, and a consumer that starts where a reset put the group)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, TopicPartition
from confluent_kafka import ConsumerGroupType as RdType

from oncestream.client import Admin, ConsumerGroupState, ConsumerGroupType
from tests.interop.test_cli import run_cli
from tests.interop.test_cli_groups import _committed, _rows, wait_listed
from tests.support.clients import create_topic, unique_topic
from tests.support.groups import (
    WAIT_TIMEOUT_S,
    group_admin,
    group_broker,  # noqa: F401 - fixture
    produce_spread,
    unique_group,
)

pytestmark = pytest.mark.interop

PARTITIONS = 3
PER_PARTITION = 10


def _consumer(bootstrap: str, group_id: str, topic: str) -> Consumer:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group_id, "group.protocol": "consumer",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    return consumer


def _poll_until(consumer: Consumer, done, what: str) -> list:
    """Poll (serving the member's heartbeats and assignment) until ``done(records)``."""
    records: list = []
    deadline = time.monotonic() + WAIT_TIMEOUT_S
    while not done(records):
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {len(records)} records"
        msg = consumer.poll(0.1)
        if msg is None:
            continue
        error = msg.error()
        if error is not None:
            assert error.code() == KafkaError._PARTITION_EOF, error
            continue
        records.append(msg)
    return records


def test_consumer_protocol_group_listed_described_reset_and_deleted(group_broker) -> None:
    bootstrap = group_broker.bootstrap
    bs = ["-b", bootstrap]
    topic = unique_topic("cli-kip848")
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    produce_spread(bootstrap, topic, PARTITIONS, PARTITIONS * PER_PARTITION)
    group_id = unique_group("cli-kip848")
    rd = group_admin(bootstrap)
    committed = {0: 3, 1: 5, 2: 7}

    consumer = _consumer(bootstrap, group_id, topic)
    try:
        _poll_until(consumer, lambda _r: len(consumer.assignment()) == PARTITIONS, "the whole assignment")
        result = consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in committed.items()], asynchronous=False)
        assert all(tp.error is None for tp in result)
        assert _committed(rd, group_id, topic) == committed
        member_id = consumer.memberid()

        listed = {r["GROUP"]: r for r in _rows(run_cli("groups", "list", *bs).stdout)}
        assert listed[group_id] == {"GROUP": group_id, "TYPE": "consumer", "STATE": "Stable", "PROTOCOL": "consumer"}
        assert group_id in {r["GROUP"] for r in _rows(run_cli("groups", "list", "--type", "consumer", *bs).stdout)}
        assert group_id not in {r["GROUP"] for r in _rows(run_cli("groups", "list", "--type", "classic", *bs).stdout)}

        rows = _rows(run_cli("groups", "describe", group_id, *bs).stdout)
        assert [(int(r["PARTITION"]), int(r["CURRENT-OFFSET"]), int(r["LOG-END-OFFSET"]), int(r["LAG"]), r["CONSUMER-ID"])
                for r in rows] == [(p, o, PER_PARTITION, PER_PARTITION - o, member_id) for p, o in committed.items()]
        state = run_cli("groups", "describe", group_id, "--state", *bs).stdout.decode().splitlines()[1].split()
        assert state[-4:-2] == ["consumer", "uniform"]  # type, the broker's default assignor
        assert state[-2:] == ["Stable", "1"]

        # Checked against the librdkafka member's own view and librdkafka's AdminClient.
        with Admin({"bootstrap.servers": bootstrap}) as admin:
            ours = admin.describe_consumer_groups([group_id])[group_id]
            by_type = admin.list_consumer_groups(types=[ConsumerGroupType.CONSUMER]).valid
        assert (ours.type, ours.state, ours.error, ours.partition_assignor) == (
            ConsumerGroupType.CONSUMER, ConsumerGroupState.STABLE, None, "uniform")
        [m] = ours.members
        assert m.member_id == member_id
        assert m.client_id == "rdkafka"
        assert sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions) == sorted(
            (tp.topic, tp.partition) for tp in consumer.assignment())
        assert m.member_epoch >= 1
        assert ours.group_epoch >= 1
        theirs = rd.describe_consumer_groups([group_id], request_timeout=30)[group_id].result(timeout=WAIT_TIMEOUT_S)
        assert (ours.type.name, ours.state.name, ours.partition_assignor, ours.is_simple_consumer_group) == (
            theirs.type.name, theirs.state.name, theirs.partition_assignor, theirs.is_simple_consumer_group)
        assert [(x.member_id, x.client_id, x.host, sorted((tp.topic, tp.partition) for tp in x.assignment.topic_partitions))
                for x in ours.members] == [
            (x.member_id, x.client_id, x.host, sorted((tp.topic, tp.partition) for tp in x.assignment.topic_partitions))
            for x in theirs.members]
        rd_listed = rd.list_consumer_groups(types={RdType.CONSUMER}, request_timeout=30).result(timeout=WAIT_TIMEOUT_S)
        assert [(g.group_id, g.state.name, g.type.name) for g in by_type if g.group_id == group_id] == [
            (g.group_id, g.state.name, g.type.name) for g in rd_listed.valid if g.group_id == group_id] == [
            (group_id, "STABLE", "CONSUMER")]

        refused = run_cli("groups", "reset-offsets", group_id, "--all-topics", "--to-earliest", "--execute", *bs,
                          check=False)
        assert refused.returncode == 1
        assert b"inactive" in refused.stderr
        assert _committed(rd, group_id, topic) == committed
    finally:
        consumer.close()

    wait_listed(bs, group_id, "Empty")
    plan = _rows(run_cli("groups", "reset-offsets", group_id, "--all-topics", "--shift-by", "-2", "--execute",
                         *bs).stdout)
    assert {int(r["PARTITION"]): int(r["NEW-OFFSET"]) for r in plan} == {p: o - 2 for p, o in committed.items()}
    reset = {p: o - 2 for p, o in committed.items()}
    assert _committed(rd, group_id, topic) == reset

    # A new consumer-protocol member starts where the reset put the group.
    consumer = _consumer(bootstrap, group_id, topic)
    try:
        records = _poll_until(consumer, lambda rs: {m.partition() for m in rs} == set(range(PARTITIONS)),
                              "records from every partition")
        first: dict[int, int] = {}
        for m in records:
            first.setdefault(m.partition(), m.offset())
        assert first == reset
    finally:
        consumer.close()

    wait_listed(bs, group_id, "Empty")
    deleted = _rows(run_cli("groups", "delete-offsets", group_id, "--topic", f"{topic}:1", *bs).stdout)
    assert deleted == [{"TOPIC": topic, "PARTITION": "1", "STATUS": "Successful"}]
    assert _committed(rd, group_id, topic) == {0: reset[0], 1: OFFSET_INVALID, 2: reset[2]}
    run_cli("groups", "delete", group_id, *bs)
    assert group_id not in {r["GROUP"] for r in _rows(run_cli("groups", "list", *bs).stdout)}
    assert _committed(rd, group_id, topic) == dict.fromkeys(range(PARTITIONS), OFFSET_INVALID)
