"""The analyzer on statements from the real parser, with examples in the shape of ksqlDB's docs
(pageviews / users, orders / shipments): naming, keys, windows, joins and error families."""

from __future__ import annotations

import pytest

from oncestream.sql.errors import StatementError
from oncestream.sql.language import sql_ast
from oncestream.sql.language import types as t
from oncestream.sql.language.analyzer import analyze_query, type_of
from oncestream.sql.language.parser import parse
from oncestream.sql.language.sql_ast import SourceKind, WindowKind
from oncestream.sql.server.metastore import Metastore
from tests.support.narrow import of_type

DDL = """
CREATE STREAM pageviews (viewtime BIGINT, userid VARCHAR KEY, pageid VARCHAR)
  WITH (kafka_topic='pageviews', value_format='json');
CREATE TABLE users (userid VARCHAR PRIMARY KEY, registertime BIGINT, gender VARCHAR, regionid VARCHAR,
                    interests ARRAY<STRING>, contactinfo MAP<STRING, STRING>, address STRUCT<city STRING, zip INT>)
  WITH (kafka_topic='users', value_format='json');
CREATE STREAM orders (id INT KEY, itemid STRING, amount DECIMAL(6, 2), ts BIGINT)
  WITH (kafka_topic='orders', value_format='json', timestamp='ts');
CREATE STREAM shipments (id INT KEY, orderid INT, warehouse STRING)
  WITH (kafka_topic='shipments', value_format='json');
"""


@pytest.fixture(scope="module")
def sources():
    ms = Metastore()
    for offset, s in enumerate(parse(DDL)):
        ms.apply(ms.validate(s, {}, {"pageviews": 2, "users": 2, "orders": 2, "shipments": 2}), offset)
    return ms.source_map()


def analyze(sources, sql: str, sink: str | None = None):
    (stmt,) = parse(sql)
    return analyze_query(of_type(stmt, sql_ast.QueryStatement).query, sources, sink=sink)


def schema(a) -> str:
    return a.schema_text()


def test_filter_project(sources) -> None:
    a = analyze(sources, "SELECT userid, pageid, viewtime + 1 AS next FROM pageviews WHERE pageid LIKE 'Page_%' "
                         "EMIT CHANGES;", sink="X")
    assert schema(a) == "`USERID` STRING KEY, `PAGEID` STRING, `NEXT` BIGINT"
    assert a.result_kind is SourceKind.STREAM
    assert a.where is not None


def test_struct_map_array_access_and_naming(sources) -> None:
    a = analyze(sources, "SELECT userid, address->city, address->zip AS z, interests[1], contactinfo['phone'], "
                         "ARRAY_LENGTH(interests) FROM users EMIT CHANGES;")
    assert [c.name for c in a.columns] == ["USERID", "CITY", "Z", "KSQL_COL_0", "KSQL_COL_1", "KSQL_COL_2"]
    assert [c.type for c in a.columns[1:]] == [t.STRING, t.INTEGER, t.STRING, t.STRING, t.INTEGER]
    assert a.result_kind is SourceKind.TABLE


def test_count_per_user_hopping_window(sources) -> None:
    a = analyze(sources, "SELECT userid, COUNT(*) AS views, WINDOWSTART AS ws FROM pageviews "
                         "WINDOW HOPPING (SIZE 30 SECONDS, ADVANCE BY 10 SECONDS) GROUP BY userid EMIT CHANGES;", sink="V")
    assert schema(a) == "`USERID` STRING KEY, `VIEWS` BIGINT, `WS` BIGINT"
    assert a.window is not None
    assert a.window.kind is WindowKind.HOPPING
    assert (a.window.size_ms, a.window.advance_ms) == (30_000, 10_000)


def test_session_window_and_emit_final(sources) -> None:
    a = analyze(sources, "SELECT userid, COUNT(*) AS n FROM pageviews WINDOW SESSION (60 SECONDS) GROUP BY userid "
                         "EMIT FINAL;", sink="S")
    assert a.window is not None
    assert a.window.kind is WindowKind.SESSION
    assert a.emit_final
    with pytest.raises(StatementError, match=r"EMIT FINAL is only supported for windowed aggregations\."):
        analyze(sources, "SELECT userid, COUNT(*) AS n FROM pageviews GROUP BY userid EMIT FINAL;", sink="S")


def test_every_aggregate_of_the_issue(sources) -> None:
    a = analyze(sources, "SELECT itemid, COUNT(*) AS c, SUM(amount) AS s, MIN(amount) AS mn, MAX(amount) AS mx, "
                         "AVG(amount) AS av, COUNT_DISTINCT(id) AS cd, COLLECT_LIST(id) AS cl, "
                         "LATEST_BY_OFFSET(amount) AS lo FROM orders GROUP BY itemid EMIT CHANGES;", sink="AGG")
    assert schema(a) == ("`ITEMID` STRING KEY, `C` BIGINT, `S` DECIMAL(6, 2), `MN` DECIMAL(6, 2), `MX` DECIMAL(6, 2), "
                         "`AV` DOUBLE, `CD` BIGINT, `CL` ARRAY<INTEGER>, `LO` DECIMAL(6, 2)")
    assert len(a.aggregates) == 8


def test_case_and_cast(sources) -> None:
    a = analyze(sources, "SELECT id, CASE WHEN amount > 100 THEN 'big' WHEN amount > 10 THEN 'medium' ELSE 'small' END "
                         "AS size, CAST(amount AS DOUBLE) AS d, CAST(id AS STRING) AS s FROM orders EMIT CHANGES;")
    assert [c.type for c in a.columns] == [t.INTEGER, t.STRING, t.DOUBLE, t.STRING]


def test_stream_table_join_docs_example(sources) -> None:
    a = analyze(sources, "SELECT pv.userid AS userid, pageid, regionid, gender FROM pageviews pv "
                         "LEFT JOIN users ON pv.userid = users.userid EMIT CHANGES;", sink="ENRICHED")
    assert schema(a) == "`USERID` STRING KEY, `PAGEID` STRING, `REGIONID` STRING, `GENDER` STRING"
    assert a.joins[0].right_alias == "USERS"
    assert a.result_kind is SourceKind.STREAM


def test_stream_stream_join_within(sources) -> None:
    a = analyze(sources, "SELECT o.id AS orderid, o.itemid, s.warehouse FROM orders o INNER JOIN shipments s "
                         "WITHIN 1 HOURS ON s.orderid = o.id EMIT CHANGES;", sink="SHIPPED")
    assert schema(a) == "`ORDERID` INTEGER KEY, `ITEMID` STRING, `WAREHOUSE` STRING"
    j = a.joins[0]
    assert j.join_type == "STREAM_STREAM"
    assert j.within_before_ms == 3_600_000
    assert j.left_key.sql() == '"O"."ID"'
    assert j.right_key.sql() == '"S"."ORDERID"'
    with pytest.raises(StatementError, match="Stream-Stream joins must have a WITHIN clause"):
        analyze(sources, "SELECT * FROM orders o JOIN shipments s ON s.orderid = o.id EMIT CHANGES;")


def test_partition_by_expression(sources) -> None:
    a = analyze(sources, "SELECT ucase(pageid) AS p, userid, viewtime FROM pageviews PARTITION BY ucase(pageid) "
                         "EMIT CHANGES;", sink="BYPAGE")
    assert schema(a) == "`P` STRING KEY, `USERID` STRING, `VIEWTIME` BIGINT"
    assert type_of(a.partition_by[0]) == t.STRING


def test_reserved_names(sources) -> None:
    with pytest.raises(StatementError, match=r"Reserved column name in select: `ROWTIME`\. Please remove or alias the column\."):
        analyze(sources, "SELECT userid, ROWTIME FROM pageviews EMIT CHANGES;", sink="X")
    a = analyze(sources, "SELECT userid, ROWTIME AS rt FROM pageviews EMIT CHANGES;", sink="X")
    assert schema(a) == "`USERID` STRING KEY, `RT` BIGINT"
    with pytest.raises(StatementError, match=r"`ROWTIME` is a reserved column name\. You cannot use it as an alias"):
        analyze(sources, "SELECT userid, viewtime AS rowtime FROM pageviews EMIT CHANGES;")


def test_pull_query_rules(sources) -> None:
    a = analyze(sources, "SELECT * FROM users WHERE userid = 'u1';")
    assert a.result_kind is SourceKind.TABLE
    assert not a.persistent
    with pytest.raises(StatementError, match=r"Pull queries don't support GROUP BY clauses\."):
        analyze(sources, "SELECT regionid, COUNT(*) FROM users GROUP BY regionid;")


def test_errors_through_the_parser(sources) -> None:
    with pytest.raises(StatementError, match=r"^NOPE does not exist\.$"):
        analyze(sources, "SELECT * FROM nope EMIT CHANGES;")
    with pytest.raises(StatementError, match=r"SELECT column 'NOPE' cannot be resolved\."):
        analyze(sources, "SELECT nope FROM users EMIT CHANGES;")
    with pytest.raises(StatementError, match=r"Cannot compare PAGEID \(STRING\) to 1 \(INTEGER\) with EQUAL\."):
        analyze(sources, "SELECT * FROM pageviews WHERE pageid = 1 EMIT CHANGES;")
    with pytest.raises(StatementError, match="Can't find any functions with the name 'NOPE'"):
        analyze(sources, "SELECT nope(pageid) FROM pageviews EMIT CHANGES;")
    with pytest.raises(StatementError, match="Lambda function argument can't be a column name: GENDER"):
        analyze(sources, "SELECT TRANSFORM(interests, gender => UCASE(gender)) FROM users EMIT CHANGES;")
