"""Static membership (KIP-345) in the query-assignment group: a SQL node SIGKILLed and restarted
with the same identity takes its place (and its queries) back at once instead of waiting for its
old session to time out, and a clean stop (SIGTERM) still leaves the group so the others take
its queries at once.

Every member here has a 60 s session timeout while every wait is bounded at 30 s: a member that
had to wait for the coordinator to expire the old session (dynamic membership), or a survivor that
had to wait for it (a static member not leaving on SIGTERM), fails the wait. What is asserted is
the group's state, not time: the restarted member's first assignment is the generation it was
killed in (no rebalance was needed) and holds the share its previous incarnation had.

The members are the real ``QueryAssignment`` each in a process of its own
(tests/support/assignment_member.py), so no Spark is started; the last test runs real
``oncestream sql-server`` nodes (without queries, so still without Spark) for the node's identity
(its ``node.id`` in the state dir) and its LeaveGroup on SIGTERM.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oncestream.client import Admin
from oncestream.sql.server.assignment import assignment_group_id
from oncestream.sql.server.node_identity import NODE_ID_FILE
from tests.support.assignment_member import MemberProcess
from tests.support.brokers import BrokerProcess
from tests.support.groups import GROUP_BROKER_CONFIG
from tests.support.sql_servers import LAZY_SPARK, SqlServerProcess, wait_until

pytestmark = pytest.mark.chaos

SESSION_TIMEOUT_MS = 60_000
# Far below the session timeout: only a static takeover or a LeaveGroup gets there in time.
BOUND_S = 30.0
QUERIES = sorted(["CSAS_A_1", "CSAS_B_2", "CTAS_C_3", "CSAS_D_4"])


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(data_dir=tmp_path_factory.mktemp("static-broker") / "data", config=GROUP_BROKER_CONFIG)
    process.start()
    try:
        yield process
    finally:
        process.kill()


def _member(broker: BrokerProcess, service_id: str, name: str, port: int, tmp_path: Path) -> MemberProcess:
    return MemberProcess(bootstrap=broker.bootstrap, service_id=service_id, url=f"http://127.0.0.1:{port}",
                         queries=QUERIES, out=tmp_path / f"{name}.jsonl", instance_id=f"node-{name}",
                         session_timeout_ms=SESSION_TIMEOUT_MS).start()


def _settled(a: MemberProcess, b: MemberProcess) -> tuple[int, list[str], list[str]] | None:
    """(generation, a's share, b's share) once both hold a complete, disjoint split of one
    generation that each joined already running its share (so neither rejoins again)."""
    runs = a.of_this_run(), b.of_this_run()
    if any(len(run) < 2 or run[-1]["mine"] is None or run[-1]["mine"] != run[-2]["mine"] for run in runs):
        return None
    (la, lb) = (runs[0][-1], runs[1][-1])
    if la["generation"] != lb["generation"] or sorted(la["mine"] + lb["mine"]) != QUERIES or not la["mine"] \
            or not lb["mine"]:
        return None
    return la["generation"], la["mine"], lb["mine"]


def _describe(bootstrap: str, group_id: str) -> Any:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        return admin.describe_groups([group_id], timeout=30)[group_id]


def test_sigkilled_member_restarted_takes_its_share_back_in_the_same_generation(broker: BrokerProcess,
                                                                                 tmp_path: Path) -> None:
    service_id = f"static_{uuid.uuid4().hex[:6]}_"
    a = _member(broker, service_id, "a", 1, tmp_path)
    b = _member(broker, service_id, "b", 2, tmp_path)
    try:
        generation, a_share, b_share = wait_until(lambda: _settled(a, b), "both members settled", timeout_s=60)
        old_member_id = b.latest()["memberId"]  # type: ignore[index]
        b.kill()
        b.start()  # same instance id, a new process
        wait_until(lambda: b.latest(), "the restarted member's first assignment", timeout_s=BOUND_S)
        restarted = b.of_this_run()[0]  # its first (a second may have followed already)
        # KIP-345: the coordinator handed the new process its slot and the generation's assignment;
        # no rebalance, so nothing waited for the old session.
        assert restarted["generation"] == generation, (restarted, generation)
        assert restarted["mine"] == b_share, restarted
        assert restarted["memberId"] != old_member_id, restarted
        # The restarted member now runs its share, so its metadata changed and it rejoins: the next
        # generation keeps every query where it runs (sticky), and a never lost its share.
        wait_until(lambda: _settled(a, b), "both members settled again", timeout_s=BOUND_S)
        assert all(line["mine"] == a_share for line in a.of_this_run() if line["generation"] >= generation)
        assert b.latest()["mine"] == b_share  # type: ignore[index]
        group = _describe(broker.bootstrap, assignment_group_id(service_id))
        assert sorted(m.group_instance_id for m in group.members) == ["node-a", "node-b"]
    finally:
        a.kill()
        b.kill()


def test_sigterm_leaves_the_group_so_the_other_member_takes_over_at_once(broker: BrokerProcess,
                                                                          tmp_path: Path) -> None:
    service_id = f"static_{uuid.uuid4().hex[:6]}_"
    a = _member(broker, service_id, "a", 1, tmp_path)
    b = _member(broker, service_id, "b", 2, tmp_path)
    try:
        wait_until(lambda: _settled(a, b), "both members settled", timeout_s=60)
        assert b.terminate() == 0, b.log_tail()
        # A static member left with LeaveGroup naming its instance id: a rebalance at once.
        wait_until(lambda: (a.latest() or {}).get("mine") == QUERIES, "a running every query", timeout_s=BOUND_S)
        group = _describe(broker.bootstrap, assignment_group_id(service_id))
        assert [m.group_instance_id for m in group.members] == ["node-a"]
    finally:
        a.kill()
        b.kill()


def test_a_second_process_with_the_same_instance_id_fences_the_first(broker: BrokerProcess, tmp_path: Path) -> None:
    """Two live processes given one instance id (a copied state dir, or a zombie of a restarted
    node): the newcomer takes the slot (KIP-345), the old one is fenced (FENCED_INSTANCE_ID) and,
    as Kafka's clients treat that error, stops every query and stays out instead of fencing back."""
    service_id = f"static_{uuid.uuid4().hex[:6]}_"
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
    first = _member(broker, service_id, "x", 1, tmp_path / "first")
    try:
        wait_until(lambda: (first.latest() or {}).get("mine") == QUERIES, "the first process running every query",
                   timeout_s=60)
        second = _member(broker, service_id, "x", 2, tmp_path / "second")
        try:
            wait_until(lambda: (second.latest() or {}).get("mine") == QUERIES, "the second process holding the slot",
                       timeout_s=BOUND_S)
            # Its membership lost: the member records ``mine: null`` (every query stopped).
            wait_until(lambda: (first.latest() or {"mine": []})["mine"] is None, "the first process fenced",
                       timeout_s=BOUND_S)
            assert first.process is not None
            assert first.process.poll() is None
            group = _describe(broker.bootstrap, assignment_group_id(service_id))
            assert [(m.group_instance_id, m.member_id) for m in group.members] == \
                [("node-x", second.latest()["memberId"])]  # type: ignore[index]
            assert (second.latest() or {}).get("mine") == QUERIES
        finally:
            second.kill()
    finally:
        first.kill()


def test_sql_node_keeps_its_instance_id_across_a_crash_and_leaves_on_sigterm(broker: BrokerProcess,
                                                                              tmp_path: Path) -> None:
    service_id = f"static_node_{uuid.uuid4().hex[:6]}_"
    group_id = assignment_group_id(service_id)
    node = SqlServerProcess(bootstrap=broker.bootstrap, service_id=service_id, state_dir=tmp_path / "node",
                            config={**LAZY_SPARK, "ksql.query.assignment.session.timeout.ms": str(SESSION_TIMEOUT_MS)})
    node.start()
    try:
        instance_id = (tmp_path / "node" / NODE_ID_FILE).read_text().strip()

        def members() -> list[tuple[str, str | None]] | None:
            group = _describe(broker.bootstrap, group_id)
            return [(m.member_id, m.group_instance_id) for m in group.members] if group.state == "Stable" else None

        [(first_member, first_instance)] = wait_until(members, "the node in its group", timeout_s=60)
        assert first_instance == instance_id
        node.kill()
        node.start()  # same state dir: same instance id, a new URL
        assert (tmp_path / "node" / NODE_ID_FILE).read_text().strip() == instance_id

        def taken_over() -> bool:
            current = members()
            return current is not None and len(current) == 1 and current[0][1] == instance_id \
                and current[0][0] != first_member

        # One member, the new process, Stable: the old session did not have to expire.
        wait_until(taken_over, "the restarted node in its old slot", timeout_s=BOUND_S, nodes=[node])
        url = node.url.split("://", 1)[1]  # type: ignore[union-attr]
        wait_until(lambda: list(node.get("/clusterStatus").json()["clusterStatus"]) == [url],
                   "the node's new URL in the assignment", timeout_s=BOUND_S, nodes=[node])
        assert node.terminate() == 0, node.log_tail()
        # SIGTERM: LeaveGroup with the instance id; the group is empty at once.
        wait_until(lambda: not _describe(broker.bootstrap, group_id).members, "the group empty", timeout_s=BOUND_S)
    finally:
        node.kill()


@pytest.mark.slow
@pytest.mark.spark
def test_sigkilled_node_restarted_runs_its_persistent_query_again_at_once(tmp_path: Path) -> None:
    """The whole node (Spark started with it): a persistent query runs on the one node; SIGKILL,
    restart on the same state dir, and the query runs there again, from its checkpoint, with
    every input exactly once in its output. The node's session timeout is 120 s and the wait
    after the restarted node is ready 40 s: a dynamic member would wait for the coordinator's
    rebalance to give up on the dead member (its 60 s rebalance timeout at least)."""
    from confluent_kafka import Producer

    from tests.spark.spark_support import read_committed

    broker = BrokerProcess(data_dir=tmp_path / "broker", config={**GROUP_BROKER_CONFIG,
                                                                  "transaction.two.phase.commit.enable": "true"})
    broker.start()
    node = SqlServerProcess(bootstrap=broker.bootstrap, service_id=f"static_q_{uuid.uuid4().hex[:6]}_",
                            state_dir=tmp_path / "node",
                            config={"ksql.query.assignment.session.timeout.ms": "120000",
                                    "ksql.query.assignment.heartbeat.interval.ms": "500"})

    def produce(ids: range) -> None:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
        for i in ids:
            producer.produce("static_src", f'{{"V": "v{i}"}}'.encode(), i.to_bytes(4, "big"))
        assert producer.flush(60) == 0

    def output() -> list[str]:
        return sorted(json.loads(v)["V"] for _k, v in read_committed(broker.bootstrap, "static_dst") if v is not None)

    def running_here() -> bool:
        description = node.ok(f"EXPLAIN {query_id};")[0]["queryDescription"]
        host = node.url.split("://", 1)[1]  # type: ignore[union-attr]
        return description["ksqlHostQueryStatus"].get(host) == "RUNNING"

    try:
        node.start()
        node.ok("CREATE STREAM SRC (ID INT KEY, V STRING) WITH (KAFKA_TOPIC='static_src', PARTITIONS=1, "
                "VALUE_FORMAT='JSON');")
        status = node.ok("CREATE STREAM DST WITH (KAFKA_TOPIC='static_dst', PARTITIONS=1) AS SELECT ID, V FROM SRC "
                         "EMIT CHANGES;", {"ksql.streams.auto.offset.reset": "earliest"})[0]
        query_id = status["commandStatus"]["queryId"]
        produce(range(50))
        wait_until(lambda: len(output()) >= 50, "the first output", timeout_s=240, nodes=[node])
        node.kill()
        produce(range(50, 100))
        node.start()
        wait_until(running_here, "the query running on the restarted node", timeout_s=40, nodes=[node])
        wait_until(lambda: len(output()) >= 100, "all output", timeout_s=240, nodes=[node])
        assert output() == sorted(f"v{i}" for i in range(100))  # every input exactly once
    finally:
        node.kill()
        broker.kill()
