"""``oncestream groups list|describe|reset-offsets|delete|delete-offsets`` against a real broker
process, on classic groups made by librdkafka consumers; every effect checked with librdkafka
(its AdminClient reads the committed offsets, a librdkafka consumer starts where a reset put
the group)."""

from __future__ import annotations

import datetime

import pytest
from confluent_kafka import OFFSET_INVALID, ConsumerGroupTopicPartitions, Producer, TopicPartition

from tests.interop.test_cli import run_cli
from tests.support.clients import create_topic, unique_topic
from tests.support.cluster_kind import ONE_BROKER_ASSUMED, not_on_cluster
from tests.support.groups import (
    WAIT_TIMEOUT_S,
    GroupMember,
    group_admin,
    group_broker,  # noqa: F401 - fixture
    unique_group,
    wait_for_split,
    wait_until,
)

pytestmark = pytest.mark.interop

PARTITIONS = 3
PER_PARTITION = 10
# Half of each partition's records carry an old timestamp, half a newer one (for --to-datetime).
OLD_TS = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
NEW_TS = datetime.datetime(2021, 1, 1, tzinfo=datetime.UTC)
# The dated records' topics keep them for good: time retention would delete records this old (a
# cluster's retention pass moved a partition's start to its end mid-test, 2026-11-29).
KEPT_FOR_GOOD = {"retention.ms": "-1"}


def _ms(moment: datetime.datetime) -> int:
    return int(moment.timestamp() * 1000)


def _produce_dated(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            ts = OLD_TS if i < PER_PARTITION // 2 else NEW_TS
            producer.produce(topic, f"p{p}-{i}".encode(), partition=p, timestamp=_ms(ts))
    assert producer.flush(WAIT_TIMEOUT_S) == 0


def _rows(output: bytes) -> list[dict[str, str]]:
    """A table printed by the CLI (headers without spaces) as dicts."""
    lines = [line.split() for line in output.decode().splitlines() if line.strip()]
    header, body = lines[0], lines[1:]
    assert all(len(row) == len(header) for row in body), output.decode()
    return [dict(zip(header, row)) for row in body]


def wait_listed(bs: list[str], group_id: str, state: str) -> None:
    """Wait until ``groups list --state STATE`` lists the group."""
    wait_until(lambda: group_id in {r["GROUP"] for r in _rows(run_cli("groups", "list", "--state", state, *bs).stdout)},
               f"the group to be listed {state}")


def _committed(admin, group_id: str, topic: str) -> dict[int, int]:
    """The group's committed offsets as librdkafka's AdminClient reads them."""
    request = ConsumerGroupTopicPartitions(group_id, [TopicPartition(topic, p) for p in range(PARTITIONS)])
    result = admin.list_consumer_group_offsets([request], request_timeout=30)[group_id].result(timeout=WAIT_TIMEOUT_S)
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def _first_offsets(bootstrap: str, group_id: str, topic: str) -> dict[int, int]:
    """Where a new librdkafka member of the group starts on each partition."""
    member = GroupMember("confluent", bootstrap, group_id, topic, name="resumer").start()
    try:
        def started() -> bool:
            firsts = {d.partition for d in member.delivered()}
            return firsts == set(range(PARTITIONS))

        wait_until(started, lambda: f"records from every partition: {member}")
        first: dict[int, int] = {}
        for d in member.delivered():
            first.setdefault(d.partition, d.offset)
        return first
    finally:
        member.close()


@not_on_cluster(ONE_BROKER_ASSUMED)
def test_list_describe_lag_and_refusals_while_members_are_active(group_broker) -> None:
    bootstrap = group_broker.bootstrap
    bs = ["-b", bootstrap]
    topic = unique_topic("cli-groups")
    create_topic(bootstrap, topic, partitions=PARTITIONS, config=KEPT_FOR_GOOD)
    _produce_dated(bootstrap, topic)
    group_id = unique_group("cli-lag")
    admin = group_admin(bootstrap)
    # The member processes (and commits, one by one) 7 records, then holds: lag is the rest.
    member = GroupMember("confluent", bootstrap, group_id, topic, name="m", budget=7, commit_each=True).start()
    try:
        wait_for_split([member], PARTITIONS)
        wait_until(member.holding, lambda: f"the member to use its budget: {member}")
        committed: dict[int, int] = {}
        for d in member.committed():
            committed[d.partition] = max(committed.get(d.partition, 0), d.offset + 1)
        assert sum(committed.values()) == 7
        assert _committed(admin, group_id, topic) == {p: committed.get(p, OFFSET_INVALID) for p in range(PARTITIONS)}

        listed = {r["GROUP"]: r for r in _rows(run_cli("groups", "list", *bs).stdout)}
        assert listed[group_id] == {"GROUP": group_id, "TYPE": "classic", "STATE": "Stable", "PROTOCOL": "consumer"}
        assert group_id in {r["GROUP"] for r in _rows(run_cli("groups", "list", "--type", "classic", *bs).stdout)}
        assert group_id not in {r["GROUP"] for r in _rows(run_cli("groups", "list", "--type", "consumer", *bs).stdout)}
        assert group_id not in {r["GROUP"] for r in _rows(run_cli("groups", "list", "--state", "Empty", *bs).stdout)}

        rows = _rows(run_cli("groups", "describe", group_id, *bs).stdout)
        assert [(r["TOPIC"], int(r["PARTITION"])) for r in rows] == [(topic, p) for p in range(PARTITIONS)]
        for r in rows:
            p = int(r["PARTITION"])
            assert r["LOG-END-OFFSET"] == str(PER_PARTITION)
            if p in committed:
                assert (r["CURRENT-OFFSET"], r["LAG"]) == (str(committed[p]), str(PER_PARTITION - committed[p]))
            else:  # assigned, nothing committed yet: no lag to show (as Kafka's tool)
                assert (r["CURRENT-OFFSET"], r["LAG"]) == ("-", "-")
            assert r["CONSUMER-ID"] == member.member_id
            assert r["CLIENT-ID"] == "rdkafka"

        [m] = _rows(run_cli("groups", "describe", group_id, "--members", *bs).stdout)
        assert (m["CONSUMER-ID"], m["CLIENT-ID"], m["#PARTITIONS"]) == (member.member_id, "rdkafka", str(PARTITIONS))
        state = run_cli("groups", "describe", group_id, "--state", *bs).stdout.decode()
        assert f"{group_broker.host}:{group_broker.port}" in state
        assert state.splitlines()[1].split()[-3:] == ["range", "Stable", "1"]

        # Kafka's rule: no reset while the group has active members, not even a dry run.
        refused = run_cli("groups", "reset-offsets", group_id, "--all-topics", "--to-earliest", "--execute", *bs,
                          check=False)
        assert refused.returncode == 1
        assert b"inactive" in refused.stderr
        assert b"Stable" in refused.stderr
        # Offsets of a topic the group is subscribed to cannot be deleted; the group neither.
        subscribed = run_cli("groups", "delete-offsets", group_id, "--topic", f"{topic}:0", *bs, check=False)
        assert subscribed.returncode == 1
        assert _rows(subscribed.stdout) == [{"TOPIC": topic, "PARTITION": "0", "STATUS": "GROUP_SUBSCRIBED_TO_TOPIC"}]
        busy = run_cli("groups", "delete", group_id, *bs, check=False)
        assert busy.returncode == 1
        assert b"NON_EMPTY_GROUP" in busy.stderr
        assert _committed(admin, group_id, topic) == {p: committed.get(p, OFFSET_INVALID) for p in range(PARTITIONS)}
    finally:
        member.close()

    wait_listed(bs, group_id, "Empty")
    rows = _rows(run_cli("groups", "describe", group_id, *bs).stdout)
    assert {r["CONSUMER-ID"] for r in rows} == {"-"}
    assert [r["PARTITION"] for r in rows] == [str(p) for p in sorted(committed)]


def test_reset_offsets_dry_run_then_execute_then_delete(group_broker) -> None:
    bootstrap = group_broker.bootstrap
    bs = ["-b", bootstrap]
    topic = unique_topic("cli-reset")
    create_topic(bootstrap, topic, partitions=PARTITIONS, config=KEPT_FOR_GOOD)
    _produce_dated(bootstrap, topic)
    group_id = unique_group("cli-reset")
    admin = group_admin(bootstrap)
    start = [ConsumerGroupTopicPartitions(group_id, [TopicPartition(topic, p, 2 + p) for p in range(PARTITIONS)])]
    admin.alter_consumer_group_offsets(start, request_timeout=30)[group_id].result(timeout=WAIT_TIMEOUT_S)
    before = {p: 2 + p for p in range(PARTITIONS)}
    assert _committed(admin, group_id, topic) == before

    # A dry run (the default) prints the plan and changes nothing.
    plan = _rows(run_cli("groups", "reset-offsets", group_id, "--all-topics", "--to-earliest", *bs).stdout)
    assert {(r["TOPIC"], r["PARTITION"], r["NEW-OFFSET"]) for r in plan} == {(topic, str(p), "0") for p in range(PARTITIONS)}
    assert _committed(admin, group_id, topic) == before
    shifted = _rows(run_cli("groups", "reset-offsets", group_id, "--topic", topic, "--shift-by", "-3", "--dry-run",
                            *bs).stdout)
    assert {int(r["PARTITION"]): int(r["NEW-OFFSET"]) for r in shifted} == {0: 0, 1: 0, 2: 1}  # clamped at 0
    assert _committed(admin, group_id, topic) == before

    def execute(*spec: str) -> dict[int, int]:
        out = run_cli("groups", "reset-offsets", group_id, *spec, "--execute", *bs).stdout
        return {int(r["PARTITION"]): int(r["NEW-OFFSET"]) for r in _rows(out)}

    assert execute("--topic", f"{topic}:0,2", "--to-offset", "7") == {0: 7, 2: 7}
    assert _committed(admin, group_id, topic) == {0: 7, 1: 3, 2: 7}
    assert execute("--topic", f"{topic}:1", "--to-offset", "99") == {1: PER_PARTITION}  # past the end: the end
    assert execute("--all-topics", "--shift-by", "-2") == {0: 5, 1: PER_PARTITION - 2, 2: 5}
    # The first record stamped NEW_TS is offset 5 of every partition; NEW_TS given in another zone.
    in_tokyo = NEW_TS.astimezone(datetime.timezone(datetime.timedelta(hours=9))).isoformat()
    assert execute("--all-topics", "--to-datetime", in_tokyo) == dict.fromkeys(range(PARTITIONS), 5)
    # Every record is older than a day ago: a reset by duration goes to the end.
    assert execute("--topic", f"{topic}:2", "--by-duration", "P1DT0H") == {2: PER_PARTITION}
    assert execute("--topic", f"{topic}:0", "--to-earliest") == {0: 0}
    assert execute("--topic", f"{topic}:1", "--to-offset", "4") == {1: 4}
    expected = {0: 0, 1: 4, 2: PER_PARTITION}
    assert _committed(admin, group_id, topic) == expected

    # A librdkafka consumer of the group starts where the reset put it (partition 2 is at its end).
    assert execute("--topic", f"{topic}:2", "--to-offset", "8") == {2: 8}
    assert _first_offsets(bootstrap, group_id, topic) == {0: 0, 1: 4, 2: 8}

    # delete-offsets of an Empty group: partition 0's offset is gone, the others stay.
    wait_listed(bs, group_id, "Empty")
    admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group_id, [TopicPartition(topic, p, o) for p, o in expected.items()])],
        request_timeout=30)[group_id].result(timeout=WAIT_TIMEOUT_S)
    deleted = _rows(run_cli("groups", "delete-offsets", group_id, "--topic", f"{topic}:0", *bs).stdout)
    assert deleted == [{"TOPIC": topic, "PARTITION": "0", "STATUS": "Successful"}]
    assert _committed(admin, group_id, topic) == {0: OFFSET_INVALID, 1: 4, 2: PER_PARTITION}

    out = run_cli("groups", "delete", group_id, *bs).stdout.decode()
    assert f"'{group_id}'" in out
    assert "successful" in out
    assert group_id not in {r["GROUP"] for r in _rows(run_cli("groups", "list", *bs).stdout)}
    assert _committed(admin, group_id, topic) == dict.fromkeys(range(PARTITIONS), OFFSET_INVALID)
    again = run_cli("groups", "delete", group_id, *bs, check=False)
    assert again.returncode == 1
    assert b"GROUP_ID_NOT_FOUND" in again.stderr
    gone = run_cli("groups", "describe", group_id, *bs, check=False)
    assert gone.returncode == 1
    assert b"does not exist" in gone.stderr


def test_reset_offsets_refuses_bad_input(group_broker) -> None:
    bs = ["-b", group_broker.bootstrap]
    group_id = unique_group("cli-bad")
    topic = unique_topic("cli-bad")
    create_topic(group_broker.bootstrap, topic, partitions=1)
    no_offsets = run_cli("groups", "reset-offsets", group_id, "--all-topics", "--to-earliest", *bs, check=False)
    assert no_offsets.returncode == 1
    assert b"no offsets to reset" in no_offsets.stderr
    no_current = run_cli("groups", "reset-offsets", group_id, "--topic", topic, "--shift-by", "1", *bs, check=False)
    assert no_current.returncode == 1
    assert b"no committed offset" in no_current.stderr
    bad_duration = run_cli("groups", "reset-offsets", group_id, "--topic", topic, "--by-duration", "1h", *bs,
                           check=False)
    assert bad_duration.returncode == 1
    assert b"PnDTnHnMnS" in bad_duration.stderr
    unknown = run_cli("groups", "reset-offsets", group_id, "--topic", unique_topic("none"), "--to-earliest", *bs,
                      check=False)
    assert unknown.returncode == 1
    assert b"UNKNOWN_TOPIC_OR_PARTITION" in unknown.stderr
