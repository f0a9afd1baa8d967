"""Committed progress across rebalances: each record's commit succeeds exactly once in the group.

What is asserted, and why. Consumer groups give at-least-once delivery: a record processed by a
member whose commit did not land is processed again by the partition's next owner. So the test
does not claim "each record is delivered once". It claims, for members that commit ``offset + 1``
synchronously after processing every record and rewind to the record when a commit fails:

1. every produced record has exactly one successful commit across the group (no gap: nothing is
   skipped; no double: a new owner starts exactly at the previous owner's committed offset, and
   a member fenced by a newer generation cannot commit over it);
2. every extra delivery of a record is explained by a failed commit of that record (so the only
   re-deliveries are the ones at-least-once allows);
3. the group's committed offsets end at each partition's high watermark.

The scenario forces the interesting steps instead of hoping for them: a member with a record
budget stops taking records (it keeps polling and puts records back), so "a member joins while
records are unconsumed" and "a member leaves with its progress committed" are deterministic
steps; a last member then joins while the other consumes at full speed, which races the
rebalance against commits (the outcome of that race varies, the assertions do not).
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.support.clients import create_topic, unique_topic
from tests.support.groups import (
    CLIENTS,
    GroupMember,
    assert_committed_exactly_once,
    close_all,
    committed_offsets,
    group_broker,  # noqa: F401 - fixture
    produce_spread,
    unique_group,
    wait_for_split,
    wait_until,
)

pytestmark = pytest.mark.interop

PARTITIONS = 4
RECORDS = 400  # 100 per partition
A_FIRST_BUDGET = 80
B_BUDGET = 40


@pytest.mark.parametrize("client", CLIENTS)
def test_each_record_committed_exactly_once_across_rebalances(group_broker, client):
    """Join, leave and a racing join: committed progress covers every record exactly once."""
    bootstrap = group_broker.bootstrap
    topic = unique_topic("commits")
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    positions = produce_spread(bootstrap, topic, PARTITIONS, RECORDS)
    group_id = unique_group()

    def member(name: str, budget: int | None) -> GroupMember:
        return GroupMember(client, bootstrap, group_id, topic, name=name, budget=budget,
                           commit_each=True).start()

    members: list[GroupMember] = []
    try:
        # 1. a alone processes (and commits) 80 records, then holds.
        a = member("a", A_FIRST_BUDGET)
        members.append(a)
        wait_until(a.holding, lambda: f"a to use its budget: {a}")
        assert len(a.committed()) == A_FIRST_BUDGET, a

        # 2. b joins while 320 records are unconsumed: a's partitions move with a's progress.
        a_assigns = a.assign_count
        b = member("b", B_BUDGET)
        members.append(b)
        wait_for_split([a, b], PARTITIONS, {"a": a_assigns + 1, "b": 1})
        wait_until(b.holding, lambda: f"b to use its budget: {b}")

        # 3. b leaves (LeaveGroup) holding committed progress; a takes every partition over.
        a_assigns = a.assign_count
        b.close()
        wait_for_split([a], PARTITIONS, {"a": a_assigns + 1})

        # 4. a consumes at full speed while c joins: the rebalance races a's commits.
        a.grant(None)
        c = member("c", None)
        members.append(c)

        def all_committed() -> bool:
            for m in members:
                if m.alive:
                    m.check()
            values = {d.value for m in members for d in m.committed()}
            return len(values) == RECORDS

        wait_until(all_committed, lambda: f"every record committed: {members}")
    finally:
        close_all(members)

    # (1) and (2): one successful commit per record; extra deliveries only after failed commits.
    failures = assert_committed_exactly_once(members, positions)
    # For the report (pytest -rP): how the racing join went this time.
    print(f"{client}: failed commits {len(failures)} {sorted({f.error for f in failures})}; "
          f"{members}")
    # (3) the group's committed offsets are the high watermarks.
    end_offsets = Counter(partition for partition, _ in positions.values())
    assert committed_offsets(client, bootstrap, group_id, topic, PARTITIONS) == dict(end_offsets)
    # The scripted steps really happened: b committed its whole budget before leaving, and a
    # was revoked by b's join and again by b's leave.
    assert len(b.committed()) == B_BUDGET
    assert a.revoke_count >= 2
