"""Pull queries over a real transactional store (issue 13 part 3): key lookups, IN, key ranges,
scans with LIMIT, windowed tables with WINDOWSTART bounds, projections, refusals.

Rows are written with ``oncestream.sql.engine.serde`` (the one serde) into a ``StateStore`` and read
through its ``read_committed`` reader, as the SQL server does. A spy around the real reader
records which store calls each query made, to check the access path (lookups do not scan).
"""

from __future__ import annotations

import decimal
from typing import Any

import pytest
import sqlglot
from sqlglot import exp

from oncestream.sql.engine.pull.execute import OutputColumn, PullPlan, run_plan, star_outputs
from oncestream.sql.engine.serde import Window, layout_of
from oncestream.sql.errors import StatementError
from oncestream.sql.language.catalog import WINDOWEND, WINDOWSTART, Column, Format, Namespace, SourceInfo
from oncestream.sql.language.sql_ast import SourceKind, WindowKind, WindowSpec
from oncestream.sql.language.types import BIGINT, BOOLEAN, DOUBLE, INTEGER, STRING, SqlType
from oncestream.state import StateStore


def _table(name: str, keys: list[tuple[str, SqlType]], values: list[tuple[str, SqlType]], *,
           key_format: Format = Format.KAFKA, window: WindowSpec | None = None,
           kind: SourceKind = SourceKind.TABLE) -> SourceInfo:
    columns = tuple(Column(n, t, Namespace.KEY) for n, t in keys) + tuple(Column(n, t) for n, t in values)
    return SourceInfo(name=name, kind=kind, topic=name.lower(), key_format=key_format, value_format=Format.JSON,
                      columns=columns, statement=f"CREATE TABLE {name} ...;", window=window)


USERS = _table("USERS", [("ID", BIGINT)], [("NAME", STRING), ("SCORE", DOUBLE), ("AGE", INTEGER)])
NAMES = _table("NAMES", [("NAME", STRING)], [("N", INTEGER)])
COUNTS = _table("COUNTS", [("PAGE", STRING)], [("HITS", BIGINT)],
                window=WindowSpec(WindowKind.TUMBLING, size_ms=1000))
SESSIONS = _table("SESSIONS", [("USERID", STRING)], [("CLICKS", BIGINT)],
                  window=WindowSpec(WindowKind.SESSION, size_ms=5000))
PAIRS = _table("PAIRS", [("A", STRING), ("B", INTEGER)], [("V", STRING)], key_format=Format.JSON)


class SpyReader:
    """The real read_committed reader, with a log of the calls made through it."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader
        self.calls: list[tuple[str, Any]] = []

    def get(self, key: bytes) -> bytes | None:
        self.calls.append(("get", key))
        return self.reader.get(key)

    def range(self, start: bytes | None = None, end: bytes | None = None):
        self.calls.append(("range", (start, end)))
        return self.reader.range(start, end)

    def prefix(self, prefix: bytes):
        self.calls.append(("prefix", prefix))
        return self.reader.prefix(prefix)

    @property
    def kinds(self) -> set[str]:
        return {kind for kind, _ in self.calls}


def _fill(store: StateStore, source: SourceInfo, rows: list[dict[str, Any]], windows: list[Window] | None = None) -> None:
    layout = layout_of(source)
    for i, row in enumerate(rows):
        key = layout.encode_key(row, windows[i] if windows else None)
        assert key is not None
        value = layout.encode_value({c.name: row.get(c.name) for c in source.value_columns})
        assert value is not None
        store.put(key, value)
    store.commit({(source.topic, 0): len(rows)})


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """One committed store per table, plus a pending (uncommitted) row in USERS (read-only for
    the tests, so shared by the module)."""
    tmp_path = tmp_path_factory.mktemp("stores")
    opened: dict[str, StateStore] = {}
    users = opened["USERS"] = StateStore(tmp_path / "users")
    _fill(users, USERS, [{"ID": i, "NAME": f"user{i}", "SCORE": i * 1.5, "AGE": 20 + i % 7} for i in range(-5, 40)])
    users.put(layout_of(USERS).encode_key({"ID": 1000}) or b"", b'{"NAME":"pending","SCORE":0,"AGE":1}')
    names = opened["NAMES"] = StateStore(tmp_path / "names")
    _fill(names, NAMES, [{"NAME": n, "N": i} for i, n in enumerate(["a", "ab", "abc", "b", "ba", "c", "é", "z"])])
    counts = opened["COUNTS"] = StateStore(tmp_path / "counts")
    rows, windows = [], []
    for page in ("home", "homepage", "about"):
        for start in (0, 1000, 2000, 3000):
            rows.append({"PAGE": page, "HITS": start // 1000 + len(page)})
            windows.append(Window(start, start + 1000))
    _fill(counts, COUNTS, rows, windows)
    sessions = opened["SESSIONS"] = StateStore(tmp_path / "sessions")
    _fill(sessions, SESSIONS, [{"USERID": "u1", "CLICKS": 3}, {"USERID": "u1", "CLICKS": 7}, {"USERID": "u2", "CLICKS": 1}],
          [Window(100, 900), Window(20_000, 26_000), Window(500, 500)])
    pairs = opened["PAIRS"] = StateStore(tmp_path / "pairs")
    _fill(pairs, PAIRS, [{"A": a, "B": b, "V": f"{a}{b}"} for a in ("x", "y") for b in (1, 2, 3)])
    yield opened
    for store in opened.values():
        store.close()


def _plan(sql: str, source: SourceInfo, types: dict[str, SqlType] | None = None) -> PullPlan:
    """A PullPlan from a standard-SQL SELECT (names resolved against ``source``): what the
    analyzer hands over, built here so these tests do not depend on the analyzer."""
    select = sqlglot.parse_one(sql)
    assert isinstance(select, exp.Select)
    outputs: list[OutputColumn] = []
    for item in select.expressions:
        if isinstance(item, exp.Star):
            outputs += star_outputs(source)
            continue
        name = item.alias_or_name.upper()
        node = item.this if isinstance(item, exp.Alias) else item
        column = source.column(node.name) if isinstance(node, exp.Column) else None
        sql_type = (types or {}).get(name) or (column.type if column else BIGINT)
        outputs.append(OutputColumn(name, sql_type, node))
    limit = select.args.get("limit")
    where = select.args.get("where")
    return PullPlan(tuple(outputs), where.this if where is not None else None,
                    int(limit.expression.this) if limit is not None else None)


def _run(stores, sql: str, source: SourceInfo, **kw) -> tuple[list[list[Any]], SpyReader]:
    spy = SpyReader(stores[source.name].reader("read_committed"))
    _headers, rows = run_plan(_plan(sql, source, **kw), source, spy)
    return rows, spy


def test_key_lookup_reads_one_key_and_projects_star_in_ksqldb_order(stores):
    spy = SpyReader(stores["USERS"].reader("read_committed"))
    headers, rows = run_plan(_plan("SELECT * FROM USERS WHERE ID = 7", USERS), USERS, spy)
    assert [(h.name, h.type) for h in headers] == [("ID", "BIGINT"), ("NAME", "STRING"), ("SCORE", "DOUBLE"),
                                                   ("AGE", "INTEGER")]
    assert rows == [[7, "user7", 10.5, 20]]
    assert spy.kinds == {"get"}
    assert len(spy.calls) == 1


def test_missing_key_and_uncommitted_key_give_no_row(stores):
    """read_committed: the store's pending write of key 1000 is not visible (KIP-892)."""
    assert stores["USERS"].get(layout_of(USERS).encode_key({"ID": 1000}) or b"") is not None  # the writer sees it
    for sql in ("SELECT * FROM USERS WHERE ID = 1000", "SELECT * FROM USERS WHERE ID = 99", "SELECT * FROM USERS"):
        rows, _ = _run(stores, sql, USERS)
        assert all(r[0] != 1000 for r in rows)
        if "WHERE" in sql:
            assert rows == []


def test_in_list_reads_each_key_and_skips_duplicates(stores):
    rows, spy = _run(stores, "SELECT ID, NAME FROM USERS WHERE ID IN (3, 1, 99, 3, -2)", USERS)
    assert rows == [[3, "user3"], [1, "user1"], [-2, "user-2"]]
    assert spy.kinds == {"get"}
    assert len(spy.calls) == 4


def test_key_equal_and_in_intersect(stores):
    rows, _ = _run(stores, "SELECT ID FROM USERS WHERE ID IN (1, 2, 3) AND ID = 2", USERS)
    assert rows == [[2]]
    rows, _ = _run(stores, "SELECT ID FROM USERS WHERE ID IN (1, 2) AND ID IN (3)", USERS)
    assert rows == []


@pytest.mark.parametrize(("where", "expected"), [
    ("ID > 30", list(range(31, 40))),
    ("ID >= 30 AND ID < 33", [30, 31, 32]),
    ("ID BETWEEN 5 AND 8", [5, 6, 7, 8]),
    ("3 < ID AND ID <= 5", [4, 5]),
    ("ID >= 0 AND ID < -1", []),
])
def test_bigint_key_range_with_a_non_negative_lower_bound_is_a_byte_range_scan(stores, where, expected):
    rows, spy = _run(stores, f"SELECT ID FROM USERS WHERE {where}", USERS)
    assert [r[0] for r in rows] == expected
    assert spy.kinds <= {"range", "get"}
    assert all(call[1] != (None, None) for call in spy.calls), "must not scan the whole store"


@pytest.mark.parametrize(("where", "expected"), [
    ("ID < 2", [-5, -4, -3, -2, -1, 0, 1]),
    ("ID > -3 AND ID < 1", [-2, -1, 0]),
    ("ID BETWEEN -1 AND 1", [-1, 0, 1]),
])
def test_bigint_key_range_reaching_negative_keys_scans_and_filters(stores, where, expected):
    """Two's complement big-endian bytes put negative keys after positive ones: no byte range."""
    rows, spy = _run(stores, f"SELECT ID FROM USERS WHERE {where}", USERS)
    assert sorted(r[0] for r in rows) == expected
    assert spy.calls == [("range", (None, None))]


@pytest.mark.parametrize(("where", "expected"), [
    ("NAME >= 'ab' AND NAME < 'b'", ["ab", "abc"]),
    ("NAME > 'ab' AND NAME <= 'b'", ["abc", "b"]),
    ("NAME BETWEEN 'b' AND 'c'", ["b", "ba", "c"]),
    ("NAME > 'c'", ["z", "é"]),
    ("NAME < 'ab'", ["a"]),
])
def test_string_key_range_is_a_byte_range_scan(stores, where, expected):
    rows, spy = _run(stores, f"SELECT NAME FROM NAMES WHERE {where}", NAMES)
    assert [r[0] for r in rows] == expected
    assert len(spy.calls) == 1
    assert spy.calls[0][0] == "range"
    assert spy.calls[0][1] != (None, None)


def test_full_scan_with_limit_stops_early(stores):
    rows, _ = _run(stores, "SELECT ID FROM USERS LIMIT 3", USERS)
    assert len(rows) == 3
    rows, _ = _run(stores, "SELECT ID FROM USERS WHERE AGE = 21 LIMIT 2", USERS)
    assert len(rows) == 2
    rows, _ = _run(stores, "SELECT ID FROM USERS LIMIT 0", USERS)
    assert rows == []
    all_rows, _ = _run(stores, "SELECT ID FROM USERS", USERS)
    assert sorted(r[0] for r in all_rows) == list(range(-5, 40))


def test_non_key_filter_and_projection_expressions(stores):
    rows, _ = _run(stores, "SELECT ID, UPPER(NAME) AS UP, SCORE * 2 AS DOUBLED, AGE / 2 AS HALF, "
                           "CASE WHEN AGE > 24 THEN 'old' ELSE 'young' END AS BAND, NAME || '!' AS BANG "
                           "FROM USERS WHERE ID >= 10 AND ID <= 12 AND NOT NAME LIKE '%11'",
                   USERS, types={"UP": STRING, "DOUBLED": DOUBLE, "HALF": INTEGER, "BAND": STRING, "BANG": STRING})
    assert rows == [[10, "USER10", 30.0, 11, "young", "user10!"], [12, "USER12", 36.0, 12, "old", "user12!"]]


def test_or_of_keys_is_evaluated_by_scan(stores):
    rows, spy = _run(stores, "SELECT ID FROM USERS WHERE ID = 1 OR ID = 38", USERS)
    assert sorted(r[0] for r in rows) == [1, 38]
    assert spy.calls == [("range", (None, None))]


def test_multi_column_json_key_lookup(stores):
    rows, spy = _run(stores, "SELECT A, B, V FROM PAIRS WHERE A = 'y' AND B IN (1, 3)", PAIRS)
    assert rows == [["y", 1, "y1"], ["y", 3, "y3"]]
    assert spy.kinds == {"get"}
    rows, spy = _run(stores, "SELECT V FROM PAIRS WHERE B = 2", PAIRS)
    assert sorted(r[0] for r in rows) == ["x2", "y2"]
    assert spy.calls == [("range", (None, None))]


def test_windowed_key_lookup_reads_the_key_prefix_and_returns_window_bounds(stores):
    headers, rows = run_plan(_plan("SELECT * FROM COUNTS WHERE PAGE = 'home'", COUNTS), COUNTS,
                             spy := SpyReader(stores["COUNTS"].reader("read_committed")))
    assert [h.name for h in headers] == ["PAGE", WINDOWSTART, WINDOWEND, "HITS"]
    # "homepage" shares the prefix "home": read, then filtered out.
    assert rows == [["home", s, s + 1000, s // 1000 + 4] for s in (0, 1000, 2000, 3000)]
    assert spy.kinds == {"prefix"}


@pytest.mark.parametrize(("where", "starts"), [
    ("WINDOWSTART = 2000", [2000]),
    ("WINDOWSTART IN (0, 3000, 5000)", [0, 3000]),
    ("WINDOWSTART >= 1000 AND WINDOWSTART < 3000", [1000, 2000]),
    ("WINDOWSTART BETWEEN 1000 AND 2000", [1000, 2000]),
    ("WINDOWSTART > 500 AND WINDOWEND <= 3000", [1000, 2000]),
    ("WINDOWEND = 1000", [0]),
])
def test_windowed_lookup_with_windowstart_bounds(stores, where, starts):
    rows, spy = _run(stores, f"SELECT PAGE, WINDOWSTART, HITS FROM COUNTS WHERE PAGE = 'homepage' AND {where}", COUNTS)
    assert rows == [["homepage", s, s // 1000 + 8] for s in starts]
    assert spy.kinds <= {"get", "prefix"}


def test_windowed_exact_window_is_a_point_read(stores):
    rows, spy = _run(stores, "SELECT HITS FROM COUNTS WHERE PAGE = 'about' AND WINDOWSTART = 1000", COUNTS)
    assert rows == [[6]]
    assert spy.kinds == {"get"}


def test_windowed_scan_without_key(stores):
    rows, spy = _run(stores, "SELECT PAGE, WINDOWSTART FROM COUNTS WHERE WINDOWSTART >= 3000", COUNTS)
    assert sorted(rows) == [["about", 3000], ["home", 3000], ["homepage", 3000]]
    assert spy.calls == [("range", (None, None))]


def test_session_windows_report_start_and_end_from_the_key(stores):
    rows, _ = _run(stores, "SELECT USERID, WINDOWSTART, WINDOWEND, CLICKS FROM SESSIONS WHERE USERID = 'u1'", SESSIONS)
    assert sorted(rows) == [["u1", 100, 900, 3], ["u1", 20_000, 26_000, 7]]
    rows, _ = _run(stores, "SELECT CLICKS FROM SESSIONS WHERE USERID = 'u1' AND WINDOWSTART > 1000", SESSIONS)
    assert rows == [[7]]


@pytest.mark.parametrize(("sql", "message"), [
    ("SELECT ROWPARTITION FROM USERS", "Pull queries don't support the following columns in SELECT clauses: ROWPARTITION"),
    ("SELECT ID FROM USERS WHERE ROWOFFSET = 1", "Pull queries don't support the following columns in WHERE clauses: ROWOFFSET"),
    ("SELECT ROWTIME FROM USERS", "ROWTIME"),
    ("SELECT ID FROM USERS WHERE WINDOWSTART = 1", "not windowed"),
    ("SELECT LOWER(NAME) FROM USERS WHERE ID IN (SELECT 1)", "Pull queries don't support the expression"),
    ("SELECT EXP(SCORE) FROM USERS WHERE ID = 1", "Pull queries don't support the expression 'EXP(SCORE)'"),
    ("SELECT ID FROM USERS WHERE SOUNDEX(NAME) = 'x'", "Pull queries don't support the expression"),
    ("SELECT ID FROM USERS LIMIT -1", "negative integers in the LIMIT clause"),
])
def test_unsupported_forms_are_refused_before_reading(stores, sql, message):
    spy = SpyReader(stores["USERS"].reader("read_committed"))
    if "LIMIT -1" in sql:
        plan = PullPlan(tuple(star_outputs(USERS)), None, -1)
    else:
        plan = _plan(sql, USERS)
    with pytest.raises(StatementError) as info:
        run_plan(plan, USERS, spy)
    assert message in info.value.message
    assert spy.calls == []


def test_streams_are_refused():
    stream = _table("CLICKS", [("ID", BIGINT)], [("V", STRING)], kind=SourceKind.STREAM)
    with pytest.raises(StatementError, match="streams"):
        run_plan(_plan("SELECT * FROM CLICKS", stream), stream, None)


def test_values_are_json_ready(tmp_path):
    from oncestream.sql.language.types import BYTES, DATE, TIMESTAMP
    from oncestream.sql.language.types import decimal as decimal_type

    table = _table("T", [("K", STRING)], [("B", BYTES), ("D", decimal_type(4, 2)), ("TS", TIMESTAMP),
                                          ("DT", DATE), ("OK", BOOLEAN)])
    with StateStore(tmp_path / "t") as store:
        _fill(store, table, [{"K": "k", "B": b"\x00\xff", "D": decimal.Decimal("12.50"), "TS": 1_600_000_000_123,
                              "DT": 19000, "OK": True}])
        _h, rows = run_plan(_plan("SELECT * FROM T WHERE K = 'k'", table), table, store.reader("read_committed"))
    assert rows == [["k", "AP8=", 12.5, "2020-09-13T12:26:40.123", "2022-01-08", True]]


def test_time_types_are_written_as_ksqldbs_rest_api_writes_them():
    from oncestream.sql.engine.pull.execute import json_ready
    from oncestream.sql.language import types as t

    assert json_ready(1526075913000, t.TIMESTAMP) == "2018-05-11T21:58:33.000"
    assert json_ready(-1, t.TIMESTAMP) == "1969-12-31T23:59:59.999"
    assert json_ready(10, t.DATE) == "1970-01-11"
    assert json_ready(-1, t.DATE) == "1969-12-31"
    assert json_ready(60_000, t.TIME) == "00:01:00"
