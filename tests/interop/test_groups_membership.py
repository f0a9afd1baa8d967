"""Classic group protocol with real clients: partition split and rebalances on join and leave.

Members subscribe with the eager range assignor (see tests/support/groups.py). What is checked is
what the clients themselves report through their rebalance callbacks, cross-checked against
DescribeGroups (the broker's view of members and their assignments).
"""

from __future__ import annotations

import pytest

from tests.support.clients import create_topic, unique_topic
from tests.support.groups import (
    CLIENTS,
    GroupMember,
    close_all,
    group_broker,  # noqa: F401 - fixture
    unique_group,
    wait_for_broker_view,
    wait_for_split,
)

pytestmark = pytest.mark.interop

PARTITIONS = 4


@pytest.mark.parametrize("client", CLIENTS)
def test_two_members_split_four_partitions(group_broker, client):
    """Two members of one group each own 2 of 4 partitions: disjoint, together all of them."""
    topic = unique_topic("split")
    create_topic(group_broker.bootstrap, topic, partitions=PARTITIONS)
    group_id = unique_group()
    members = [
        GroupMember(client, group_broker.bootstrap, group_id, topic, name=name).start()
        for name in ("a", "b")
    ]
    try:
        split = wait_for_split(members, PARTITIONS)
        assert sorted(len(parts) for parts in split.values()) == [2, 2], split
        wait_for_broker_view(group_broker.bootstrap, group_id, topic, members)
        ids = {m.member_id for m in members}
        assert len(ids) == 2, f"members need distinct ids: {ids}"
        assert None not in ids, f"members need distinct ids: {ids}"
    finally:
        close_all(members)


@pytest.mark.parametrize("client", CLIENTS)
def test_join_and_leave_each_trigger_a_rebalance(group_broker, client):
    """A third member joining moves partitions to it; a member leaving (close() sends
    LeaveGroup) hands them back. After each rebalance the split is complete and disjoint, and
    every remaining member went through a revoke/assign round."""
    topic = unique_topic("rebalance")
    create_topic(group_broker.bootstrap, topic, partitions=PARTITIONS)
    group_id = unique_group()
    bootstrap = group_broker.bootstrap
    a = GroupMember(client, bootstrap, group_id, topic, name="a").start()
    b = GroupMember(client, bootstrap, group_id, topic, name="b").start()
    c: GroupMember | None = None
    try:
        before = wait_for_split([a, b], PARTITIONS)
        assigns = {"a": a.assign_count, "b": b.assign_count}
        revokes = {"a": a.revoke_count, "b": b.revoke_count}

        # Join: a and b must rejoin (eager: revoke, then a new assignment).
        c = GroupMember(client, bootstrap, group_id, topic, name="c").start()
        with_c = wait_for_split(
            [a, b, c], PARTITIONS, {"a": assigns["a"] + 1, "b": assigns["b"] + 1, "c": 1})
        assert sorted(len(p) for p in with_c.values()) == [1, 1, 2], with_c
        assert (with_c["a"], with_c["b"]) != (before["a"], before["b"]), "nothing moved to c"
        assert a.revoke_count > revokes["a"]
        assert b.revoke_count > revokes["b"]
        wait_for_broker_view(bootstrap, group_id, topic, [a, b, c])

        # Leave: c closes; a and b rejoin and share all four partitions again.
        assigns = {"a": a.assign_count, "b": b.assign_count}
        c.close()
        after = wait_for_split([a, b], PARTITIONS, {"a": assigns["a"] + 1, "b": assigns["b"] + 1})
        assert sorted(len(p) for p in after.values()) == [2, 2], after
        assert with_c["c"] <= after["a"] | after["b"]
        wait_for_broker_view(bootstrap, group_id, topic, [a, b])
    finally:
        close_all([a, b, c])
