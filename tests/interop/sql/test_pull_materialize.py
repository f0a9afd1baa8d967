"""Materialized tables for pull queries against a real broker (issue 13 part 3).

A confluent-kafka transactional producer writes a table's changelog: committed transactions, an
ABORTED one (overwriting and deleting committed keys, adding a key) and an OPEN one. The node's
``TableMaterializations`` keeps the table's store from the topic read_committed; pull queries
through it never show a row of the aborted or open transaction; once the open one commits, its
rows appear. Lag (DESCRIBE EXTENDED) is the records between the store's last commit and the LSO.

Runs against our broker (a module-wide one of the kind under test: our single broker or a cluster,
tests/conftest.py's ``module_our_broker_factory``; tests use topics of their own): the test relies
on read_committed LSO behaviour.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlglot

from oncestream.sql.engine.pull import PullPlan, TableMaterializations, TableNotMaterializedError, run_plan, star_outputs
from oncestream.sql.engine.pull.materializations import directory_name
from oncestream.sql.engine.serde import layout_of
from oncestream.sql.language import sql_ast
from oncestream.sql.language.catalog import Column, Format, Namespace, SourceInfo
from oncestream.sql.language.sql_ast import SourceKind
from oncestream.sql.language.types import BIGINT, STRING
from tests.support.clients import CLIENT_TIMEOUT_S, create_topic, unique_topic
from tests.support.cluster_kind import BrokerUnderTest
from tests.support.txn import transactional_producer, wait_until

pytestmark = pytest.mark.interop

PARTITIONS = 2
WAIT_S = 60


@pytest.fixture(scope="module")
def broker(module_our_broker_factory: Callable[..., BrokerUnderTest]) -> BrokerUnderTest:
    return module_our_broker_factory()


def _table(topic: str) -> SourceInfo:
    return SourceInfo(name="BALANCES", kind=SourceKind.TABLE, topic=topic, key_format=Format.KAFKA,
                      value_format=Format.JSON,
                      columns=(Column("ID", BIGINT, Namespace.KEY), Column("OWNER", STRING), Column("AMOUNT", BIGINT)),
                      statement="CREATE SOURCE TABLE BALANCES (ID BIGINT PRIMARY KEY, OWNER STRING, AMOUNT BIGINT) "
                                "WITH (KAFKA_TOPIC='...', KEY_FORMAT='KAFKA', VALUE_FORMAT='JSON');",
                      partitions=PARTITIONS, read_only=True)


def _pull(mats: TableMaterializations, source: SourceInfo, where: str | None = None) -> list[list[Any]]:
    plan = PullPlan(tuple(star_outputs(source)), sqlglot.parse_one(where) if where else None)
    with mats.reader(source.name) as reader:
        _headers, rows = run_plan(plan, source, reader)
    return sorted(rows)


class Changelog:
    """The table's topic written by one transactional confluent-kafka producer."""

    def __init__(self, bootstrap: str, source: SourceInfo) -> None:
        self.source = source
        self.layout = layout_of(source)
        self.producer = transactional_producer(bootstrap, unique_topic("pull-txn"))
        self.producer.init_transactions(CLIENT_TIMEOUT_S)

    def txn(self, rows: list[tuple[int, str | None, int]], *, commit: bool | None) -> None:
        """``(id, owner or None for a delete, amount)``; partition = id % 2."""
        self.producer.begin_transaction()
        for key_id, owner, amount in rows:
            key = self.layout.encode_key({"ID": key_id})
            value = None if owner is None else json.dumps({"OWNER": owner, "AMOUNT": amount}).encode()
            self.producer.produce(self.source.topic, value, key=key, partition=key_id % PARTITIONS)
        assert self.producer.flush(CLIENT_TIMEOUT_S) == 0
        if commit is True:
            self.producer.commit_transaction(CLIENT_TIMEOUT_S)
        elif commit is False:
            self.producer.abort_transaction(CLIENT_TIMEOUT_S)


def _caught_up(mats: TableMaterializations, name: str) -> bool:
    lag = mats.lag(name)
    return len(lag) == PARTITIONS and all(v == 0 for v in lag.values())


def test_pull_queries_never_show_aborted_or_open_transactions(broker: BrokerUnderTest, tmp_path: Path):
    topic = unique_topic("pull-balances")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    source = _table(topic)
    log = Changelog(broker.bootstrap, source)
    log.txn([(1, "ann", 10), (2, "bob", 20), (3, "cy", 30), (4, "dee", 40)], commit=True)
    log.txn([(1, "ABORTED", -1), (2, None, 0), (5, "ABORTED", -1)], commit=False)
    log.txn([(3, "cy", 33)], commit=True)
    log.txn([(6, "OPEN", 60), (4, "OPEN", -4)], commit=None)   # left open

    committed = [[1, "ann", 10], [2, "bob", 20], [3, "cy", 33], [4, "dee", 40]]
    mats = TableMaterializations(tmp_path / "state", broker.bootstrap, {}, commit_interval_ms=100)
    try:
        assert mats.ensure(source) is True
        assert mats.ensure(source) is False   # idempotent
        wait_until(lambda: _caught_up(mats, "BALANCES"), WAIT_S, "the store at the LSO")
        assert _pull(mats, source) == committed
        for key_id in (5, 6):
            assert _pull(mats, source, f"ID = {key_id}") == []
        assert _pull(mats, source, "ID IN (1, 2, 4)") == [committed[0], committed[1], committed[3]]
        assert _pull(mats, source, "ID >= 2 AND ID < 4") == committed[1:3]
        assert mats.status("BALANCES").state == "RUNNING"

        # The open transaction commits: its rows appear.
        log.producer.commit_transaction(CLIENT_TIMEOUT_S)
        wait_until(lambda: _pull(mats, source, "ID = 6") != [], WAIT_S, "the committed open transaction")
        assert _pull(mats, source) == [[1, "ann", 10], [2, "bob", 20], [3, "cy", 33], [4, "OPEN", -4], [6, "OPEN", 60]]
    finally:
        mats.close()


def test_lag_counts_records_behind_the_stores_last_commit_and_restart_resumes(broker: BrokerUnderTest, tmp_path: Path):
    """The store commits only every commit_interval_ms: rows a materializer applied but did not
    commit are invisible to pull queries (read_committed) and count in the lag."""
    topic = unique_topic("pull-lag")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    source = _table(topic)
    log = Changelog(broker.bootstrap, source)
    log.txn([(1, "ann", 1), (2, "bob", 2)], commit=True)
    state = tmp_path / "state"

    mats = TableMaterializations(state, broker.bootstrap, {}, commit_interval_ms=100)
    mats.ensure(source)
    wait_until(lambda: _caught_up(mats, "BALANCES"), WAIT_S, "the store at the LSO")
    mats.close()

    # Ten more records on partition 0 (even ids) in one transaction: 10 records + 1 commit marker.
    log.txn([(2 * i, f"new{i}", i) for i in range(10, 20)], commit=True)
    slow = TableMaterializations(state, broker.bootstrap, {}, commit_interval_ms=3_600_000)
    try:
        slow.ensure(source)
        assert slow.wait_until_running("BALANCES", WAIT_S)
        assert slow.lag("BALANCES") == {0: 11, 1: 0}
        assert _pull(slow, source) == [[1, "ann", 1], [2, "bob", 2]]
        # A pull query's answer reports the lag of the very commit it read (issue 24 point 5).
        with slow.reader("BALANCES") as reader:
            assert slow.snapshot_lag("BALANCES", reader) == {0: 11, 1: 0}
    finally:
        slow.close()   # commits what it applied

    mats = TableMaterializations(state, broker.bootstrap, {}, commit_interval_ms=100)
    try:
        mats.ensure(source)
        assert mats.wait_until_running("BALANCES", WAIT_S)
        assert mats.lag("BALANCES") == {0: 0, 1: 0}   # resumed from the final commit of `slow`
        rows = _pull(mats, source)
        assert len(rows) == 12
        assert [20, "new10", 10] in rows
        assert mats.status("BALANCES").applied_records == 0   # nothing re-read
    finally:
        mats.close()


def test_drop_deletes_the_store_and_streams_are_not_materialized(broker: BrokerUnderTest, tmp_path: Path):
    topic = unique_topic("pull-drop")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    source = _table(topic)
    stream = SourceInfo(name="EVENTS", kind=SourceKind.STREAM, topic=topic, key_format=Format.KAFKA,
                        value_format=Format.JSON, columns=source.columns, statement="CREATE STREAM ...;")
    mats = TableMaterializations(tmp_path / "state", broker.bootstrap, {}, commit_interval_ms=100)
    try:
        assert mats.ensure(stream) is False
        mats.sync([source, stream])
        assert mats.names() == ["BALANCES"]
        store_dir = tmp_path / "state" / "tables" / directory_name("BALANCES")
        wait_until(lambda: mats.status("BALANCES").state == "RUNNING", WAIT_S, "materializer running")
        assert store_dir.is_dir()
        mats.sync([stream])   # the table was dropped from the metastore
        assert mats.names() == []
        assert not store_dir.exists()
        with pytest.raises(TableNotMaterializedError):
            mats.lag("BALANCES")
    finally:
        mats.close()


def test_node_hooks_answer_pull_queries_and_report_lag(broker: BrokerUnderTest, tmp_path: Path):
    """``PullQueries`` as a node uses it: follow the metastore, run a parsed and analyzed pull
    query to a ``QueryStream``, report lag for DESCRIBE EXTENDED and /clusterStatus."""
    import asyncio

    from oncestream.sql.engine.pull.node_hooks import PullQueries
    from oncestream.sql.language.analyzer import analyze_query
    from oncestream.sql.language.parser import parse

    topic = unique_topic("pull-hooks")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    source = _table(topic)
    Changelog(broker.bootstrap, source).txn([(1, "ann", 10), (2, "bob", 20), (3, "cy", 30)], commit=True)
    pull = PullQueries(tmp_path / "state", broker.bootstrap, {}, commit_interval_ms=100)
    try:
        pull.metastore_changed([source])
        wait_until(lambda: _caught_up(pull.tables, "BALANCES"), WAIT_S, "the store at the LSO")
        statement = parse("SELECT OWNER, AMOUNT * 2 AS DOUBLE_AMOUNT FROM BALANCES WHERE ID IN (1, 3);")[0]
        assert isinstance(statement, sql_ast.QueryStatement)
        assert PullQueries.is_pull(statement)
        analyzed = analyze_query(statement.query, {"BALANCES": source})

        async def run() -> tuple[Any, list[list[Any]]]:
            stream = await pull.start_query(analyzed)
            return stream, [row async for row in stream.rows()]

        stream, rows = asyncio.run(run())
        assert stream.is_pull
        assert [(c.name, c.type) for c in stream.columns] == [("OWNER", "STRING"),
                                                                                ("DOUBLE_AMOUNT", "BIGINT")]
        assert rows == [["ann", 20], ["cy", 60]]
        assert pull.statistics_text("BALANCES").startswith("materialization-lag: 0 records behind")
        lags = pull.store_lags()["BALANCES"]["lagByPartition"]
        assert sorted(lags) == ["0", "1"]
        assert all(v["offsetLag"] == 0 for v in lags.values())
        assert lags["1"]["endOffsetPosition"] == 3   # ids 1 and 3 + the commit marker
        assert pull.statistics_text("NOT_A_TABLE") == ""
    finally:
        pull.close()
