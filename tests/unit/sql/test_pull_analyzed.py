"""Pull queries end to end inside one node: ksqlDB text -> parser -> analyzer -> execute_pull
over a real store. Checks the column naming the analyzer gives (``KSQL_COL_n``, aliases), the
refusals worded as ksqlDB's PullQueryValidator words them, and ``PullQueryStream``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from oncestream.sql.engine.pull import PullQueryStream, execute_pull, source_of
from oncestream.sql.engine.serde import Window, layout_of
from oncestream.sql.errors import StatementError
from oncestream.sql.language import sql_ast
from oncestream.sql.language.analyzer import analyze_query
from oncestream.sql.language.catalog import Column, Format, Namespace, SourceInfo
from oncestream.sql.language.parser import parse
from oncestream.sql.language.sql_ast import SourceKind, WindowKind, WindowSpec
from oncestream.sql.language.types import BIGINT, DOUBLE, INTEGER, STRING
from oncestream.state import StateStore
from tests.support.narrow import of_type

USERS = SourceInfo(name="USERS", kind=SourceKind.TABLE, topic="users", key_format=Format.KAFKA, value_format=Format.JSON,
                   columns=(Column("ID", BIGINT, Namespace.KEY), Column("NAME", STRING), Column("SCORE", DOUBLE),
                            Column("AGE", INTEGER)), statement="CREATE TABLE USERS ...;")
COUNTS = SourceInfo(name="COUNTS", kind=SourceKind.TABLE, topic="counts", key_format=Format.KAFKA, value_format=Format.JSON,
                    columns=(Column("PAGE", STRING, Namespace.KEY), Column("HITS", BIGINT)),
                    statement="CREATE TABLE COUNTS ...;", window=WindowSpec(WindowKind.TUMBLING, size_ms=1000))


def _fill(store: StateStore, source: SourceInfo, rows: list[dict[str, Any]], windows: list[Window] | None = None) -> None:
    """Write ``rows`` as the changelog would hold them (serde-encoded) and commit."""
    layout = layout_of(source)
    for i, row in enumerate(rows):
        key = layout.encode_key(row, windows[i] if windows else None)
        value = layout.encode_value({c.name: row.get(c.name) for c in source.value_columns})
        assert key is not None
        assert value is not None
        store.put(key, value)
    store.commit({(source.topic, 0): len(rows)})


SOURCES = {USERS.name: USERS, COUNTS.name: COUNTS}


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("analyzed")
    users = StateStore(tmp / "users")
    _fill(users, USERS, [{"ID": i, "NAME": f"user{i}", "SCORE": i * 1.5, "AGE": 20 + i % 7} for i in range(0, 30)])
    counts = StateStore(tmp / "counts")
    rows = [{"PAGE": p, "HITS": s // 1000} for p in ("home", "about") for s in (0, 1000, 2000)]
    _fill(counts, COUNTS, rows, [Window(s, s + 1000) for _p in ("home", "about") for s in (0, 1000, 2000)])
    yield {"USERS": users, "COUNTS": counts}
    users.close()
    counts.close()


def _pull(stores, text: str) -> tuple[list[tuple[str, str]], list[list[Any]]]:
    statement = of_type(parse(text)[0], sql_ast.QueryStatement, text)
    analyzed = analyze_query(statement.query, SOURCES)
    source = source_of(analyzed)
    headers, rows = execute_pull(analyzed, source, stores[source.name].reader("read_committed"))
    return [(h.name, h.type) for h in headers], rows


def test_key_lookup_with_projection_names_as_ksqldb(stores):
    headers, rows = _pull(stores, "SELECT ID, UCASE(NAME) AS UPPER_NAME, SCORE * 2, LEN(NAME) FROM USERS WHERE ID = 3;")
    assert headers == [("ID", "BIGINT"), ("UPPER_NAME", "STRING"), ("KSQL_COL_0", "DOUBLE"), ("KSQL_COL_1", "INTEGER")]
    assert rows == [[3, "USER3", 9.0, 5]]


def test_in_range_and_limit(stores):
    _h, rows = _pull(stores, "SELECT ID FROM USERS WHERE ID IN (1, 2, 40);")
    assert rows == [[1], [2]]
    _h, rows = _pull(stores, "SELECT ID FROM USERS WHERE ID BETWEEN 10 AND 12;")
    assert rows == [[10], [11], [12]]
    _h, rows = _pull(stores, "SELECT ID FROM USERS WHERE ID > 5 AND AGE = 20 LIMIT 2;")
    assert rows == [[7], [14]]
    _h, rows = _pull(stores, "SELECT * FROM USERS LIMIT 4;")
    assert len(rows) == 4


def test_windowed_table_with_windowstart_bounds(stores):
    headers, rows = _pull(stores, "SELECT * FROM COUNTS WHERE PAGE = 'home' AND WINDOWSTART >= 1000;")
    assert headers == [("PAGE", "STRING"), ("WINDOWSTART", "BIGINT"), ("WINDOWEND", "BIGINT"), ("HITS", "BIGINT")]
    assert rows == [["home", 1000, 2000, 1], ["home", 2000, 3000, 2]]
    _h, rows = _pull(stores, "SELECT PAGE, HITS FROM COUNTS WHERE PAGE = 'about' AND WINDOWSTART = 0;")
    assert rows == [["about", 0]]


@pytest.mark.parametrize(("text", "message"), [
    ("SELECT * FROM USERS WHERE ID = 1 EMIT CHANGES;", "Pull queries don't support EMIT clauses."),
    ("SELECT AGE, COUNT(*) FROM USERS GROUP BY AGE;", "Pull queries don't support GROUP BY clauses."),
    ("SELECT ID FROM USERS WHERE ROWOFFSET > 1;", "Pull queries don't support the following columns in WHERE clauses"),
    ("SELECT ID, EXP(SCORE) FROM USERS WHERE ID = 1;", "Pull queries don't support the expression"),
])
def test_refused_with_ksqldb_words(stores, text, message):
    with pytest.raises(StatementError) as info:
        _pull(stores, text)
    assert message in info.value.message
    if "Pull queries don't support" in message and "expression" not in message:
        assert "Add EMIT CHANGES if you intended to issue a push query." in info.value.message


def test_uncommitted_store_writes_are_not_read(tmp_path):
    with StateStore(tmp_path / "s") as store:
        _fill(store, USERS, [{"ID": 1, "NAME": "a", "SCORE": 1.0, "AGE": 1}])
        store.put(layout_of(USERS).encode_key({"ID": 2}) or b"", b'{"NAME":"b","SCORE":2,"AGE":2}')
        analyzed = analyze_query(of_type(parse("SELECT ID FROM USERS;")[0], sql_ast.QueryStatement).query, SOURCES)
        _h, rows = execute_pull(analyzed, USERS, store.reader("read_committed"))
        assert rows == [[1]]
        store.commit({("users", 0): 2})
        _h, rows = execute_pull(analyzed, USERS, store.reader("read_committed"))
        assert rows == [[1], [2]]


def test_pull_query_stream_yields_the_rows():
    from oncestream.sql.engine.interface import ColumnHeader

    stream = PullQueryStream([ColumnHeader("ID", "BIGINT")], [[1], [2]], limit=2)

    async def collect() -> list[list[Any]]:
        return [row async for row in stream.rows()]

    assert asyncio.run(collect()) == [[1], [2]]
    assert stream.is_pull
    assert stream.limit_reached
    assert stream.query_id.startswith("query_")


def test_struct_fields_and_subscripts(tmp_path):
    from oncestream.sql.language.catalog import Column, Format, Namespace, SourceInfo
    from oncestream.sql.language.sql_ast import SourceKind
    from oncestream.sql.language.types import BIGINT, STRING, array_of, map_of, struct_of

    table = SourceInfo(name="NESTED", kind=SourceKind.TABLE, topic="nested", key_format=Format.KAFKA,
                       value_format=Format.JSON, statement="CREATE TABLE NESTED ...;",
                       columns=(Column("K", STRING, Namespace.KEY), Column("ST", struct_of(("F1", BIGINT), ("F2", STRING))),
                                Column("ARR", array_of(BIGINT)), Column("M", map_of(STRING, STRING))))
    with StateStore(tmp_path / "nested") as store:
        _fill(store, table, [{"K": "k", "ST": {"F1": 5, "F2": "x"}, "ARR": [1, 2, 3], "M": {"a": "b"}}])
        text = "SELECT ST->F1, ARR[-1] AS LAST, M['a'] AS A FROM NESTED WHERE K = 'k' AND ST->F2 = 'x';"
        analyzed = analyze_query(of_type(parse(text)[0], sql_ast.QueryStatement).query, {"NESTED": table})
        headers, rows = execute_pull(analyzed, table, store.reader("read_committed"))
    assert [(h.name, h.type) for h in headers] == [("F1", "BIGINT"), ("LAST", "BIGINT"), ("A", "STRING")]
    assert rows == [[5, 3, "b"]]


def test_pull_query_refuses_streams_and_tables_this_node_does_not_hold(tmp_path):
    """Checked before any store or broker is touched (the bootstrap address is never dialled)."""
    from oncestream.sql.engine.pull import TableMaterializations, TableNotMaterializedError, pull_query

    stream = SourceInfo(name="CLICKS", kind=SourceKind.STREAM, topic="clicks", key_format=USERS.key_format,
                        value_format=USERS.value_format, columns=USERS.columns, statement="CREATE STREAM CLICKS ...;")
    tables = TableMaterializations(tmp_path, "127.0.0.1:1")
    try:
        statement = of_type(parse("SELECT * FROM CLICKS WHERE ID = 1;")[0], sql_ast.QueryStatement)
        analyzed = analyze_query(statement.query, {"CLICKS": stream})
        with pytest.raises(StatementError, match="Pull queries on streams are not supported"):
            pull_query(tables, analyzed)
        analyzed = analyze_query(of_type(parse("SELECT * FROM USERS WHERE ID = 1;")[0], sql_ast.QueryStatement).query, SOURCES)
        with pytest.raises(TableNotMaterializedError, match="Table USERS is not materialized on this node"):
            pull_query(tables, analyzed)
    finally:
        tables.close()
