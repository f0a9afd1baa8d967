"""ksqlDB statement families (issue 12 point 3) through ``oncestream.sql.language.parser.parse``: each
statement's AST, ksqlDB's name normalisation, and the text/position contract of ``sql_ast.Statement``."""

from __future__ import annotations

import pytest
from sqlglot import exp

from oncestream.sql.errors import ParseError
from oncestream.sql.language import sql_ast
from oncestream.sql.language import types as t
from oncestream.sql.language.parser import parse


def one(text: str) -> sql_ast.Statement:
    statements = parse(text)
    assert len(statements) == 1
    return statements[0]


# -- CREATE STREAM / TABLE ------------------------------------------------------------------------

def test_create_stream_columns_and_with_properties() -> None:
    s = one("CREATE STREAM pageviews (viewtime BIGINT, userid VARCHAR KEY, pageid STRING) "
            "WITH (KAFKA_TOPIC='pageviews', VALUE_FORMAT='JSON', PARTITIONS=3, REPLICAS=1, TIMESTAMP='viewtime', "
            "TIMESTAMP_FORMAT='yyyy-MM-dd''T''HH:mm:ss');")
    assert isinstance(s, sql_ast.CreateSource)
    assert s.kind is sql_ast.SourceKind.STREAM
    assert s.name == "PAGEVIEWS"
    assert s.columns == (sql_ast.ColumnDef("VIEWTIME", t.BIGINT), sql_ast.ColumnDef("USERID", t.STRING, key=True),
                         sql_ast.ColumnDef("PAGEID", t.STRING))
    assert s.properties == {"KAFKA_TOPIC": "pageviews", "VALUE_FORMAT": "JSON", "PARTITIONS": 3, "REPLICAS": 1,
                            "TIMESTAMP": "viewtime", "TIMESTAMP_FORMAT": "yyyy-MM-dd'T'HH:mm:ss"}
    assert (s.if_not_exists, s.or_replace, s.read_only) == (False, False, False)


def test_create_table_primary_key_and_flags() -> None:
    s = one("create or replace source table if not exists users (id int primary key, name string) "
            "with (kafka_topic='users', key_format='KAFKA', value_format='DELIMITED', value_delimiter='|');")
    assert isinstance(s, sql_ast.CreateSource)
    assert s.kind is sql_ast.SourceKind.TABLE
    assert s.columns[0] == sql_ast.ColumnDef("ID", t.INTEGER, key=True, primary_key=True)
    assert (s.if_not_exists, s.or_replace, s.read_only) == (True, True, True)
    assert s.properties["KEY_FORMAT"] == "KAFKA"
    assert s.properties["VALUE_DELIMITER"] == "|"


def test_create_without_columns_and_with_window_properties() -> None:
    s = one("CREATE TABLE w WITH (KAFKA_TOPIC='w', FORMAT='JSON', WINDOW_TYPE='TUMBLING', WINDOW_SIZE='1 HOUR');")
    assert isinstance(s, sql_ast.CreateSource)
    assert s.columns == ()
    assert s.properties == {"KAFKA_TOPIC": "w", "FORMAT": "JSON", "WINDOW_TYPE": "TUMBLING", "WINDOW_SIZE": "1 HOUR"}


def test_quoted_property_keys_are_upper_cased_values_kept() -> None:
    s = one("CREATE STREAM s (a INT) WITH ('kafka_topic'='MixedCase', value_format='json');")
    assert isinstance(s, sql_ast.CreateSource)
    assert s.properties == {"KAFKA_TOPIC": "MixedCase", "VALUE_FORMAT": "json"}


@pytest.mark.parametrize(("written", "expected"), [
    ("INT", t.INTEGER), ("INTEGER", t.INTEGER), ("BIGINT", t.BIGINT), ("DOUBLE", t.DOUBLE),
    ("VARCHAR", t.STRING), ("STRING", t.STRING), ("BOOLEAN", t.BOOLEAN), ("BYTES", t.BYTES),
    ("TIMESTAMP", t.TIMESTAMP), ("DATE", t.DATE), ("TIME", t.TIME), ("DECIMAL(4, 2)", t.decimal(4, 2)),
    ("ARRAY<INT>", t.array_of(t.INTEGER)), ("MAP<STRING, BIGINT>", t.map_of(t.STRING, t.BIGINT)),
    ("MAP<STRING, ARRAY<MAP<STRING, INT>>>", t.map_of(t.STRING, t.array_of(t.map_of(t.STRING, t.INTEGER)))),
    ("STRUCT<a INT, `b` STRUCT<c ARRAY<DOUBLE>>>",
     t.struct_of(("A", t.INTEGER), ("b", t.struct_of(("C", t.array_of(t.DOUBLE)))))),
    ("STRUCT<>", t.struct_of()),
    ("varchar(10)", t.STRING),
    # ksqlDB's grammar gives every base type parameters, a number or STRING; its SqlTypeParser ignores them
    ("VARCHAR(STRING)", t.STRING), ("INT(3, STRING)", t.INTEGER),
])
def test_column_types(written: str, expected: t.SqlType) -> None:
    s = one(f"CREATE STREAM s (col {written}) WITH (kafka_topic='s', value_format='json');")
    assert isinstance(s, sql_ast.CreateSource)
    assert s.columns[0].type == expected


@pytest.mark.parametrize(("text", "message"), [
    # key-schemas.json: "(KEY)" after a type reads as its parameters
    ("CREATE STREAM INPUT (K STRING (KEY)) WITH (kafka_topic='input',value_format='JSON');",
     "line 1:32: Syntax Error\nExpecting {'STRING', INTEGER_VALUE}"),
    ("CREATE STREAM INPUT (K INT (KEY)) WITH (kafka_topic='input',value_format='JSON');",
     "line 1:29: Syntax Error\nExpecting {'STRING', INTEGER_VALUE}"),
    ("CREATE STREAM INPUT (K VARCHAR(10 STRING) KEY) WITH (kafka_topic='input',value_format='JSON');",
     "line 1:35: Syntax Error\nExpecting {',', ')'}"),
])
def test_type_parameters_other_than_numbers_and_string_are_syntax_errors(text: str, message: str) -> None:
    with pytest.raises(ParseError) as raised:
        parse(text)
    assert raised.value.message == message


# -- CREATE ... AS SELECT ---------------------------------------------------------------------------

def test_create_table_as_select_with_window_group_by_having() -> None:
    s = one("CREATE TABLE counts WITH (KAFKA_TOPIC='counts', PARTITIONS=2) AS "
            "SELECT userid, COUNT(*) AS n FROM pageviews WINDOW TUMBLING (SIZE 1 HOUR) "
            "WHERE pageid <> 'x' GROUP BY userid HAVING COUNT(*) > 1 EMIT CHANGES;")
    assert isinstance(s, sql_ast.CreateAsSelect)
    assert (s.kind, s.name) == (sql_ast.SourceKind.TABLE, "COUNTS")
    assert s.properties == {"KAFKA_TOPIC": "counts", "PARTITIONS": 2}
    q = s.query
    assert q.source == "PAGEVIEWS"
    assert q.window == sql_ast.WindowSpec(sql_ast.WindowKind.TUMBLING, size_ms=3_600_000)
    assert q.emit is sql_ast.Emit.CHANGES
    assert q.select.args["where"].this == exp.NEQ(this=exp.column("PAGEID"), expression=exp.Literal.string("x"))
    assert [g.sql() for g in q.select.args["group"].expressions] == ["USERID"]
    assert q.select.args["having"].this.sql() == "COUNT(*) > 1"
    assert [e.alias_or_name for e in q.select.expressions] == ["USERID", "N"]


def test_create_stream_as_select_partition_by() -> None:
    s = one("CREATE OR REPLACE STREAM IF NOT EXISTS rekeyed AS SELECT * FROM s PARTITION BY col2, col3->f EMIT CHANGES;")
    assert isinstance(s, sql_ast.CreateAsSelect)
    assert (s.or_replace, s.if_not_exists) == (True, True)
    assert [p.sql() for p in s.query.partition_by] == ["COL2", "COL3.F"]
    assert isinstance(s.query.partition_by[1], exp.Dot)


# -- SELECT -------------------------------------------------------------------------------------------

def test_push_query_with_limit() -> None:
    s = one("SELECT * FROM pageviews EMIT CHANGES LIMIT 3;")
    assert isinstance(s, sql_ast.QueryStatement)
    assert s.query.is_push
    assert s.query.limit == 3
    assert s.query.select.expressions == [exp.Star()]


def test_pull_query_has_no_emit() -> None:
    s = one("SELECT * FROM users WHERE id = 1;")
    assert isinstance(s, sql_ast.QueryStatement)
    assert s.query.emit is sql_ast.Emit.NONE
    assert not s.query.is_push


def test_emit_final() -> None:
    s = one("SELECT k, COUNT(*) FROM s WINDOW SESSION (5 MINUTES) GROUP BY k EMIT FINAL;")
    assert isinstance(s, sql_ast.QueryStatement)
    assert s.query.emit is sql_ast.Emit.FINAL


def test_select_items_expressions_aliases_and_pseudo_columns() -> None:
    s = one("SELECT s.id AS `Id`, a->b->c, arr[1], m['k'], CAST(x AS DECIMAL(4, 2)) x2, "
            "CASE WHEN x > 1 THEN 'big' ELSE 'small' END AS size_class, mask_left(name, 2), ROWTIME, ROWPARTITION, "
            "ROWOFFSET, WINDOWSTART, WINDOWEND, s.* FROM src s EMIT CHANGES;")
    assert isinstance(s, sql_ast.QueryStatement)
    items = s.query.select.expressions
    assert items[0] == exp.Alias(this=exp.column("ID", table="S"), alias=exp.to_identifier("Id", quoted=True))
    assert items[1] == exp.Dot(this=exp.Dot(this=exp.column("A"), expression=exp.to_identifier("B")),
                               expression=exp.to_identifier("C"))
    assert isinstance(items[2], exp.Bracket)
    assert items[2].expressions == [exp.Literal.number(1)]
    assert isinstance(items[3], exp.Bracket)
    assert items[3].expressions == [exp.Literal.string("k")]
    cast = items[4].this
    assert isinstance(cast, exp.Cast)
    assert cast.to.sql() == "DECIMAL(4, 2)"
    assert items[4].alias == "X2"
    assert isinstance(items[5].this, exp.Case)
    assert items[5].alias == "SIZE_CLASS"
    assert isinstance(items[6], exp.Anonymous)
    assert items[6].this == "MASK_LEFT"
    assert [i.name for i in items[7:12]] == ["ROWTIME", "ROWPARTITION", "ROWOFFSET", "WINDOWSTART", "WINDOWEND"]
    assert items[12] == exp.Column(this=exp.Star(), table=exp.to_identifier("S"))
    assert (s.query.source, s.query.source_alias) == ("SRC", "S")


def test_back_quoted_names_keep_case_everywhere() -> None:
    s = one("SELECT `MixedCol`, lower_col FROM `MixedSrc` `m` EMIT CHANGES;")
    assert isinstance(s, sql_ast.QueryStatement)
    assert [e.name for e in s.query.select.expressions] == ["MixedCol", "LOWER_COL"]
    assert (s.query.source, s.query.source_alias) == ("MixedSrc", "m")


def test_where_operators() -> None:
    s = one("SELECT * FROM s WHERE a IS NOT NULL AND b BETWEEN 1 AND 5 AND c IN (1, 2) AND d LIKE 'x%' "
            "OR NOT e AND f || 'x' = 'yx' EMIT CHANGES;")
    assert isinstance(s, sql_ast.QueryStatement)
    where = s.query.select.args["where"].this
    assert isinstance(where, exp.Or)
    assert where.find(exp.Between) is not None
    assert where.find(exp.In) is not None
    assert where.find(exp.Like) is not None
    assert where.find(exp.DPipe) is not None


def test_lambdas_use_fat_arrow() -> None:
    s = one("SELECT TRANSFORM(arr, x => x + 1), REDUCE(arr, 0, (acc, x) => acc + x) FROM s EMIT CHANGES;")
    assert isinstance(s, sql_ast.QueryStatement)
    lambdas = list(s.query.select.find_all(exp.Lambda))
    assert [[i.name for i in lam.expressions] for lam in lambdas] == [["X"], ["ACC", "X"]]


def test_group_by_in_parentheses() -> None:
    s = one("SELECT a, b, COUNT(*) FROM s GROUP BY (a, b) EMIT CHANGES;")
    assert isinstance(s, sql_ast.QueryStatement)
    assert [g.name for g in s.query.select.args["group"].expressions] == ["A", "B"]


# -- windows -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("unit", "ms"), [
    ("MILLISECOND", 1), ("MILLISECONDS", 1), ("SECOND", 1000), ("SECONDS", 1000), ("MINUTE", 60_000),
    ("MINUTES", 60_000), ("HOUR", 3_600_000), ("HOURS", 3_600_000), ("DAY", 86_400_000), ("days", 86_400_000),
])
def test_window_units(unit: str, ms: int) -> None:
    s = one(f"SELECT k, COUNT(*) FROM s WINDOW TUMBLING (SIZE 2 {unit}) GROUP BY k EMIT CHANGES;")
    assert isinstance(s, sql_ast.QueryStatement)
    assert s.query.window == sql_ast.WindowSpec(sql_ast.WindowKind.TUMBLING, size_ms=2 * ms)


@pytest.mark.parametrize(("clause", "spec"), [
    ("TUMBLING (SIZE 1 MINUTE, RETENTION 2 DAYS, GRACE PERIOD 30 SECONDS)",
     sql_ast.WindowSpec(sql_ast.WindowKind.TUMBLING, 60_000, retention_ms=2 * 86_400_000, grace_ms=30_000)),
    ("TUMBLING (SIZE 1 MINUTE, GRACE PERIOD 0 SECONDS)",
     sql_ast.WindowSpec(sql_ast.WindowKind.TUMBLING, 60_000, grace_ms=0)),
    ("HOPPING (SIZE 10 SECONDS, ADVANCE BY 5 SECONDS)",
     sql_ast.WindowSpec(sql_ast.WindowKind.HOPPING, 10_000, advance_ms=5_000)),
    ("HOPPING (SIZE 1 HOUR, ADVANCE BY 10 MINUTES, RETENTION 1 DAY, GRACE PERIOD 1 MINUTE)",
     sql_ast.WindowSpec(sql_ast.WindowKind.HOPPING, 3_600_000, advance_ms=600_000, retention_ms=86_400_000, grace_ms=60_000)),
    ("SESSION (60 SECONDS)", sql_ast.WindowSpec(sql_ast.WindowKind.SESSION, 60_000)),
    ("SESSION (1 HOUR, RETENTION 2 HOURS, GRACE PERIOD 5 MINUTES)",
     sql_ast.WindowSpec(sql_ast.WindowKind.SESSION, 3_600_000, retention_ms=7_200_000, grace_ms=300_000)),
    ("w1 TUMBLING (SIZE 1 SECOND)", sql_ast.WindowSpec(sql_ast.WindowKind.TUMBLING, 1000)),
])
def test_window_specs(clause: str, spec: sql_ast.WindowSpec) -> None:
    s = one(f"SELECT k, COUNT(*) FROM s WINDOW {clause} GROUP BY k EMIT CHANGES;")
    assert isinstance(s, sql_ast.QueryStatement)
    assert s.query.window == spec


# -- joins ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("written", "kind"), [
    ("JOIN", "INNER"), ("INNER JOIN", "INNER"), ("LEFT JOIN", "LEFT"), ("LEFT OUTER JOIN", "LEFT"),
    ("RIGHT JOIN", "RIGHT"), ("RIGHT OUTER JOIN", "RIGHT"), ("FULL JOIN", "FULL"), ("FULL OUTER JOIN", "FULL"),
])
def test_join_kinds(written: str, kind: str) -> None:
    s = one(f"SELECT * FROM a {written} b ON a.id = b.id EMIT CHANGES;")
    assert isinstance(s, sql_ast.QueryStatement)
    (join,) = s.query.joins
    assert (join.kind, join.source, join.alias) == (kind, "B", None)
    assert join.on == exp.EQ(this=exp.column("ID", table="A"), expression=exp.column("ID", table="B"))
    assert s.query.select.args.get("joins") is None


@pytest.mark.parametrize(("within", "before", "after", "grace"), [
    ("WITHIN 1 HOUR", 3_600_000, 3_600_000, None),
    ("WITHIN (10 SECONDS, 1 MINUTE)", 10_000, 60_000, None),
    ("WITHIN 5 MINUTES GRACE PERIOD 1 MINUTE", 300_000, 300_000, 60_000),
    ("WITHIN (1 SECOND, 2 SECONDS) GRACE PERIOD 3 SECONDS", 1000, 2000, 3000),
])
def test_join_within(within: str, before: int, after: int, grace: int | None) -> None:
    s = one(f"SELECT * FROM o AS x LEFT JOIN shipments y {within} ON x.id = y.order_id EMIT CHANGES;")
    assert isinstance(s, sql_ast.QueryStatement)
    (join,) = s.query.joins
    assert (join.within_before_ms, join.within_after_ms, join.within_grace_ms) == (before, after, grace)
    assert (s.query.source_alias, join.alias) == ("X", "Y")


def test_multi_way_join_keeps_order() -> None:
    s = one("SELECT * FROM a JOIN b WITHIN 1 HOUR ON a.k = b.k LEFT JOIN c ON a.k = c.k EMIT CHANGES;")
    assert isinstance(s, sql_ast.QueryStatement)
    assert [(j.kind, j.source) for j in s.query.joins] == [("INNER", "B"), ("LEFT", "C")]
    assert s.query.joins[1].within_before_ms is None


# -- INSERT ----------------------------------------------------------------------------------------------

def test_insert_into_select_with_query_id() -> None:
    s = one("INSERT INTO sink WITH (QUERY_ID='my_q') SELECT * FROM src EMIT CHANGES;")
    assert isinstance(s, sql_ast.InsertInto)
    assert (s.target, s.properties, s.query.source) == ("SINK", {"QUERY_ID": "my_q"}, "SRC")


def test_insert_into_select_plain() -> None:
    s = one("INSERT INTO sink SELECT a FROM src EMIT CHANGES;")
    assert isinstance(s, sql_ast.InsertInto)
    assert s.properties == {}


def test_insert_values_with_and_without_columns() -> None:
    s1, s2 = parse("INSERT INTO t (id, `Name`, v) VALUES (1, 'a;b', -2.5); INSERT INTO t VALUES (ARRAY[1, 2], NULL);")
    assert isinstance(s1, sql_ast.InsertValues)
    assert isinstance(s2, sql_ast.InsertValues)
    assert s1.columns == ("ID", "Name", "V")
    assert s1.values[:2] == (exp.Literal.number(1), exp.Literal.string("a;b"))
    assert s1.values[2].sql() == "-2.5"
    assert s2.columns is None
    assert isinstance(s2.values[0], exp.Array)
    assert isinstance(s2.values[1], exp.Null)


# -- DROP, TERMINATE, SHOW, DESCRIBE, EXPLAIN, SET, UNSET --------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("DROP STREAM s;", ("STREAM", "S", False, False)),
    ("drop table if exists t delete topic;", ("TABLE", "T", True, True)),
    ("DROP TABLE `t` DELETE TOPIC;", ("TABLE", "t", False, True)),
])
def test_drop(text: str, expected: tuple[str, str, bool, bool]) -> None:
    s = one(text)
    assert isinstance(s, sql_ast.DropSource)
    assert (s.kind.value, s.name, s.if_exists, s.delete_topic) == expected


def test_terminate() -> None:
    a, b = parse("TERMINATE CSAS_PAGEVIEWS_3; terminate all;")
    assert isinstance(a, sql_ast.Terminate)
    assert a.query_id == "CSAS_PAGEVIEWS_3"
    assert isinstance(b, sql_ast.Terminate)
    assert b.query_id is None


@pytest.mark.parametrize(("text", "kind", "query_id"), [
    ("PAUSE CSAS_PAGEVIEWS_3;", sql_ast.PauseQuery, "CSAS_PAGEVIEWS_3"),
    ("pause all;", sql_ast.PauseQuery, None),
    ("RESUME CTAS_T_7;", sql_ast.ResumeQuery, "CTAS_T_7"),
    ("Resume ALL;", sql_ast.ResumeQuery, None),
    ("PAUSE `csas_quoted_1`;", sql_ast.PauseQuery, "csas_quoted_1"),
])
def test_pause_and_resume(text: str, kind: type, query_id: str | None) -> None:
    """ksqlDB's pauseQuery / resumeQuery rules: PAUSE | RESUME, then a query id or ALL."""
    s = one(text)
    assert type(s) is kind
    assert isinstance(s, sql_ast.PauseQuery | sql_ast.ResumeQuery)
    assert s.query_id == query_id
    assert s.text == text


@pytest.mark.parametrize("text", ["PAUSE;", "RESUME;", "PAUSE q1 q2;", "PAUSE ALL q1;"])
def test_pause_and_resume_take_one_query_id_or_all(text: str) -> None:
    with pytest.raises(ParseError):
        parse(text)


@pytest.mark.parametrize("verb", ["SHOW", "LIST", "show"])
@pytest.mark.parametrize("what", list(sql_ast.ShowWhat))
def test_show_everything(verb: str, what: sql_ast.ShowWhat) -> None:
    s = one(f"{verb} {what.value.lower()};")
    assert isinstance(s, sql_ast.Show)
    assert (s.what, s.extended) == (what, False)


@pytest.mark.parametrize("what", ["STREAMS", "TABLES", "QUERIES", "TOPICS"])
def test_show_extended(what: str) -> None:
    s = one(f"SHOW {what} EXTENDED;")
    assert isinstance(s, sql_ast.Show)
    assert s.extended


def test_describe_forms() -> None:
    a, b, c, d, e = parse("DESCRIBE pageviews; DESCRIBE `Mixed` EXTENDED; DESCRIBE STREAMS; describe tables extended; "
                          "DESCRIBE FUNCTION substring;")
    assert a == sql_ast.Describe(text="DESCRIBE pageviews;", position=sql_ast.Position(1, 1), name="PAGEVIEWS")
    assert isinstance(b, sql_ast.Describe)
    assert (b.name, b.extended) == ("Mixed", True)
    assert isinstance(c, sql_ast.Describe)
    assert (c.name, c.what, c.extended) == (None, sql_ast.ShowWhat.STREAMS, False)
    assert isinstance(d, sql_ast.Describe)
    assert (d.what, d.extended) == (sql_ast.ShowWhat.TABLES, True)
    assert isinstance(e, sql_ast.Describe)
    assert (e.name, e.function) == ("SUBSTRING", True)


def test_explain_query_id_and_statement() -> None:
    a, b = parse("EXPLAIN CTAS_T_1;\nEXPLAIN SELECT * FROM s EMIT CHANGES;")
    assert isinstance(a, sql_ast.Explain)
    assert (a.query_id, a.statement) == ("CTAS_T_1", None)
    assert isinstance(b, sql_ast.Explain)
    assert b.query_id is None
    inner = b.statement
    assert isinstance(inner, sql_ast.QueryStatement)
    assert inner.text == "SELECT * FROM s EMIT CHANGES;"
    assert inner.position == sql_ast.Position(2, 9)
    assert inner.query.is_push


def test_set_and_unset() -> None:
    a, b = parse("SET 'auto.offset.reset' = 'earliest'; UNSET 'auto.offset.reset';")
    assert isinstance(a, sql_ast.SetProperty)
    assert (a.name, a.value) == ("auto.offset.reset", "earliest")
    assert isinstance(b, sql_ast.UnsetProperty)
    assert b.name == "auto.offset.reset"


def test_comments_stay_in_the_text_but_not_in_the_trees() -> None:
    s = one("SELECT a -- */ , secret\n, b /* x */ FROM s WHERE /* c */ x = 1 EMIT CHANGES;")
    assert isinstance(s, sql_ast.QueryStatement)
    assert "secret" in s.text
    assert s.query.select.sql() == "SELECT A, B FROM S WHERE X = 1"
    assert not any(node.comments for node in s.query.select.walk())


def test_with_property_literal_kinds() -> None:
    s = one("CREATE STREAM s (a INT) WITH (kafka_topic='s', PARTITIONS=-1, X=2.5, Y=TRUE, Z=FALSE, W=NULL);")
    assert isinstance(s, sql_ast.CreateSource)
    assert s.properties == {"KAFKA_TOPIC": "s", "PARTITIONS": -1, "X": 2.5, "Y": True, "Z": False, "W": None}


def test_create_without_columns_or_properties() -> None:
    s = one("CREATE STREAM s;")
    assert isinstance(s, sql_ast.CreateSource)
    assert (s.columns, s.properties) == ((), {})


def test_struct_with_duplicate_field_names_is_an_error() -> None:
    from oncestream.sql.errors import ParseError
    with pytest.raises(ParseError) as caught:
        parse("CREATE STREAM s (a STRUCT<x INT, X INT>);")
    assert caught.value.message == "line 1:20: Syntax Error\nDuplicate field names found in STRUCT"


def test_create_source_as_select_is_an_error() -> None:
    from oncestream.sql.errors import ParseError
    with pytest.raises(ParseError) as caught:
        parse("CREATE SOURCE TABLE t AS SELECT * FROM s;")
    assert caught.value.column == 23


@pytest.mark.parametrize(("options", "detail"), [
    ("GRACE PERIOD 1 MINUTE, RETENTION 1 DAY", "mismatched input ',' expecting ')'"),
    ("RETENTION 1 DAY, RETENTION 2 DAYS", "mismatched input 'RETENTION' expecting 'GRACE'"),
    ("FOO 1 DAY", "mismatched input 'FOO' expecting {'RETENTION', 'GRACE'}"),
])
def test_window_options_retention_then_grace_period(options: str, detail: str) -> None:
    from oncestream.sql.errors import ParseError
    with pytest.raises(ParseError) as caught:
        parse(f"SELECT k, COUNT(*) FROM s WINDOW TUMBLING (SIZE 1 HOUR, {options}) GROUP BY k EMIT CHANGES;")
    assert caught.value.message.endswith(detail)


@pytest.mark.parametrize(("text", "where", "message"), [
    # ksqlDB's CreateStream/CreateTable name the column's place as NodeLocation does
    ("CREATE STREAM s (id INT PRIMARY KEY) WITH (kafka_topic='s');", "Line: 1, Col: 18: ",
     "Column `ID` is a 'PRIMARY KEY' column: please use 'KEY' for streams.\n"
     "Tables have PRIMARY KEYs, which are unique and NON NULL.\n"
     "Streams have KEYs, which have no uniqueness or NON NULL constraints."),
    ("CREATE TABLE t (v INT, id INT KEY) WITH (kafka_topic='t');", "Line: 1, Col: 24: ",
     "Column `ID` is a 'KEY' column: please use 'PRIMARY KEY' for tables.\n"
     "Tables have PRIMARY KEYs, which are unique and NON NULL.\n"
     "Streams have KEYs, which have no uniqueness or NON NULL constraints."),
    ("CREATE STREAM s (a INT, b INT, A STRING) WITH (kafka_topic='s');", "line 1:32: ", "Duplicate column names: `A`"),
])
def test_ksqldb_parse_time_column_checks(text: str, where: str, message: str) -> None:
    from oncestream.sql.errors import ParseError
    with pytest.raises(ParseError) as caught:
        parse(text)
    assert caught.value.message == where + message


def test_quoted_and_unquoted_names_differ() -> None:
    s = one("CREATE STREAM s (a INT, `a` INT) WITH (kafka_topic='s');")
    assert isinstance(s, sql_ast.CreateSource)
    assert [c.name for c in s.columns] == ["A", "a"]


def test_explain_statement_without_semicolon_gets_one_in_both_texts() -> None:
    s = one("EXPLAIN SHOW STREAMS")
    assert isinstance(s, sql_ast.Explain)
    assert s.statement is not None
    assert (s.text, s.statement.text) == ("EXPLAIN SHOW STREAMS;", "SHOW STREAMS;")
