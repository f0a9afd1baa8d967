"""The analyzer against ksqlDB's rules: column resolution and naming, types, output keys, result
kinds, windows, joins, GROUP BY / HAVING, and ksqlDB's error messages.

Queries are built by hand as the parser's contract (``oncestream.sql.language.sql_ast``) describes them: a
sqlglot SELECT with unquoted names upper-cased, ksqlDB-only clauses lifted into ``ast.Query``."""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp

from oncestream.sql.errors import StatementError
from oncestream.sql.language import types as t
from oncestream.sql.language.analyzer import analyze_query, type_of
from oncestream.sql.language.catalog import Column, Format, Namespace, SourceInfo
from oncestream.sql.language.parser.expressions import normalise_names
from oncestream.sql.language.sql_ast import Emit, JoinSpec, Query, SourceKind, WindowKind, WindowSpec
from tests.support.narrow import of_type


def expr(text: str) -> exp.Expression:
    return of_type(normalise_names(sqlglot.parse_one(text)), exp.Expression, text)


def query(sql: str, *, joins: tuple[JoinSpec, ...] = (), window: WindowSpec | None = None,
          partition_by: tuple[str, ...] = (), emit: Emit = Emit.CHANGES) -> Query:
    select = normalise_names(sqlglot.parse_one(sql))
    assert isinstance(select, exp.Select)
    table = select.args["from_"].this if "from_" in select.args else select.args["from"].this
    source, alias = table.name, (table.alias or None)
    select.set("from_", None)
    select.set("from", None)
    return Query(select=select, source=source, source_alias=alias, joins=joins, window=window,
                 partition_by=tuple(expr(p) for p in partition_by), emit=emit)


def join(kind: str, source: str, alias: str | None, on: str, within_ms: int | None = None) -> JoinSpec:
    return JoinSpec(kind=kind, source=source, alias=alias, on=expr(on),
                    within_before_ms=within_ms, within_after_ms=within_ms)


def stream(name: str, *cols: Column, window: WindowSpec | None = None) -> SourceInfo:
    return SourceInfo(name=name, kind=SourceKind.STREAM, topic=name.lower(), key_format=Format.KAFKA,
                      value_format=Format.JSON, columns=cols, statement=f"CREATE STREAM {name} ...;", window=window)


def table(name: str, *cols: Column) -> SourceInfo:
    return SourceInfo(name=name, kind=SourceKind.TABLE, topic=name.lower(), key_format=Format.KAFKA,
                      value_format=Format.JSON, columns=cols, statement=f"CREATE TABLE {name} ...;")


def key(name: str, ty: t.SqlType) -> Column:
    return Column(name, ty, Namespace.KEY)


def val(name: str, ty: t.SqlType) -> Column:
    return Column(name, ty)


ADDRESS = t.struct_of(("STREET", t.STRING), ("NUMBER", t.INTEGER))
SOURCES = {
    "ORDERS": stream("ORDERS", key("ID", t.INTEGER), val("USERID", t.STRING), val("AMOUNT", t.DOUBLE),
                     val("QTY", t.INTEGER), val("ADDRESS", ADDRESS), val("TAGS", t.array_of(t.STRING)),
                     val("ATTRS", t.map_of(t.STRING, t.BIGINT)), val("PRICE", t.decimal(10, 2))),
    "USERS": table("USERS", key("USERID", t.STRING), val("NAME", t.STRING), val("AGE", t.INTEGER)),
    "CLICKS": stream("CLICKS", key("ID", t.INTEGER), val("USERID", t.STRING), val("URL", t.STRING)),
    "PROFILES": table("PROFILES", key("USERID", t.STRING), val("EMAIL", t.STRING)),
    "KEYLESS": stream("KEYLESS", val("A", t.STRING), val("KSQL_COL_0", t.INTEGER)),
}


def names(a) -> list[str]:
    return [c.name for c in a.columns]


def schema(a) -> str:
    return a.schema_text()


# -- projection, naming, types ------------------------------------------------------------------

def test_select_star_expands_key_then_value_columns_in_declared_order() -> None:
    a = analyze_query(query("SELECT * FROM orders"), SOURCES)
    assert names(a) == ["ID", "USERID", "AMOUNT", "QTY", "ADDRESS", "TAGS", "ATTRS", "PRICE"]
    assert a.columns[0].namespace is Namespace.KEY
    assert a.result_kind is SourceKind.STREAM
    assert a.window is None


def test_unnamed_expressions_get_ksql_col_names_in_select_order() -> None:
    a = analyze_query(query("SELECT id, amount * 2, ucase(userid), qty + 1 AS q2 FROM orders"), SOURCES)
    assert names(a) == ["ID", "KSQL_COL_0", "KSQL_COL_1", "Q2"]


def test_generated_names_skip_numbers_taken_by_source_columns() -> None:
    # KEYLESS has a column called KSQL_COL_0, so the first generated alias is KSQL_COL_1.
    a = analyze_query(query("SELECT a, ksql_col_0 + 1 FROM keyless"), SOURCES)
    assert names(a) == ["A", "KSQL_COL_1"]


def test_struct_field_access_is_named_after_the_field() -> None:
    q = query("SELECT id, x FROM orders")
    dot = exp.Dot(this=exp.column("ADDRESS"), expression=exp.to_identifier("STREET"))
    dot2 = exp.Dot(this=exp.column("ADDRESS"), expression=exp.to_identifier("STREET"))
    q.select.set("expressions", [exp.column("ID"), dot, dot2])
    a = analyze_query(q, SOURCES)
    assert names(a) == ["ID", "STREET", "STREET_1"]
    assert a.columns[1].type == t.STRING


def test_types_of_literals_arithmetic_and_functions() -> None:
    a = analyze_query(query(
        "SELECT id, qty + 1, qty + 10000000000, qty * amount, price + 1, 1.50, 'x', TRUE, qty / 2, "
        "CAST(qty AS VARCHAR), len(userid), qty > 1, tags[1], attrs['k'], "
        "CASE WHEN qty > 1 THEN 'a' ELSE 'b' END, coalesce(userid, 'n'), round(amount) FROM orders"), SOURCES)
    got = [c.type.ksql_name for c in a.columns[1:]]
    assert got == ["INTEGER", "BIGINT", "DOUBLE", "DECIMAL(13, 2)", "DECIMAL(3, 2)", "STRING", "BOOLEAN", "INTEGER",
                   "STRING", "INTEGER", "BOOLEAN", "STRING", "BIGINT", "STRING", "STRING", "BIGINT"]


def test_every_resolved_node_is_typed_and_columns_are_qualified() -> None:
    a = analyze_query(query("SELECT id, ucase(userid) AS u FROM orders o WHERE o.qty > 2"), SOURCES)
    u = a.expressions[1]
    assert isinstance(u, exp.Anonymous)
    assert u.this == "UCASE"
    col = u.expressions[0]
    assert isinstance(col, exp.Column)
    assert col.table == "O"
    assert col.name == "USERID"
    assert type_of(col) == t.STRING
    assert a.where is not None
    assert type_of(a.where) == t.BOOLEAN
    assert a.sources == {"O": SOURCES["ORDERS"]}
    assert a.from_alias == "O"


def test_pseudo_columns_resolve_with_their_types() -> None:
    a = analyze_query(query("SELECT id, rowtime, rowpartition, rowoffset FROM orders"), SOURCES)
    assert [c.type for c in a.columns[1:]] == [t.BIGINT, t.INTEGER, t.BIGINT]
    assert a.expressions[1].meta.get("pseudo") is True


def test_windowstart_only_on_windowed_results() -> None:
    with pytest.raises(StatementError, match=r"SELECT column 'WINDOWSTART' cannot be resolved\."):
        analyze_query(query("SELECT id, windowstart FROM orders"), SOURCES)


# -- errors --------------------------------------------------------------------------------------

def test_unknown_source() -> None:
    with pytest.raises(StatementError, match=r"^NOPE does not exist\.$"):
        analyze_query(query("SELECT * FROM nope"), SOURCES)


def test_unknown_column_names_the_clause() -> None:
    with pytest.raises(StatementError, match=r"SELECT column 'NOPE' cannot be resolved\."):
        analyze_query(query("SELECT nope FROM orders"), SOURCES)
    with pytest.raises(StatementError, match=r"WHERE column 'NOPE' cannot be resolved\."):
        analyze_query(query("SELECT id FROM orders WHERE nope = 1"), SOURCES)
    with pytest.raises(StatementError, match=r"'X' is not a valid stream/table name or alias\."):
        analyze_query(query("SELECT x.id FROM orders o"), SOURCES)


def test_comparison_type_mismatch() -> None:
    with pytest.raises(StatementError, match=r"Cannot compare USERID \(STRING\) to 10 \(INTEGER\) with EQUAL\."):
        analyze_query(query("SELECT id FROM orders WHERE userid = 10"), SOURCES)


def test_where_must_be_boolean() -> None:
    with pytest.raises(StatementError, match="Should evaluate to boolean"):
        analyze_query(query("SELECT id FROM orders WHERE qty + 1"), SOURCES)


def test_unknown_function_and_bad_arguments() -> None:
    with pytest.raises(StatementError, match="Can't find any functions with the name 'FOOBAR'"):
        analyze_query(query("SELECT foobar(id) FROM orders"), SOURCES)
    with pytest.raises(StatementError, match=r"Function 'ucase' does not accept parameters \(INTEGER\)\."):
        analyze_query(query("SELECT ucase(qty) FROM orders"), SOURCES)


def test_case_branches_must_agree() -> None:
    with pytest.raises(StatementError, match=r"Invalid Case expression\. Type for all 'THEN' clauses should be the same\."):
        analyze_query(query("SELECT CASE WHEN qty > 1 THEN 'a' ELSE 2 END FROM orders"), SOURCES)


def test_string_arithmetic_is_refused_except_concatenation() -> None:
    with pytest.raises(StatementError, match=r"Unsupported arithmetic types\. STRING INTEGER"):
        analyze_query(query("SELECT userid * 2 FROM orders"), SOURCES)
    a = analyze_query(query("SELECT userid + 'x' FROM orders"), SOURCES)
    assert a.columns[0].type == t.STRING


def test_null_needs_a_cast() -> None:
    with pytest.raises(StatementError) as refusal:
        analyze_query(query("SELECT id, NULL FROM orders"), SOURCES)
    # null.json "null as column": ksqlDB's SelectionUtil text, exactly
    assert refusal.value.message == ("Can't infer a type of null. Please explicitly cast it to a required type, "
                                     "e.g. CAST(null AS VARCHAR).")
    a = analyze_query(query("SELECT id, CAST(NULL AS INT) AS n FROM orders"), SOURCES)
    assert a.columns[1].type == t.INTEGER


# -- output keys ---------------------------------------------------------------------------------

def test_stream_keeps_source_key_in_persistent_query() -> None:
    a = analyze_query(query("SELECT userid, id, amount FROM orders"), SOURCES, sink="S2")
    assert schema(a) == "`ID` INTEGER KEY, `USERID` STRING, `AMOUNT` DOUBLE"


def test_persistent_query_must_select_the_key() -> None:
    with pytest.raises(StatementError, match=r"Key missing from projection \(ie, SELECT\)\.\nThe query used to build `S2` "
                                             r"must include the key column ID in its projection \(eg, SELECT ID\.\.\.\)\."):
        analyze_query(query("SELECT userid FROM orders"), SOURCES, sink="S2")


def test_push_query_needs_no_key_and_keeps_projection_order() -> None:
    a = analyze_query(query("SELECT userid, id FROM orders"), SOURCES)
    assert names(a) == ["USERID", "ID"]
    assert a.columns[1].is_key


def test_key_selected_twice_is_refused() -> None:
    with pytest.raises(StatementError,
                       match=r"The projection contains a key column \(`ID`\) more than once, aliased as: A and ID\."):
        analyze_query(query("SELECT id, id AS a, userid FROM orders"), SOURCES, sink="S2")


def test_partition_by_sets_the_key_named_by_the_projection() -> None:
    a = analyze_query(query("SELECT userid AS u, id, amount FROM orders", partition_by=("userid",)), SOURCES, sink="S2")
    assert schema(a) == "`U` STRING KEY, `ID` INTEGER, `AMOUNT` DOUBLE"
    with pytest.raises(StatementError, match=r"must include the partitioning expression ORDERS\.USERID in its projection"):
        analyze_query(query("SELECT id, amount FROM orders", partition_by=("userid",)), SOURCES, sink="S2")


def test_select_star_after_partition_by_lays_out_the_repartitioned_schema() -> None:
    # ksqlDB: the new key first, the value columns left, then the old key columns
    a = analyze_query(query("SELECT * FROM orders", partition_by=("userid",)), SOURCES, sink="S2")
    assert [c.name for c in a.columns][:3] == ["USERID", "AMOUNT", "QTY"]
    assert a.columns[0].is_key
    assert [c.name for c in a.columns][-1] == "ID"
    assert not a.columns[-1].is_key
    a = analyze_query(query("SELECT * FROM orders", partition_by=("abs(qty)",)), SOURCES, sink="S2")
    assert a.columns[0].name == "KSQL_COL_0"
    assert a.columns[0].is_key
    assert a.columns[-1].name == "ID"
    # a pseudo column keeps its name (partition-by.json "multiple columns including ROWTIME")
    a = analyze_query(query("SELECT * FROM orders", partition_by=("userid", "ROWTIME")), SOURCES, sink="S2")
    assert [(c.name, c.is_key) for c in a.columns][:3] == [("USERID", True), ("ROWTIME", True), ("AMOUNT", False)]


def test_map_keys_are_refused() -> None:
    with pytest.raises(StatementError, match="Map keys, including types that contain maps, are not supported"):
        analyze_query(query("SELECT attrs, id FROM orders", partition_by=("attrs",)), SOURCES, sink="S2")


def test_partition_by_null_gives_no_key() -> None:
    q = query("SELECT id, amount FROM orders")
    q = Query(select=q.select, source=q.source, source_alias=None, partition_by=(exp.Null(),), emit=Emit.CHANGES)
    a = analyze_query(q, SOURCES, sink="S2")
    assert a.key_columns == ()
    assert names(a) == ["ID", "AMOUNT"]


def test_partition_by_on_a_table_is_refused() -> None:
    with pytest.raises(StatementError, match=r"Cannot repartition a TABLE source\."):
        analyze_query(query("SELECT userid, name FROM users", partition_by=("name",)), SOURCES, sink="T2")


def test_group_by_keys_take_the_projection_alias() -> None:
    a = analyze_query(query("SELECT userid AS u, COUNT(*) AS n, SUM(qty), AVG(amount) FROM orders GROUP BY userid"),
                      SOURCES, sink="T")
    assert schema(a) == "`U` STRING KEY, `N` BIGINT, `KSQL_COL_0` INTEGER, `KSQL_COL_1` DOUBLE"
    assert a.result_kind is SourceKind.TABLE
    assert a.is_aggregate
    assert [str(x.this) for x in a.aggregates] == ["COUNT", "SUM", "AVG"]


def test_group_by_expression_key() -> None:
    a = analyze_query(query("SELECT ucase(userid), COUNT(*) FROM orders GROUP BY ucase(userid)"), SOURCES, sink="T")
    assert schema(a) == "`KSQL_COL_0` STRING KEY, `KSQL_COL_1` BIGINT"


def test_multiple_group_by_keys() -> None:
    a = analyze_query(query("SELECT qty, userid, COUNT(*) AS c FROM orders GROUP BY userid, qty"), SOURCES, sink="T")
    assert schema(a) == "`USERID` STRING KEY, `QTY` INTEGER KEY, `C` BIGINT"


def test_group_by_rules() -> None:
    with pytest.raises(StatementError, match="Non-aggregate SELECT expression\\(s\\) not part of GROUP BY: AMOUNT"):
        analyze_query(query("SELECT userid, amount, COUNT(*) FROM orders GROUP BY userid"), SOURCES, sink="T")
    with pytest.raises(StatementError, match=r"GROUP BY requires aggregate functions in either the SELECT or HAVING clause\."):
        analyze_query(query("SELECT userid FROM orders GROUP BY userid"), SOURCES, sink="T")
    with pytest.raises(StatementError, match="must include the grouping expression USERID in its projection"):
        analyze_query(query("SELECT COUNT(*) FROM orders GROUP BY userid"), SOURCES, sink="T")
    with pytest.raises(StatementError, match=r"Aggregate functions can not be nested: SUM\(COUNT\(\*\)\)"):
        analyze_query(query("SELECT userid, SUM(COUNT(*)) FROM orders GROUP BY userid"), SOURCES, sink="T")
    with pytest.raises(StatementError, match="Non-aggregate HAVING expression not part of GROUP BY"):
        analyze_query(query("SELECT userid, COUNT(*) FROM orders GROUP BY userid HAVING qty > 1"), SOURCES, sink="T")


def test_having_over_aggregates_and_expressions_over_keys() -> None:
    a = analyze_query(query("SELECT userid, lcase(userid) AS l, COUNT(*) AS c FROM orders GROUP BY userid "
                            "HAVING COUNT(*) > 2"), SOURCES, sink="T")
    assert a.having is not None
    assert len(a.aggregates) == 1


def test_aggregate_of_a_table_source_is_a_table() -> None:
    a = analyze_query(query("SELECT age, COUNT(*) AS c FROM users GROUP BY age"), SOURCES, sink="T")
    assert a.result_kind is SourceKind.TABLE
    assert schema(a) == "`AGE` INTEGER KEY, `C` BIGINT"


# -- windows -------------------------------------------------------------------------------------

def test_windowed_aggregation() -> None:
    w = WindowSpec(WindowKind.TUMBLING, size_ms=60_000)
    a = analyze_query(query("SELECT userid, COUNT(*) AS c, windowstart AS ws FROM orders GROUP BY userid",
                            window=w), SOURCES, sink="T")
    assert a.window == w
    assert a.windowed
    assert schema(a) == "`USERID` STRING KEY, `C` BIGINT, `WS` BIGINT"
    # un-aliased window bounds would give the sink a reserved column name
    with pytest.raises(StatementError, match=r"Reserved column name in select: `WINDOWEND`\. Please remove or alias"):
        analyze_query(query("SELECT userid, COUNT(*) AS c, windowend FROM orders GROUP BY userid", window=w), SOURCES, sink="T")
    push = analyze_query(query("SELECT userid, windowstart, COUNT(*) FROM orders GROUP BY userid", window=w), SOURCES)
    assert names(push) == ["USERID", "WINDOWSTART", "KSQL_COL_0"]


def test_window_needs_group_by() -> None:
    with pytest.raises(StatementError, match=r"WINDOW clause requires a GROUP BY clause\."):
        analyze_query(query("SELECT * FROM orders", window=WindowSpec(WindowKind.SESSION, size_ms=1000)), SOURCES)


def test_select_star_of_windowed_source_includes_window_bounds() -> None:
    w = WindowSpec(WindowKind.HOPPING, size_ms=10_000, advance_ms=5_000)
    src = {"W": SourceInfo(name="W", kind=SourceKind.TABLE, topic="w", key_format=Format.KAFKA, value_format=Format.JSON,
                           columns=(key("K", t.STRING), val("C", t.BIGINT)), statement="", window=w)}
    a = analyze_query(query("SELECT * FROM w"), src)
    assert names(a) == ["K", "WINDOWSTART", "WINDOWEND", "C"]
    assert a.window == w


# -- joins ---------------------------------------------------------------------------------------

def test_stream_table_join() -> None:
    q = query("SELECT o.userid, o.id AS oid, u.name FROM orders o",
              joins=(join("LEFT", "USERS", "U", "o.userid = u.userid"),))
    a = analyze_query(q, SOURCES, sink="ENRICHED")
    assert a.result_kind is SourceKind.STREAM
    assert schema(a) == "`O_USERID` STRING KEY, `OID` INTEGER, `NAME` STRING"
    assert a.joins[0].join_type == "STREAM_TABLE"


def test_join_select_star_prefixes_every_column() -> None:
    q = query("SELECT * FROM orders o", joins=(join("INNER", "USERS", "U", "o.userid = u.userid"),))
    a = analyze_query(q, SOURCES)
    assert names(a)[:3] == ["O_ID", "O_USERID", "O_AMOUNT"]
    assert "U_NAME" in names(a)


def test_stream_table_join_must_use_the_table_key() -> None:
    q = query("SELECT o.id, u.name FROM orders o", joins=(join("INNER", "USERS", "U", "o.userid = u.name"),))
    with pytest.raises(StatementError, match="stream-table joins require to join on the table's primary key"):
        analyze_query(q, SOURCES)


def test_stream_stream_join_needs_within() -> None:
    q = query("SELECT o.id, c.url FROM orders o", joins=(join("INNER", "CLICKS", "C", "o.id = c.id"),))
    with pytest.raises(StatementError, match="Stream-Stream joins must have a WITHIN clause specified"):
        analyze_query(q, SOURCES)
    q = query("SELECT o.id, c.url FROM orders o", joins=(join("INNER", "CLICKS", "C", "o.id = c.id", within_ms=60_000),))
    a = analyze_query(q, SOURCES, sink="J")
    assert schema(a) == "`O_ID` INTEGER KEY, `URL` STRING"
    assert a.result_kind is SourceKind.STREAM


def test_table_table_join_on_primary_keys() -> None:
    q = query("SELECT u.userid, u.name, p.email FROM users u", joins=(join("INNER", "PROFILES", "P", "u.userid = p.userid"),))
    a = analyze_query(q, SOURCES, sink="TT")
    assert a.result_kind is SourceKind.TABLE
    assert a.key_columns[0].name == "U_USERID"


def test_join_errors() -> None:
    q = query("SELECT * FROM orders o", joins=(join("INNER", "USERS", "U", "o.userid = u.userid AND o.id = u.age"),))
    with pytest.raises(StatementError, match="joins on multiple conditions are not yet supported"):
        analyze_query(q, SOURCES)
    q = query("SELECT * FROM orders o", joins=(join("INNER", "USERS", "U", "o.id = u.userid"),))
    with pytest.raises(StatementError, match=r"types don't match. Got O.ID\{INTEGER\} = U.USERID\{STRING\}"):
        analyze_query(q, SOURCES)
    q = query("SELECT * FROM users u", joins=(join("INNER", "ORDERS", "O", "u.userid = o.userid"),))
    with pytest.raises(StatementError, match="table-stream joins are not supported"):
        analyze_query(q, SOURCES)
    q = query("SELECT * FROM orders o", joins=(join("INNER", "USERS", "U", "userid = u.userid"),))
    with pytest.raises(StatementError, match=r"Column 'USERID' is ambiguous\. Could be O\.USERID or U\.USERID\."):
        analyze_query(q, SOURCES)


def test_full_outer_join_gets_a_synthetic_key() -> None:
    q = query("SELECT rowkey, o.amount, c.url FROM orders o",
              joins=(join("FULL", "CLICKS", "C", "o.id = c.id", within_ms=1000),))
    a = analyze_query(q, SOURCES, sink="J")
    assert schema(a) == "`ROWKEY` INTEGER KEY, `AMOUNT` DOUBLE, `URL` STRING"
    assert a.synthetic_key == "ROWKEY"
    q = query("SELECT o.amount, c.url FROM orders o", joins=(join("FULL", "CLICKS", "C", "o.id = c.id", within_ms=1000),))
    with pytest.raises(StatementError, match="ROWKEY was added as a synthetic key column"):
        analyze_query(q, SOURCES, sink="J")
