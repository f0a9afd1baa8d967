"""Static membership (KIP-345): a member with ``group.instance.id`` that restarts within its
session timeout gets its previous assignment back without a rebalance.

Both clients support it: librdkafka (``group.instance.id``) and kafka-python
(``group_instance_id``); neither sends LeaveGroup when a static member closes.

Why "no rebalance" can be asserted without timing: members use the eager protocol, where a member
revokes its partitions (rebalance callback) *before* it sends JoinGroup for a new generation, and
a new generation cannot complete until every known member has rejoined. So if the restart had
started a rebalance, the restarted member could only receive an assignment after the other
member's revoke callback ran. Once the restarted member holds its assignment, an unchanged
callback count on the other member proves no new generation was formed. DescribeGroups then
confirms the broker's side: still Stable, the other member's id and partitions unchanged, and the
static slot now held by the new member id with the same partitions.
"""

from __future__ import annotations

import pytest

from tests.support.clients import create_topic, unique_topic
from tests.support.groups import (
    CLIENTS,
    GroupMember,
    close_all,
    describe_group,
    group_admin,
    group_broker,  # noqa: F401 - fixture
    unique_group,
    wait_for_broker_view,
    wait_for_split,
    wait_until,
)
from tests.support.narrow import present

pytestmark = pytest.mark.interop

PARTITIONS = 4
# Long enough that the restart always happens inside the session; the test never waits for it.
STATIC_SESSION_TIMEOUT_MS = 30_000


@pytest.mark.parametrize("restarted_role", ["follower", "leader"])
@pytest.mark.parametrize("client", CLIENTS)
def test_static_member_restart_keeps_assignment_without_rebalance(group_broker, client,
                                                                  restarted_role):
    """Close a static member (no LeaveGroup) and start it again with the same instance id: it
    gets the same partitions back and the other member sees no rebalance.

    ``restarted_role`` says whether the restarted member was the group leader (the first member
    to join is the leader) or a follower; a returning static leader must not be able to force a
    new assignment either.
    """
    bootstrap = group_broker.bootstrap
    topic = unique_topic("static")
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    group_id = unique_group("static")
    instance_id = f"{group_id}-instance-s"

    def static_member(name: str) -> GroupMember:
        return GroupMember(client, bootstrap, group_id, topic, name=name, instance_id=instance_id,
                           session_timeout_ms=STATIC_SESSION_TIMEOUT_MS).start()

    def other_member() -> GroupMember:
        return GroupMember(client, bootstrap, group_id, topic, name="other",
                           session_timeout_ms=STATIC_SESSION_TIMEOUT_MS).start()

    members: list[GroupMember] = []
    try:
        first = static_member("static") if restarted_role == "leader" else other_member()
        members.append(first)
        wait_for_split([first], PARTITIONS)
        # Counted before the second member starts: the rebalance its join causes must come after
        # this (counted later, a rebalance already done while start() ran would be waited for
        # again, forever).
        first_assigns = first.assign_count
        second = other_member() if restarted_role == "leader" else static_member("static")
        members.append(second)
        wait_for_split(members, PARTITIONS, {first.name: first_assigns + 1})
        static, other = (first, second) if restarted_role == "leader" else (second, first)
        before = wait_for_broker_view(bootstrap, group_id, topic, [static, other])
        old_static_id = present(static.member_id, "static member id")
        assert before.instance_ids[old_static_id] == instance_id
        old_partitions = static.assignment
        other_assigns, other_revokes = other.assign_count, other.revoke_count

        # Close without LeaveGroup: the broker still holds the static member until its session
        # times out (30 s; this check runs right away).
        static.close()
        admin = group_admin(bootstrap)
        while_away = describe_group(admin, group_id, topic)
        assert while_away.state == "STABLE", while_away
        assert set(while_away.members) == {old_static_id, other.member_id}, (
            f"a static member's close must not leave the group: {while_away}")

        restarted = static_member("static-restarted")
        members.append(restarted)
        wait_until(lambda: bool(restarted.assignment) or not restarted.alive,
                   lambda: f"the restarted static member to get an assignment: {restarted}")
        restarted.check()
        assert restarted.assignment == old_partitions
        assert restarted.assign_count == 1
        # No new generation: the other member never revoked or got a new assignment.
        assert (other.assign_count, other.revoke_count) == (other_assigns, other_revokes), other
        other_id = present(other.member_id, "other member id")
        assert other.assignment == before.members[other_id]

        after = wait_for_broker_view(bootstrap, group_id, topic, [restarted, other])
        assert after.members[other_id] == before.members[other_id]
        assert after.instance_ids[present(restarted.member_id, "restarted member id")] == instance_id
        assert old_static_id not in after.members
        assert (other.assign_count, other.revoke_count) == (other_assigns, other_revokes), other
    finally:
        close_all(members)
