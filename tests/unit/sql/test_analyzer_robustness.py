"""The analyzer answers every query with a result or a StatementError (HTTP 400), never another
exception: random expressions over a source with every kind of column."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from oncestream.sql.errors import StatementError
from oncestream.sql.language import sql_ast
from oncestream.sql.language.analyzer import analyze_query
from oncestream.sql.language.parser import parse
from oncestream.sql.server.metastore import Metastore

DDL = ("CREATE STREAM s (k STRING KEY, i INT, b BIGINT, d DOUBLE, m DECIMAL(6, 2), n STRING, f BOOLEAN, a ARRAY<INT>, "
       "mp MAP<STRING, INT>, st STRUCT<x INT, y STRING>, ts TIMESTAMP) WITH (kafka_topic='s', value_format='json');"
       "CREATE TABLE t (k STRING PRIMARY KEY, v INT) WITH (kafka_topic='t', value_format='json');")
MS = Metastore()
for _offset, _stmt in enumerate(parse(DDL)):
    MS.apply(MS.validate(_stmt, {}, {"s": 1, "t": 1}), _offset)

LEAVES = st.sampled_from(["i", "b", "d", "m", "n", "f", "a", "mp", "st", "ts", "k", "ROWTIME", "1", "2.5", "'x'", "TRUE",
                          "NULL", "st->x", "a[1]", "mp['q']", "WINDOWSTART", "nope"])
FUNCS = st.sampled_from(["UCASE", "ABS", "LEN", "COALESCE", "ROUND", "CONCAT", "ARRAY_LENGTH", "COUNT", "SUM", "MAX",
                         "LATEST_BY_OFFSET", "SUBSTRING", "IFNULL", "GREATEST", "CAST_INT", "NOPE_FN"])


def _combine(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    binary = st.tuples(children, st.sampled_from(["+", "-", "*", "/", "%", "=", "<>", "<", ">=", "AND", "OR"]), children)
    call = st.tuples(FUNCS, st.lists(children, min_size=0, max_size=3))

    def render_call(fc: tuple[str, list[str]]) -> str:
        name, args = fc
        if name == "CAST_INT":
            return f"CAST({args[0] if args else 'i'} AS INT)"
        return f"{name}({', '.join(args)})"

    return st.one_of(
        binary.map(lambda x: f"({x[0]} {x[1]} {x[2]})"),
        call.map(render_call),
        st.tuples(children, children, children).map(lambda x: f"CASE WHEN {x[0]} THEN {x[1]} ELSE {x[2]} END"),
        children.map(lambda c: f"NOT {c}"),
        st.tuples(children, children).map(lambda x: f"{x[0]} IN ({x[1]})"),
    )


EXPRESSIONS = st.recursive(LEAVES, _combine, max_leaves=6)


@settings(max_examples=300, deadline=None)
@given(EXPRESSIONS, EXPRESSIONS, st.booleans(), st.booleans())
def test_analysis_never_fails_with_anything_but_a_statement_error(select: str, where: str, group: bool, sink: bool) -> None:
    sql = f"SELECT k, {select} AS e FROM s WHERE ({where}) IS NOT NULL{' GROUP BY k' if group else ''} EMIT CHANGES;"
    try:
        (stmt,) = parse(sql)
    except StatementError:
        return   # not valid syntax: the parser's business
    assert isinstance(stmt, sql_ast.QueryStatement)
    try:
        analyzed = analyze_query(stmt.query, MS.source_map(), sink="OUT" if sink else None)
    except StatementError:
        return
    assert analyzed.columns
    assert all(c.type is not None for c in analyzed.columns)
