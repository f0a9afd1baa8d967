"""A SIGKILLed broker brings consumer groups (KIP-848) back as they were: librdkafka members
(``group.protocol=consumer``) that were consuming when it died carry on at their epochs with
their assignments (no partition is lost or revoked across the crash) and no record is lost."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.support.brokers import BrokerProcess
from tests.support.clients import create_topic, unique_topic
from tests.support.consumer_protocol import (
    CONSUMER_PROTOCOL_BROKER_CONFIG,
    ProtocolMember,
    close_all,
    describe,
    wait_until,
)

pytestmark = pytest.mark.chaos

PARTITIONS = 4


def produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(start, start + count):
        producer.produce(topic, f"v{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(60) == 0


def test_members_carry_on_across_a_broker_sigkill(tmp_path: Path):
    process = BrokerProcess(tmp_path / "data", config=CONSUMER_PROTOCOL_BROKER_CONFIG).start()
    members: list[ProtocolMember] = []
    try:
        topic = unique_topic("cg-sigkill")
        create_topic(process.bootstrap, topic, partitions=PARTITIONS)
        group = f"cg-{uuid.uuid4().hex[:8]}"
        produce(process.bootstrap, topic, 0, 200)
        a = ProtocolMember(process.bootstrap, group, [topic], "a").start()
        b = ProtocolMember(process.bootstrap, group, [topic], "b").start()
        members = [a, b]
        wait_until(lambda: all(len(m.owned()) == 2 for m in members), "no two-two split")
        wait_until(lambda: describe(process.bootstrap, group).group_state == "Stable", "the group never settled")
        before = describe(process.bootstrap, group)
        owned = {m.name: m.owned() for m in members}
        revocations = {m.name: len(m.revoked) for m in members}
        wait_until(lambda: sum(len(m.consumed) for m in members) >= 50, "nothing consumed before the crash")
        process.kill()
        process.start()
        produce(process.bootstrap, topic, 200, 200)
        expected = {(topic, p, o) for p in range(PARTITIONS) for o in range(100)}
        wait_until(lambda: expected <= {r for m in members for r in m.consumed},
                   lambda: f"{len(expected - {r for m in members for r in m.consumed})} records never consumed")
        after = describe(process.bootstrap, group)
        assert [(m.member_id, m.member_epoch) for m in after.members] == \
            [(m.member_id, m.member_epoch) for m in before.members], "the members were fenced by the restart"
        for m in members:
            assert m.owned() == owned[m.name]
            assert len(m.revoked) == revocations[m.name], f"{m.name} lost partitions across the crash"
    finally:
        close_all(members)
        process.stop()
