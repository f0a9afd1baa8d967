"""``oncestream groups`` and ``Admin.describe_share_groups`` on a KIP-932 share group made by
librdkafka's ``ShareConsumer`` against a real broker process (h-share's broker side).

Checked: ShareGroupDescribe (members, assignment, state, epochs) and DescribeShareGroupOffsets
(start offset and lag) while the consumer runs and after it left; a reset (AlterShareGroupOffsets)
that a new ShareConsumer then starts from; delete-offsets (DeleteShareGroupOffsets); delete
(DeleteGroups of the empty share group, its share state included). Also run against a cluster
(``ONCESTREAM_TEST_BROKER=cluster``): the admin requests go to the group's coordinator, which
writes the share-partitions' state through their owners' leases (broker/cluster_shares.py).
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import ShareConsumer

from oncestream.client import Admin, ConsumerGroupState, ConsumerGroupTopicPartitions
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


def _share_consume(consumer: ShareConsumer, count: int) -> list:
    """Poll until ``count`` records came (implicit acknowledgement), then commit the
    acknowledgements."""
    records: list = []
    deadline = time.monotonic() + WAIT_TIMEOUT_S
    while len(records) < count:
        assert time.monotonic() < deadline, f"only {len(records)} of {count} records shared"
        records += [m for m in consumer.poll(0.5) if m.error() is None]
    consumer.commit_sync()
    return records


def _starts(bs: list[str], group_id: str) -> dict[int, tuple[int, int]]:
    """``groups describe``'s (START-OFFSET, LAG) per partition."""
    return {int(r["PARTITION"]): (int(r["START-OFFSET"]), int(r["LAG"]))
            for r in _rows(run_cli("groups", "describe", group_id, *bs).stdout)}


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
            # With ``latest`` a share-partition starts at the group's first ShareFetch to its
            # leader; on a cluster the partitions have different leaders, fetched at different
            # times, so records produced before that fetch are (rightly) not shared. Produce only
            # once every partition has its start.
            def started() -> bool:
                consumer.poll(0.2)
                starts = _starts(bs, group_id)  # only the partitions the group has state for
                return sorted(starts) == list(range(PARTITIONS)) and all(s >= 0 for s, _ in starts.values())

            wait_until(started, lambda: f"every partition to have a share start: {_starts(bs, group_id)}")
            produce_spread(bootstrap, topic, PARTITIONS, RECORDS)
            assert len(_share_consume(consumer, RECORDS)) == RECORDS
            # Everything acknowledged: the start offsets are at the end, nothing lags.
            per_partition = RECORDS // PARTITIONS
            wait_until(lambda: _starts(bs, group_id) == dict.fromkeys(range(PARTITIONS), (per_partition, 0)),
                       lambda: f"start offsets at the end: {_starts(bs, group_id)}")
            found = admin.list_share_group_offsets([ConsumerGroupTopicPartitions(group_id)])[group_id]
            assert [(p.topic, p.partition, p.start_offset, p.lag, p.error) for p in found.partitions] == [
                (topic, p, per_partition, 0, None) for p in range(PARTITIONS)]

            described = admin.describe_share_groups([group_id])[group_id]
            assert (described.state, described.error) == (ConsumerGroupState.STABLE, None)
            [member] = described.members
            assert member.client_id == "rdkafka"
            assert sorted((tp.topic, tp.partition) for tp in member.assignment.topic_partitions) == [
                (topic, p) for p in range(PARTITIONS)]
            assert member.member_epoch >= 1
            assert described.group_epoch >= 1
            assert described.coordinator is not None
            # One broker, or the cluster kind's broker that coordinates the group.
            endpoints = {(b.host, b.port) for b in getattr(group_broker, "brokers", [group_broker])}
            assert (described.coordinator.host, described.coordinator.port) in endpoints

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
    # Inactive now: a dry run plans and changes nothing; --execute moves the start offsets.
    per_partition = RECORDS // PARTITIONS
    plan = _rows(run_cli("groups", "reset-offsets", group_id, "--topic", topic, "--to-earliest", *bs).stdout)
    assert {(r["TOPIC"], r["PARTITION"], r["NEW-OFFSET"]) for r in plan} == {(topic, str(p), "0") for p in range(PARTITIONS)}
    assert _starts(bs, group_id) == dict.fromkeys(range(PARTITIONS), (per_partition, 0))
    run_cli("groups", "reset-offsets", group_id, "--all-topics", "--shift-by", "-6", "--execute", *bs)
    assert _starts(bs, group_id) == dict.fromkeys(range(PARTITIONS), (per_partition - 6, 6))

    # A new ShareConsumer of the group is handed exactly the records from there on.
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group_id})
    try:
        consumer.subscribe([topic])
        again = _share_consume(consumer, 6 * PARTITIONS)
    finally:
        consumer.close()
    assert sorted((m.partition(), m.offset()) for m in again) == [
        (p, o) for p in range(PARTITIONS) for o in range(per_partition - 6, per_partition)]

    wait_until(left, "the share group to be Empty again")
    deleted = _rows(run_cli("groups", "delete-offsets", group_id, "--topic", topic, *bs).stdout)
    assert deleted == [{"TOPIC": topic, "STATUS": "Successful"}]
    assert _starts(bs, group_id) == {}

    # DeleteGroups of the empty share group takes its share state along (Kafka's
    # DeleteShareGroupState): state first, so that there is some to delete.
    run_cli("groups", "reset-offsets", group_id, "--topic", topic, "--to-earliest", "--execute", *bs)
    assert _starts(bs, group_id) == dict.fromkeys(range(PARTITIONS), (0, per_partition))
    deleted_group = run_cli("groups", "delete", group_id, *bs).stdout.decode()
    assert f"'{group_id}'" in deleted_group
    assert "successful" in deleted_group
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        assert admin.list_share_group_offsets([ConsumerGroupTopicPartitions(group_id)])[group_id].partitions == []
