"""Issue 13's test: "Pull queries on two SQL-server nodes return the same rows, and keep answering
while a node is SIGKILLed and restarted".

Two real ``oncestream sql-server`` processes (one service id, their own state directories) share
a table created with ``CREATE SOURCE TABLE`` over a topic written transactionally by
confluent-kafka (with an aborted transaction). Both materialize it and answer pull queries
through ``/query-stream``; their answers are equal and hold the committed rows only. Node A is
SIGKILLed (with its whole session) while node B keeps being asked in a loop: every answer B gives
meanwhile is complete and correct. More rows are committed while A is down; A restarts on the
same state directory, resumes its store and answers the same rows as B again.

No Spark is started (CREATE SOURCE TABLE runs no persistent query; ``ksql.spark.start=lazy``).
"""

from __future__ import annotations

import json
import struct
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.clients import CLIENT_TIMEOUT_S, create_topic, unique_topic
from tests.support.cluster_kind import BrokerUnderTest
from tests.support.groups import GROUP_BROKER_CONFIG
from tests.support.sql_servers import LAZY_SPARK, SqlServerProcess, wait_until
from tests.support.txn import transactional_producer

pytestmark = [pytest.mark.interop, pytest.mark.chaos]

PARTITIONS = 2
NODE_CONFIG = {**LAZY_SPARK, "ksql.query.assignment.session.timeout.ms": "4000",
               "ksql.query.assignment.heartbeat.interval.ms": "500"}
SCAN = "SELECT * FROM BALANCES;"
LOOKUP = "SELECT ID, OWNER FROM BALANCES WHERE ID IN (1, 2, 3, 4, 5);"


class Changelog:
    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = transactional_producer(bootstrap, unique_topic("pull-2n"))
        self.producer.init_transactions(CLIENT_TIMEOUT_S)

    def txn(self, rows: list[tuple[int, str, int]], *, commit: bool) -> None:
        self.producer.begin_transaction()
        for key_id, owner, amount in rows:
            self.producer.produce(self.topic, json.dumps({"OWNER": owner, "AMOUNT": amount}).encode(),
                                  key=struct.pack(">q", key_id), partition=key_id % PARTITIONS)
        assert self.producer.flush(CLIENT_TIMEOUT_S) == 0
        if commit:
            self.producer.commit_transaction(CLIENT_TIMEOUT_S)
        else:
            self.producer.abort_transaction(CLIENT_TIMEOUT_S)


def _pull(node: SqlServerProcess, sql: str) -> list[list[Any]] | None:
    """The rows of a pull query through /query-stream, sorted; None if the node did not answer
    with a result (down, not ready, table not materialized yet)."""
    if node.url is None or not node.alive:
        return None
    try:
        response = httpx.post(f"{node.url}/query-stream", json={"sql": sql, "properties": {}},
                              headers={"Accept": "application/json"}, timeout=30)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    body = response.json()
    if not body or not isinstance(body[0], dict) or "columnNames" not in body[0]:
        return None
    return sorted(row for row in body[1:] if isinstance(row, list))


@pytest.fixture(scope="module")
def broker(module_our_broker_factory: Callable[..., BrokerUnderTest]) -> BrokerUnderTest:
    """The broker under test (our single broker or a cluster) with the group suites' config: the
    nodes' assignment group joins at once and takes their short sessions."""
    return module_our_broker_factory(GROUP_BROKER_CONFIG)


def test_two_nodes_answer_the_same_rows_and_survive_a_sigkill(broker: BrokerUnderTest, tmp_path: Path) -> None:
    topic = unique_topic("pull-balances")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    log = Changelog(broker.bootstrap, topic)
    log.txn([(1, "ann", 10), (2, "bob", 20), (3, "cy", 30)], commit=True)
    log.txn([(1, "ABORTED", -1), (4, "ABORTED", -1)], commit=False)
    expected = [[1, "ann", 10], [2, "bob", 20], [3, "cy", 30]]

    service_id = f"pull_{uuid.uuid4().hex[:6]}_"
    nodes = [SqlServerProcess(bootstrap=broker.bootstrap, service_id=service_id, state_dir=tmp_path / n,
                              config=NODE_CONFIG, name=n) for n in ("a", "b")]
    a, b = nodes
    try:
        for node in nodes:
            node.start()
        a.ok(f"CREATE SOURCE TABLE BALANCES (ID BIGINT PRIMARY KEY, OWNER STRING, AMOUNT BIGINT) "
             f"WITH (KAFKA_TOPIC='{topic}', KEY_FORMAT='KAFKA', VALUE_FORMAT='JSON');")
        for node in nodes:
            wait_until(lambda node=node: _pull(node, SCAN) == expected, f"{node.name} answering the committed rows")
        assert _pull(a, LOOKUP) == _pull(b, LOOKUP) == [[1, "ann"], [2, "bob"], [3, "cy"]]

        # B is asked in a loop while A is SIGKILLed, rows are committed, and A restarts.
        answers: list[list[list[Any]] | None] = []
        stop = threading.Event()

        def ask_b() -> None:
            while not stop.is_set():
                answers.append(_pull(b, LOOKUP))

        asker = threading.Thread(target=ask_b)
        asker.start()
        try:
            wait_until(lambda: len(answers) >= 3, "B answering before the kill")
            a.kill()
            before_commit = len(answers)
            log.txn([(4, "dee", 40), (5, "eve", 50), (2, "bob", 21)], commit=True)
            expected = [[1, "ann", 10], [2, "bob", 21], [3, "cy", 30], [4, "dee", 40], [5, "eve", 50]]
            wait_until(lambda: _pull(b, SCAN) == expected, "B showing the rows committed while A is down")
            a.start()
            wait_until(lambda: _pull(a, SCAN) == expected, "A answering again after its restart")
            after_restart = len(answers)
        finally:
            stop.set()
            asker.join()
        assert after_restart > before_commit >= 3
        # B answered every time, with committed rows only: what was there before, plus (a
        # changelog transaction spans partitions, each read on its own) some of the new ones.
        old = [[1, "ann"], [2, "bob"], [3, "cy"]]
        new = [[1, "ann"], [2, "bob"], [3, "cy"], [4, "dee"], [5, "eve"]]
        wrong = [x for x in answers if x is None or not all(r in x for r in old) or not all(r in new for r in x)]
        assert wrong == [], wrong[:3]
        assert answers[-1] == new
        assert _pull(a, LOOKUP) == _pull(b, LOOKUP) == new
        assert _pull(a, SCAN) == _pull(b, SCAN) == expected
        # DESCRIBE EXTENDED reports each node's materialization lag (caught up: 0).
        for node in nodes:
            description = node.ok("DESCRIBE BALANCES EXTENDED;")[0]["sourceDescription"]
            assert description["statistics"].startswith("materialization-lag: 0 records behind"), description
    finally:
        for node in nodes:
            node.kill()
