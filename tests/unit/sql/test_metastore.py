"""The sans-io metastore: ksqlDB's CREATE / DROP / INSERT INTO / TERMINATE rules, query ids from
command offsets, topic effects, and determinism (equal command sequences give equal metastores)."""

from __future__ import annotations

import dataclasses

import pytest
import sqlglot
from sqlglot import exp

from oncestream.sql.errors import StatementError
from oncestream.sql.language import sql_ast
from oncestream.sql.language import types as t
from oncestream.sql.language.catalog import Format, Namespace
from oncestream.sql.language.sql_ast import ColumnDef, Position, Query, SourceKind
from oncestream.sql.server.commands import decode, encode
from oncestream.sql.server.metastore import (
    ChangeRunState,
    CommandResult,
    CreateTopic,
    DeleteTopic,
    IllegalRunStateTransition,
    Metastore,
    QueryRunState,
    StartQuery,
    StopQuery,
)
from tests.support.narrow import of_type, present

P = Position(1, 1)


def _upper(tree: exp.Expr) -> exp.Expr:
    for node in tree.walk():
        if isinstance(node, exp.Identifier) and not node.quoted:
            node.set("this", node.this.upper())
    return tree


def select(sql: str, partition_by: tuple[str, ...] = ()) -> Query:
    sel = _upper(sqlglot.parse_one(sql))
    assert isinstance(sel, exp.Select)
    src = sel.args["from_"].this
    sel.set("from_", None)
    return Query(select=sel, source=src.name, source_alias=src.alias or None,
                 partition_by=tuple(of_type(_upper(sqlglot.parse_one(p)), exp.Expression, p) for p in partition_by),
                 emit=sql_ast.Emit.CHANGES)


def create_stream(name: str = "ORDERS", topic: str = "orders", **kw) -> sql_ast.CreateSource:
    cols = kw.pop("columns", (ColumnDef("ID", t.INTEGER, key=True), ColumnDef("USERID", t.STRING), ColumnDef("AMOUNT", t.DOUBLE)))
    props = {"KAFKA_TOPIC": topic, "VALUE_FORMAT": "JSON", **kw.pop("props", {})}
    return sql_ast.CreateSource(text=f"CREATE STREAM {name} (...) WITH (KAFKA_TOPIC='{topic}');", position=P,
                            kind=SourceKind.STREAM, name=name, columns=cols, properties=props, **kw)


def create_table(name: str = "USERS", topic: str = "users", **kw) -> sql_ast.CreateSource:
    cols = kw.pop("columns", (ColumnDef("USERID", t.STRING, key=True, primary_key=True), ColumnDef("NAME", t.STRING)))
    props = {"KAFKA_TOPIC": topic, "VALUE_FORMAT": "JSON", **kw.pop("props", {})}
    return sql_ast.CreateSource(text=f"CREATE TABLE {name} (...);", position=P, kind=SourceKind.TABLE, name=name,
                            columns=cols, properties=props, **kw)


def csas(name: str, sql: str, kind: SourceKind = SourceKind.STREAM, **kw) -> sql_ast.CreateAsSelect:
    pb = kw.pop("partition_by", ())
    return sql_ast.CreateAsSelect(text=f"CREATE {kind.value} {name} AS {sql};", position=P, kind=kind, name=name,
                              query=select(sql, pb), **kw)


TOPICS = {"orders": 3, "users": 2}


def run(ms: Metastore, stmt: sql_ast.Statement, offset: int, topics=TOPICS) -> list:
    cmd = ms.validate(stmt, {}, topics)
    return ms.apply(cmd, offset)


def result(effects: list) -> CommandResult:
    last = effects[-1]
    assert isinstance(last, CommandResult)
    return last


def test_create_stream_over_existing_topic_takes_its_partitions() -> None:
    ms = Metastore()
    effects = run(ms, create_stream(), 0)
    assert effects == [CommandResult("SUCCESS", "Stream created")]
    src = ms.source("ORDERS")
    assert src is not None
    assert src.partitions == 3
    assert src.key_format is Format.KAFKA
    assert [c.namespace for c in src.columns] == [Namespace.KEY, Namespace.VALUE, Namespace.VALUE]


def test_create_over_missing_topic_needs_partitions() -> None:
    ms = Metastore()
    with pytest.raises(StatementError, match=r"Topic 'nope' does not exist\. If you want to create a new topic for the "
                                             r"stream/table please re-run the statement providing the required 'PARTITIONS' "
                                             r"configuration in the WITH clause"):
        ms.validate(create_stream(topic="nope"), {}, TOPICS)
    effects = run(ms, create_stream(topic="nope", props={"PARTITIONS": 4}), 0)
    assert effects[0] == CreateTopic("nope", 4, 1, compacted=False)


def test_duplicate_name() -> None:
    ms = Metastore()
    run(ms, create_stream(), 0)
    with pytest.raises(StatementError, match="Cannot add stream 'ORDERS': A stream with the same name already exists"):
        ms.validate(create_stream(), {}, TOPICS)
    with pytest.raises(StatementError, match="Cannot add table 'ORDERS': A stream with the same name already exists"):
        ms.validate(create_table(name="ORDERS"), {}, TOPICS)
    # IF NOT EXISTS: accepted, nothing changes
    effects = run(ms, create_stream(if_not_exists=True), 1)
    assert effects == [CommandResult("SUCCESS", "Cannot add stream `ORDERS`: A stream with the same name already exists.")]


def test_or_replace_only_when_compatible() -> None:
    ms = Metastore()
    run(ms, create_stream(), 0)
    wider = create_stream(or_replace=True, columns=(ColumnDef("ID", t.INTEGER, key=True), ColumnDef("USERID", t.STRING),
                                                    ColumnDef("AMOUNT", t.DOUBLE), ColumnDef("NOTE", t.STRING)))
    run(ms, wider, 1)
    assert [c.name for c in present(ms.source("ORDERS"), "source ORDERS").columns][-1] == "NOTE"
    narrower = create_stream(or_replace=True, columns=(ColumnDef("ID", t.INTEGER, key=True), ColumnDef("USERID", t.STRING)))
    with pytest.raises(StatementError, match="Cannot upgrade data source"):
        ms.validate(narrower, {}, TOPICS)


def test_table_rules() -> None:
    ms = Metastore()
    with pytest.raises(StatementError, match=r"Tables require a PRIMARY KEY\. Please define the PRIMARY KEY\."):
        ms.validate(create_table(columns=(ColumnDef("NAME", t.STRING),)), {}, TOPICS)
    with pytest.raises(StatementError, match="is a 'PRIMARY KEY' column: please use 'KEY' for streams"):
        ms.validate(create_stream(columns=(ColumnDef("ID", t.INTEGER, key=True, primary_key=True),)), {}, TOPICS)
    with pytest.raises(StatementError, match="'ROWTIME' is a reserved column name"):
        ms.validate(create_stream(columns=(ColumnDef("ROWTIME", t.BIGINT),)), {}, TOPICS)


def test_csas_query_id_sink_topic_and_partitions() -> None:
    ms = Metastore()
    run(ms, create_stream(), 0)
    effects = run(ms, csas("BIG", "SELECT id, amount FROM orders WHERE amount > 10"), 7)
    assert effects[0] == CreateTopic("BIG", 3, 1, compacted=False)
    start = effects[1]
    assert isinstance(start, StartQuery)
    assert start.query.query_id == "CSAS_BIG_7"
    assert start.sink.topic == "BIG"
    assert start.sink.created_by == "CSAS_BIG_7"
    assert result(effects) == CommandResult("SUCCESS", "Created query with ID CSAS_BIG_7", "CSAS_BIG_7")
    assert present(ms.query("CSAS_BIG_7"), "query CSAS_BIG_7").sources == ("ORDERS",)


def test_ctas_is_compacted_and_kind_must_match() -> None:
    ms = Metastore()
    run(ms, create_stream(), 0)
    with pytest.raises(StatementError, match=r"Invalid result type\. Your SELECT query produces a TABLE\. Please use CREATE "
                                             "TABLE AS SELECT statement instead."):
        ms.validate(csas("C", "SELECT userid, COUNT(*) AS n FROM orders GROUP BY userid"), {}, TOPICS)
    effects = run(ms, csas("C", "SELECT userid, COUNT(*) AS n FROM orders GROUP BY userid", SourceKind.TABLE), 1)
    assert effects[0] == CreateTopic("C", 3, 1, compacted=True)
    assert result(effects).query_id == "CTAS_C_1"
    assert present(ms.source("C"), "source C").kind is SourceKind.TABLE


def test_drop_rules() -> None:
    ms = Metastore()
    run(ms, create_stream(), 0)
    run(ms, csas("BIG", "SELECT id, amount FROM orders"), 1)
    drop_orders = sql_ast.DropSource(text="DROP STREAM ORDERS;", position=P, kind=SourceKind.STREAM, name="ORDERS")
    # a source created from ORDERS blocks its DROP (ksqlDB's drop constraints), even once its query is terminated
    with pytest.raises(StatementError, match=r"Cannot drop ORDERS\.\nThe following streams and/or tables read from this "
                                             r"source: \[BIG\]\.\nYou need to drop them before dropping ORDERS\."):
        ms.validate(drop_orders, {}, TOPICS)
    ins = sql_ast.InsertInto(text="INSERT INTO BIG SELECT id, amount FROM orders;", position=P, target="BIG",
                         query=select("SELECT id, amount FROM orders"))
    run(ms, ins, 2)
    with pytest.raises(StatementError, match=r"Cannot drop ORDERS\.\nThe following queries read from this source: "
                                             r"\[INSERTQUERY_2\]\.\nThe following queries write into this source: \[\]\.\n"
                                             r"You need to terminate them before dropping ORDERS\."):
        ms.validate(drop_orders, {}, TOPICS)
    run(ms, sql_ast.Terminate(text="TERMINATE INSERTQUERY_2;", position=P, query_id="INSERTQUERY_2"), 3)
    with pytest.raises(StatementError, match=r"Stream NOPE does not exist\."):
        ms.validate(sql_ast.DropSource(text="", position=P, kind=SourceKind.STREAM, name="NOPE"), {}, TOPICS)
    with pytest.raises(StatementError, match="Incompatible data source type is stream, but statement was DROP table"):
        ms.validate(sql_ast.DropSource(text="", position=P, kind=SourceKind.TABLE, name="BIG"), {}, TOPICS)
    # dropping the sink of a CSAS stops its query
    effects = run(ms, sql_ast.DropSource(text="DROP STREAM BIG DELETE TOPIC;", position=P, kind=SourceKind.STREAM, name="BIG",
                                     delete_topic=True), 4)
    assert effects == [StopQuery("CSAS_BIG_1"), DeleteTopic("BIG"),
                       CommandResult("SUCCESS", "Source `BIG` (topic: BIG) was dropped.")]
    assert ms.queries() == []
    assert result(run(ms, drop_orders, 5)).status == "SUCCESS"
    if_exists = sql_ast.DropSource(text="", position=P, kind=SourceKind.STREAM, name="ORDERS", if_exists=True)
    assert run(ms, if_exists, 6) == [CommandResult("SUCCESS", "Source `ORDERS` does not exist.")]


PAUSED, RUNNING = QueryRunState.PAUSED, QueryRunState.RUNNING


def pause(query_id: str | None) -> sql_ast.PauseQuery:
    return sql_ast.PauseQuery(text=f"PAUSE {query_id or 'ALL'};", position=P, query_id=query_id)


def resume(query_id: str | None) -> sql_ast.ResumeQuery:
    return sql_ast.ResumeQuery(text=f"RESUME {query_id or 'ALL'};", position=P, query_id=query_id)


def test_pause_and_resume_one_query() -> None:
    """ksqlDB's PAUSE / RESUME: "Query paused." / "Query resumed.", the run state kept per query;
    pausing a paused query or resuming a running one succeeds with nothing to do."""
    ms = Metastore()
    run(ms, create_stream(), 0)
    run(ms, csas("BIG", "SELECT id, amount FROM orders"), 1)
    assert ms.run_state("CSAS_BIG_1") is QueryRunState.RUNNING
    assert run(ms, pause("CSAS_BIG_1"), 2) == [ChangeRunState("CSAS_BIG_1", PAUSED), CommandResult("SUCCESS", "Query paused.")]
    assert ms.run_state("CSAS_BIG_1") is QueryRunState.PAUSED
    assert run(ms, pause("CSAS_BIG_1"), 3) == [CommandResult("SUCCESS", "Query paused.")]
    assert run(ms, resume("CSAS_BIG_1"), 4) == [ChangeRunState("CSAS_BIG_1", RUNNING), CommandResult("SUCCESS", "Query resumed.")]
    assert ms.run_state("CSAS_BIG_1") is QueryRunState.RUNNING
    assert run(ms, resume("CSAS_BIG_1"), 5) == [CommandResult("SUCCESS", "Query resumed.")]


@pytest.mark.parametrize("stmt", [pause("CSAS_NOPE_1"), resume("CSAS_NOPE_1")])
def test_pause_and_resume_of_an_unknown_query_are_refused(stmt: sql_ast.Statement) -> None:
    """ksqlDB's ValidatedCommandFactory answers "Unknown queryId: <id>" for both."""
    ms = Metastore()
    with pytest.raises(StatementError, match=r"^Unknown queryId: CSAS_NOPE_1$"):
        ms.validate(stmt, {}, TOPICS)


def test_pause_all_and_resume_all() -> None:
    ms = Metastore()
    run(ms, create_stream(), 0)
    run(ms, csas("BIG", "SELECT id, amount FROM orders"), 1)
    run(ms, csas("SMALL", "SELECT id, userid FROM orders"), 2)
    run(ms, pause("CSAS_SMALL_2"), 3)
    assert run(ms, pause(None), 4) == [ChangeRunState("CSAS_BIG_1", PAUSED), CommandResult("SUCCESS", "Query paused.")]
    assert {q.query_id: ms.run_state(q.query_id) for q in ms.queries()} == {
        "CSAS_BIG_1": QueryRunState.PAUSED, "CSAS_SMALL_2": QueryRunState.PAUSED}
    assert run(ms, resume(None), 5) == [ChangeRunState("CSAS_BIG_1", RUNNING), ChangeRunState("CSAS_SMALL_2", RUNNING),
                                        CommandResult("SUCCESS", "Query resumed.")]
    assert ms.run_state("CSAS_SMALL_2") is QueryRunState.RUNNING


def test_a_paused_query_is_terminated_and_a_replaced_one_runs() -> None:
    """TERMINATE of a paused query stops it for good; CREATE OR REPLACE starts the new definition
    whatever the old one's state (ksqlDB starts the replacing query)."""
    ms = Metastore()
    run(ms, create_stream(), 0)
    run(ms, csas("BIG", "SELECT id, amount FROM orders"), 1)
    run(ms, csas("SMALL", "SELECT id, userid FROM orders"), 2)
    run(ms, pause(None), 3)
    effects = run(ms, sql_ast.Terminate(text="TERMINATE CSAS_BIG_1;", position=P, query_id="CSAS_BIG_1"), 4)
    assert effects == [StopQuery("CSAS_BIG_1"), CommandResult("SUCCESS", "Query terminated.")]
    assert ms.run_state("CSAS_BIG_1") is None
    replace_small = dataclasses.replace(csas("SMALL", "SELECT id, userid, amount FROM orders"), or_replace=True)
    assert result(run(ms, replace_small, 5)).query_id == "CSAS_SMALL_2"
    assert ms.run_state("CSAS_SMALL_2") is QueryRunState.RUNNING


def test_run_state_table_refuses_a_pause_of_a_query_it_does_not_hold() -> None:
    ms = Metastore()
    with pytest.raises(IllegalRunStateTransition):
        ms._set_run_state("CSAS_NOPE_1", QueryRunState.PAUSED)   # PAUSED only from RUNNING or PAUSED


def test_terminate() -> None:
    ms = Metastore()
    run(ms, create_stream(), 0)
    run(ms, csas("BIG", "SELECT id, amount FROM orders"), 1)
    with pytest.raises(StatementError, match="Unknown queryId: CSAS_NOPE_1"):
        ms.validate(sql_ast.Terminate(text="TERMINATE CSAS_NOPE_1;", position=P, query_id="CSAS_NOPE_1"), {}, TOPICS)
    effects = run(ms, sql_ast.Terminate(text="TERMINATE CSAS_BIG_1;", position=P, query_id="CSAS_BIG_1"), 2)
    assert effects == [StopQuery("CSAS_BIG_1"), CommandResult("SUCCESS", "Query terminated.")]
    assert present(ms.source("BIG"), "source BIG").created_by is None
    assert ms.queries() == []
    drop_big = sql_ast.DropSource(text="DROP STREAM BIG;", position=P, kind=SourceKind.STREAM, name="BIG")
    assert run(ms, drop_big, 3) == [CommandResult("SUCCESS", "Source `BIG` (topic: BIG) was dropped.")]


def test_insert_into() -> None:
    ms = Metastore()
    run(ms, create_stream(), 0)
    run(ms, create_stream(name="ORDERS2", topic="orders"), 1)
    run(ms, create_table(), 2)
    ins = sql_ast.InsertInto(text="INSERT INTO ORDERS2 SELECT * FROM ORDERS;", position=P, target="ORDERS2",
                         query=select("SELECT * FROM orders"))
    effects = run(ms, ins, 5)
    assert result(effects).query_id == "INSERTQUERY_5"
    bad = sql_ast.InsertInto(text="", position=P, target="USERS", query=select("SELECT * FROM orders"))
    with pytest.raises(StatementError, match=r"INSERT INTO can only be used to insert into a stream\. USERS is a table\."):
        ms.validate(bad, {}, TOPICS)
    mismatch = sql_ast.InsertInto(text="", position=P, target="ORDERS2", query=select("SELECT id, userid FROM orders"))
    with pytest.raises(StatementError, match=r"Incompatible schema between results and sink\.\nResult schema is `ID` INTEGER "
                                             "KEY, `USERID` STRING\nSink schema is `ID` INTEGER KEY, `USERID` STRING, `AMOUNT` "
                                             "DOUBLE"):
        ms.validate(mismatch, {}, TOPICS)
    drop = sql_ast.DropSource(text="", position=P, kind=SourceKind.STREAM, name="ORDERS2")
    with pytest.raises(StatementError, match=r"write into this source: \[INSERTQUERY_5\]"):
        ms.validate(drop, {}, TOPICS)


def test_apply_of_a_conflicting_command_is_an_error_result_not_an_exception() -> None:
    ms = Metastore()
    first, second = create_stream(), create_stream(columns=(ColumnDef("X", t.STRING),))
    c1, c2 = ms.validate(first, {}, TOPICS), ms.validate(second, {}, TOPICS)   # both valid against the same snapshot
    assert result(ms.apply(c1, 0)).status == "SUCCESS"
    r = result(ms.apply(c2, 1))
    assert r.status == "ERROR"
    assert "already exists" in r.message
    assert [c.name for c in present(ms.source("ORDERS"), "source ORDERS").columns] == ["ID", "USERID", "AMOUNT"]


def test_validate_never_mutates_and_snapshot_is_independent() -> None:
    ms = Metastore()
    ms.validate(create_stream(), {}, TOPICS)
    assert ms.sources() == []
    run(ms, create_stream(), 0)
    snap = ms.snapshot()
    run(ms, create_table(), 1)
    assert snap.source("USERS") is None
    assert ms.source("USERS") is not None


def test_same_commands_give_equal_metastores() -> None:
    stmts = [create_stream(), create_table(), csas("BIG", "SELECT id, amount FROM orders"),
             csas("C", "SELECT userid, COUNT(*) AS n FROM orders GROUP BY userid", SourceKind.TABLE),
             sql_ast.Terminate(text="TERMINATE CSAS_BIG_2;", position=P, query_id="CSAS_BIG_2")]
    a, b = Metastore(), Metastore()
    for i, s in enumerate(stmts):
        cmd = a.validate(s, {}, TOPICS)
        a.apply(cmd, i)
        key, value = encode(cmd)
        # b replays what went through the command topic (plan included), carrying the AST across
        decoded = dataclasses.replace(decode(key, value), statement_ast=s)
        b.apply(decoded, i)
    assert a == b
    assert a.describe_all() == b.describe_all()
    assert [q.query_id for q in a.queries()] == ["CTAS_C_3"]
    c = Metastore()
    assert c != a


def test_query_properties_come_from_the_command() -> None:
    ms = Metastore()
    run(ms, create_stream(), 0)
    cmd = ms.validate(csas("BIG", "SELECT id, amount FROM orders"), {"ksql.streams.auto.offset.reset": "earliest"}, TOPICS)
    effects = ms.apply(cmd, 1)
    start = next(e for e in effects if isinstance(e, StartQuery))
    assert start.properties == {"ksql.streams.auto.offset.reset": "earliest"}
    assert ms.query_properties("CSAS_BIG_1") == {"ksql.streams.auto.offset.reset": "earliest"}
    replay = Metastore()
    replay.apply(replay.validate(create_stream(), {}, TOPICS), 0)
    replay.apply(dataclasses.replace(decode(*encode(cmd)), statement_ast=cmd.statement_ast), 1)
    assert replay.query_properties("CSAS_BIG_1") == {"ksql.streams.auto.offset.reset": "earliest"}
    assert replay == ms
