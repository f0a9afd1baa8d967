"""``oncestream groups`` and ``Admin.describe_share_groups`` on a KIP-932 share group made by
librdkafka's ``ShareConsumer`` against a real broker process (h-share's broker side).

What the broker serves so far is checked here: ShareGroupDescribe (members, assignment, state,
epochs) while the consumer runs and after it left. The offsets verbs on share groups
(DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets) and share groups in
ListGroups are covered by tests/unit/test_admin_groups_wire.py only until the broker serves them.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import ShareConsumer

from oncestream.client import Admin, ConsumerGroupState
from tests.interop.test_cli import run_cli
from tests.interop.test_cli_groups import _rows
from tests.support.clients import create_topic, unique_topic
from tests.support.groups import (
    WAIT_TIMEOUT_S,
    group_broker,  # noqa: F401 - fixture
    produce_spread,
    unique_group,
    wait_until,
)

pytestmark = pytest.mark.interop

PARTITIONS = 2
RECORDS = 20


def _table(output: bytes) -> list[list[str]]:
    return [line.split() for line in output.decode().splitlines() if line.strip()]


def test_share_group_described_while_consuming_and_after(group_broker) -> None:
    bootstrap = group_broker.bootstrap
    bs = ["-b", bootstrap]
    topic = unique_topic("cli-share")
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    group_id = unique_group("cli-share")
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group_id})
    try:
        consumer.subscribe([topic])
        with Admin({"bootstrap.servers": bootstrap}) as admin:
            def joined() -> bool:
                consumer.poll(0.2)  # the share consumer joins (share.auto.offset.reset: latest)
                d = admin.describe_share_groups([group_id])[group_id]
                return d.error is None and len(d.members) == 1 and bool(d.members[0].assignment.topic_partitions)

            wait_until(joined, "the share consumer to join and get its assignment")
            produce_spread(bootstrap, topic, PARTITIONS, RECORDS)
            got = 0
            deadline = time.monotonic() + WAIT_TIMEOUT_S
            while got < RECORDS:
                assert time.monotonic() < deadline, f"only {got} of {RECORDS} records shared"
                got += sum(1 for m in consumer.poll(0.5) if m.error() is None)

            described = admin.describe_share_groups([group_id])[group_id]
            assert (described.state, described.error) == (ConsumerGroupState.STABLE, None)
            [member] = described.members
            assert member.client_id == "rdkafka"
            assert sorted((tp.topic, tp.partition) for tp in member.assignment.topic_partitions) == [
                (topic, p) for p in range(PARTITIONS)]
            assert member.member_epoch >= 1
            assert described.group_epoch >= 1
            assert described.coordinator is not None
            assert (described.coordinator.host, described.coordinator.port) == (group_broker.host, group_broker.port)

        out = run_cli("groups", "describe", group_id, "--members", "--state", *bs).stdout
        state, members = _table(out)[:2], _table(out)[2:]
        assert state[1][-4:] == ["share", "Stable", str(described.group_epoch), "1"]
        assert _rows(b"\n".join(" ".join(r).encode() for r in members)) == [{
            "GROUP": group_id, "CONSUMER-ID": member.member_id, "HOST": member.host, "CLIENT-ID": "rdkafka",
            "MEMBER-EPOCH": str(member.member_epoch), "#PARTITIONS": str(PARTITIONS),
            "ASSIGNMENT": f"{topic}:{','.join(str(p) for p in range(PARTITIONS))}"}]
        # Kafka's rule holds for share groups too: no reset while the group has members.
        refused = run_cli("groups", "reset-offsets", group_id, "--topic", topic, "--to-earliest", *bs, check=False)
        assert refused.returncode == 1
        assert b"inactive" in refused.stderr
        assert b"Stable" in refused.stderr
    finally:
        consumer.close()

    def left() -> bool:
        row = _table(run_cli("groups", "describe", group_id, "--state", *bs).stdout)[1]
        return row[-4] == "share" and row[-3] == "Empty" and row[-1] == "0"

    wait_until(left, "the share group to be Empty after its consumer closed")
    # Inactive now: the reset plan (a dry run) is made from ListOffsets.
    plan = _rows(run_cli("groups", "reset-offsets", group_id, "--topic", topic, "--to-earliest", *bs).stdout)
    assert {(r["TOPIC"], r["PARTITION"], r["NEW-OFFSET"]) for r in plan} == {(topic, str(p), "0") for p in range(PARTITIONS)}
