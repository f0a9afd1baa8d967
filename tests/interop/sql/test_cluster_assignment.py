"""Query placement over the Kafka group protocol (issue 12 point 6): members of one group per
service id, protocol type ``oncestream-sql``; the leader places every persistent query on
exactly one member, balanced and sticky, moving a running query only after its owner let go.

The members here are the real ``QueryAssignment`` over a real broker; the "queries" are names
each member runs by recording them (the Spark side is in tests/chaos/sql/).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from oncestream.client import Admin
from oncestream.sql.server.assignment import (
    PROTOCOL_TYPE,
    Assignment,
    MemberInfo,
    QueryAssignment,
    assignment_group_id,
    compute_assignment,
)
from tests.support.groups import group_broker  # noqa: F401 - fixture

pytestmark = pytest.mark.interop

WAIT_S = 60.0


def test_compute_assignment_is_balanced_deterministic_and_sticky() -> None:
    members = [MemberInfo("m2", "http://b"), MemberInfo("m1", "http://a")]
    queries = [f"Q{i}" for i in range(5)]
    first = compute_assignment(members, queries)
    assert first == compute_assignment(list(reversed(members)), list(reversed(queries)))
    assert sorted(q for ids in first.values() for q in ids) == queries
    assert sorted(len(ids) for ids in first.values()) == [2, 3]
    # Sticky: members keep what they run.
    owned = [MemberInfo("m1", "http://a", ("Q4",)), MemberInfo("m2", "http://b", ("Q0", "Q1"))]
    again = compute_assignment(owned, queries)
    assert "Q4" in again["m1"]
    assert {"Q0", "Q1"} <= set(again["m2"])


def test_compute_assignment_moves_cooperatively() -> None:
    """A query running on a live member that must move goes to nobody this generation."""
    busy = MemberInfo("m1", "http://a", ("Q0", "Q1", "Q2", "Q3"))
    newcomer = MemberInfo("m2", "http://b")
    placement = compute_assignment([busy, newcomer], ["Q0", "Q1", "Q2", "Q3"])
    assert placement["m1"] == ["Q0", "Q1"]
    assert placement["m2"] == []  # Q2, Q3 wait until m1 stopped them
    after = compute_assignment([MemberInfo("m1", "http://a", ("Q0", "Q1")), newcomer], ["Q0", "Q1", "Q2", "Q3"])
    assert after == {"m1": ["Q0", "Q1"], "m2": ["Q2", "Q3"]}


class Member:
    """One node's assignment member; runs what it is assigned (a set of names)."""

    def __init__(self, bootstrap: str, service_id: str, url: str, queries: Callable[[], tuple[int, list[str]]]) -> None:
        self.running: set[str] = set()
        self.lock = threading.Lock()
        self.assignments: list[Assignment | None] = []
        self.member = QueryAssignment(
            service_id=service_id, url=url, client_conf={"bootstrap.servers": bootstrap},
            known_queries=queries, owned=self.owned, wait_for_offset=lambda offset, timeout_s: True,
            on_assignment=self.on_assignment, session_timeout_ms=3_000, heartbeat_interval_ms=300)

    def owned(self) -> list[str]:
        with self.lock:
            return sorted(self.running)

    def on_assignment(self, assignment: Assignment | None) -> None:
        with self.lock:
            self.running = set(assignment.mine) if assignment is not None else set()
            self.assignments.append(assignment)
        self.member.poke()


def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@dataclass
class KnownQueries:
    """The command-topic offset and query ids the members are told about (changed by the test)."""

    offset: int
    ids: list[str]


def test_queries_shared_out_and_taken_over(group_broker) -> None:
    service_id = f"svc_{uuid.uuid4().hex[:8]}"
    known = KnownQueries(offset=3, ids=["CSAS_A_1", "CSAS_B_2", "CTAS_C_3"])

    def queries() -> tuple[int, list[str]]:
        return known.offset, list(known.ids)

    a = Member(group_broker.bootstrap, service_id, "http://127.0.0.1:1", queries)
    b = Member(group_broker.bootstrap, service_id, "http://127.0.0.1:2", queries)
    a.member.start()
    b.member.start()
    try:
        def split_ok() -> bool:
            ra, rb = a.owned(), b.owned()
            return sorted(ra + rb) == sorted(known.ids) and not set(ra) & set(rb) and ra != [] and rb != []

        wait_until(split_ok, "the three queries split over both members")
        with Admin({"bootstrap.servers": group_broker.bootstrap}) as admin:
            group = admin.describe_groups([assignment_group_id(service_id)])[assignment_group_id(service_id)]
        assert group.protocol_type == PROTOCOL_TYPE
        assert len(group.members) == 2
        current = a.member.current
        assert current is not None
        assert current.owner_url("CTAS_C_3") in ("http://127.0.0.1:1", "http://127.0.0.1:2")

        # A new query: members notice their known set changed and rebalance.
        known.offset, known.ids = 4, [*known.ids, "CSAS_D_4"]
        a.member.poke()
        b.member.poke()
        wait_until(split_ok, "the new query placed")

        # b leaves (as on SIGTERM): a takes everything.
        b.member.stop()
        wait_until(lambda: a.owned() == sorted(known.ids), "a running every query")
    finally:
        a.member.stop()
        b.member.stop()
