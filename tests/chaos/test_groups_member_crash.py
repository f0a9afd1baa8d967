"""A group member that dies without LeaveGroup (SIGKILL of its process) is expired by the broker
after session.timeout.ms, and its partitions move to the surviving member (Kafka's heartbeat
session timer, the only way a crashed member ever leaves a classic group).
"""

from __future__ import annotations

import select
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.support.clients import create_topic, unique_topic
from tests.support.groups import (
    CLIENTS,
    GROUP_BROKER_CONFIG,
    WAIT_TIMEOUT_S,
    GroupMember,
    close_all,
    describe_group,
    group_admin,
    unique_group,
    wait_for_broker_view,
    wait_for_split,
    wait_until,
)

pytestmark = pytest.mark.chaos

PARTITIONS = 4
CRASHING_SESSION_TIMEOUT_MS = 3_000

# A librdkafka consumer in its own process: prints each assignment it gets (the first may be a
# solo generation formed before the survivor joined), then polls until it is killed.
_CRASHING_MEMBER = textwrap.dedent(
    """
    import sys
    from confluent_kafka import Consumer

    bootstrap, group_id, topic, session_ms = sys.argv[1:5]
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group_id, "enable.auto.commit": False,
        "partition.assignment.strategy": "range", "session.timeout.ms": int(session_ms),
        "heartbeat.interval.ms": 250,
    })
    def on_assign(c, parts):
        if parts:
            print("ASSIGNED", c.memberid(), *sorted(p.partition for p in parts), flush=True)

    consumer.subscribe([topic], on_assign=on_assign)
    while True:
        consumer.poll(0.1)
    """
)


@pytest.mark.parametrize("survivor_client", CLIENTS)
def test_killed_member_expires_and_its_partitions_move(broker_factory, survivor_client):
    """SIGKILL one of two members: after its session times out the survivor owns all
    partitions, and DescribeGroups lists only the survivor."""
    broker = broker_factory(config=GROUP_BROKER_CONFIG)
    bootstrap = broker.bootstrap
    topic = unique_topic("crash")
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    group_id = unique_group("crash")

    survivor = GroupMember(survivor_client, bootstrap, group_id, topic, name="survivor").start()
    crashing = subprocess.Popen(
        [sys.executable, "-c", _CRASHING_MEMBER, bootstrap, group_id, topic,
         str(CRASHING_SESSION_TIMEOUT_MS)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        line = _read_line(crashing, WAIT_TIMEOUT_S).split()
        assert line[:1] == ["ASSIGNED"], f"crashing member did not join: {line}"
        crashed_id, crashed_partitions = line[1], frozenset(int(p) for p in line[2:])
        view = _wait_for_two_member_view(bootstrap, group_id, topic, survivor, crashed_id)

        def crashing_member_agrees() -> bool:
            # Its latest assign callback (it prints one per generation: the first may be a solo
            # generation formed before the survivor joined) names what the broker says it holds.
            nonlocal crashed_partitions
            while (more := _read_line(crashing, 0.05).split())[:1] == ["ASSIGNED"]:
                assert more[1] == crashed_id, f"the crashing member's id changed: {more}"
                crashed_partitions = frozenset(int(p) for p in more[2:])
            return crashed_partitions == view.members[crashed_id]

        wait_until(crashing_member_agrees, lambda: f"crashing member holds {sorted(crashed_partitions)}, "
                   f"the broker says {sorted(view.members[crashed_id])}")
        survivor_assigns = survivor.assign_count  # the generation the two members share

        crashing.send_signal(signal.SIGKILL)
        crashing.wait(30)

        after = wait_for_split([survivor], PARTITIONS, {"survivor": survivor_assigns + 1})
        assert after["survivor"] == frozenset(range(PARTITIONS))
        final = wait_for_broker_view(bootstrap, group_id, topic, [survivor])
        assert crashed_id not in final.members
    finally:
        if crashing.poll() is None:
            crashing.kill()
            crashing.wait(30)
        close_all([survivor])


def _read_line(process: subprocess.Popen, timeout_s: float) -> str:
    """The next line the process prints ("" if it exits or stays silent for ``timeout_s``)."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout_s)
    return process.stdout.readline() if ready else ""


def _wait_for_two_member_view(bootstrap, group_id, topic, survivor, crashed_id):
    """DescribeGroups: Stable with the survivor and the crashing member, sharing the topic."""
    admin = group_admin(bootstrap)
    seen: list[object] = []

    def ready() -> bool:
        view = describe_group(admin, group_id, topic)
        seen[:] = [view]
        return (view.state == "STABLE"
                and set(view.members) == {survivor.member_id, crashed_id}
                and view.members[survivor.member_id] == survivor.assignment
                and frozenset().union(*view.members.values()) == frozenset(range(PARTITIONS)))

    wait_until(ready, lambda: f"both members in a Stable group: {seen}, survivor {survivor}")
    return seen[0]
