"""ksqlDB expressions through ``parse_expression`` (the same expression parser statements use):
struct access, subscripts, lambdas, CAST to ksqlDB types, name normalisation, and the
``SqlType`` <-> ``exp.DataType`` bridge."""

from __future__ import annotations

import pytest
from sqlglot import exp

from oncestream.sql.errors import ParseError
from oncestream.sql.language import sql_ast
from oncestream.sql.language import types as t
from oncestream.sql.language.parser import UnknownDataTypeError, parse_expression, sql_type_of, to_data_type
from oncestream.sql.language.parser.api import parse as parse_statements
from tests.support.narrow import of_type


def test_struct_access_is_dot_with_normalised_field_names() -> None:
    tree = parse_expression("s.col->inner->`Leaf`")
    assert tree == exp.Dot(
        this=exp.Dot(this=exp.column("COL", table="S"), expression=exp.to_identifier("INNER")),
        expression=exp.to_identifier("Leaf", quoted=True))


def test_struct_access_then_subscript_and_subscript_then_struct_access() -> None:
    tree = parse_expression("a->arr[2]")
    assert isinstance(tree, exp.Bracket)
    assert isinstance(tree.this, exp.Dot)
    assert tree.expressions == [exp.Literal.number(2)]
    tree = parse_expression("arr[1]->f")
    assert isinstance(tree, exp.Dot)
    assert isinstance(tree.this, exp.Bracket)


def test_array_index_is_kept_one_based_as_written() -> None:
    tree = parse_expression("arr[1]")
    assert isinstance(tree, exp.Bracket)
    assert tree.expressions == [exp.Literal.number(1)]


def test_map_access_with_a_string_key_keeps_the_key_case() -> None:
    tree = parse_expression("m['Key']")
    assert isinstance(tree, exp.Bracket)
    assert tree.expressions == [exp.Literal.string("Key")]


def test_arrow_inside_function_arguments_is_struct_access_not_a_lambda() -> None:
    tree = parse_expression("ucase(a->b)")
    assert isinstance(tree, exp.Anonymous)
    assert isinstance(tree.expressions[0], exp.Dot)


def test_fat_arrow_lambdas() -> None:
    tree = parse_expression("TRANSFORM(m, (k, v) => CONCAT(k, v), (k, v) => v + 1)")
    lambdas = list(tree.find_all(exp.Lambda))
    assert len(lambdas) == 2
    assert [i.name for i in lambdas[0].expressions] == ["K", "V"]


@pytest.mark.parametrize(("written", "expected"), [
    ("INT", t.INTEGER), ("BIGINT", t.BIGINT), ("STRING", t.STRING), ("VARCHAR", t.STRING),
    ("DOUBLE", t.DOUBLE), ("BOOLEAN", t.BOOLEAN), ("BYTES", t.BYTES), ("DATE", t.DATE), ("TIME", t.TIME),
    ("TIMESTAMP", t.TIMESTAMP), ("DECIMAL(10, 3)", t.decimal(10, 3)), ("ARRAY<STRING>", t.array_of(t.STRING)),
    ("MAP<STRING, DOUBLE>", t.map_of(t.STRING, t.DOUBLE)),
    ("STRUCT<x INT, `Y` ARRAY<BIGINT>>", t.struct_of(("X", t.INTEGER), ("Y", t.array_of(t.BIGINT)))),
])
def test_cast_targets_are_ksqldb_types(written: str, expected: t.SqlType) -> None:
    tree = parse_expression(f"CAST(a AS {written})")
    assert isinstance(tree, exp.Cast)
    assert sql_type_of(tree.to) == expected


def test_cast_to_an_unknown_type_is_a_parse_error() -> None:
    with pytest.raises(ParseError) as caught:
        parse_expression("CAST(a AS NUMBER)")
    assert (caught.value.line, caught.value.column) == (1, 11)
    assert "Unknown type: NUMBER" in caught.value.message


@pytest.mark.parametrize("sql_type", [
    t.BOOLEAN, t.INTEGER, t.BIGINT, t.DOUBLE, t.STRING, t.BYTES, t.TIMESTAMP, t.DATE, t.TIME, t.decimal(4, 2),
    t.array_of(t.map_of(t.STRING, t.struct_of(("a", t.INTEGER), ("B", t.array_of(t.DOUBLE))))),
    t.struct_of(),
])
def test_sql_type_and_data_type_round_trip(sql_type: t.SqlType) -> None:
    assert sql_type_of(to_data_type(sql_type)) == sql_type


def test_data_type_without_ksqldb_equivalent() -> None:
    with pytest.raises(UnknownDataTypeError):
        sql_type_of(exp.DataType.build("FLOAT"))


def test_unquoted_names_and_function_names_are_upper_cased() -> None:
    tree = parse_expression("my_udf(col, `keep`) + other.x")
    assert tree.sql() == 'MY_UDF(COL, "keep") + OTHER.X'


def test_case_in_cast_and_searched_case() -> None:
    tree = parse_expression("CASE WHEN a > 1 THEN 'x' WHEN a IS NULL THEN NULL ELSE CAST(a AS STRING) END")
    assert isinstance(tree, exp.Case)
    assert len(tree.args["ifs"]) == 2
    assert isinstance(tree.args["default"], exp.Cast)


def test_simple_case() -> None:
    tree = parse_expression("CASE a WHEN 1 THEN 'one' ELSE 'many' END")
    assert isinstance(tree, exp.Case)
    assert tree.this == exp.column("A")


def test_constructors() -> None:
    assert parse_expression("ARRAY[1, 2, 3]") == exp.Array(expressions=[exp.Literal.number(i) for i in (1, 2, 3)])
    assert parse_expression("STRUCT(a := 1, `b` := 'x')") == exp.Struct(expressions=[
        exp.PropertyEQ(this=exp.to_identifier("A"), expression=exp.Literal.number(1)),
        exp.PropertyEQ(this=exp.to_identifier("b", quoted=True), expression=exp.Literal.string("x"))])
    assert parse_expression("MAP('k1' := 1, 'k2' := v, 'k3' := 3)") == exp.VarMap(
        keys=exp.Array(expressions=[exp.Literal.string(k) for k in ("k1", "k2", "k3")]),
        values=exp.Array(expressions=[exp.Literal.number(1), exp.column("V"), exp.Literal.number(3)]))
    assert parse_expression("MAP()") == exp.VarMap(keys=exp.Array(expressions=[]), values=exp.Array(expressions=[]))


@pytest.mark.parametrize(("text", "name", "arity"), [
    ("COUNT(*)", "COUNT", 1), ("count(x)", "COUNT", 1), ("substring(s, 1, 2)", "SUBSTRING", 3),
    ("INSTR(s, 'x')", "INSTR", 2), ("TRANSFORM(m, (k, v) => k, (k, v) => v)", "TRANSFORM", 3),
    ("IFNULL(a, 0)", "IFNULL", 2), ("LEFT(a, 1)", "LEFT", 2), ("REPLACE(a, 'x', 'y')", "REPLACE", 3),
    ("TIMESTAMPADD(MINUTES, 5, ts)", "TIMESTAMPADD", 3), ("trim(a)", "TRIM", 1), ("my_udf()", "MY_UDF", 0),
    ("`MyUdf`(a)", "MyUdf", 1),
])
def test_every_function_call_is_anonymous_with_its_ksqldb_name(text: str, name: str, arity: int) -> None:
    tree = parse_expression(text)
    assert isinstance(tree, exp.Anonymous)
    assert (tree.name, len(tree.expressions)) == (name, arity)


@pytest.mark.parametrize(("text", "detail"), [
    ("f(*, a)", "'*' is only allowed as a select item or in COUNT(*)"),
    ("COUNT(DISTINCT a)", "DISTINCT inside a function call (ksqlDB has COUNT_DISTINCT) is not supported"),
    ("MAP('a' : 1)", "mismatched input ':' expecting ':='"),
    ("STRUCT(a = 1)", "mismatched input '=' expecting ':='"),
])
def test_refused_call_forms(text: str, detail: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse_expression(text)
    assert caught.value.message.endswith(detail)


def test_pseudo_columns_are_plain_columns() -> None:
    for name in ("ROWTIME", "rowpartition", "ROWOFFSET", "WINDOWSTART", "windowend"):
        tree = parse_expression(name)
        assert tree == exp.column(name.upper())


@pytest.mark.parametrize("name", ["KEY", "VALUE", "TIMESTAMP", "DATE", "TIME", "SIZE", "TYPE", "SESSION", "EMIT",
                                  "FINAL", "GRACE", "PERIOD", "ALTER", "SOURCE", "HOUR", "STRUCT", "MAP", "ID"])
def test_ksqldb_non_reserved_words_are_column_names(name: str) -> None:
    assert parse_expression(f"{name} = 1") == exp.EQ(this=exp.column(name), expression=exp.Literal.number(1))


@pytest.mark.parametrize(("text", "column"), [
    ("a +", 4), ("f(a", 4), ("a b", 3), ("(a", 3), ("'open", 1), ("x->", 4), ("", 1),
])
def test_malformed_expressions(text: str, column: int) -> None:
    with pytest.raises(ParseError) as caught:
        parse_expression(text)
    assert caught.value.column == column, caught.value.message


@pytest.mark.parametrize(("text", "column", "what"), [
    ("a DIV b", 1, "DIV"),
    ("a ILIKE 'x'", 1, "ILIKE"),
    ("x + INTERVAL 1 DAY", 1, "INTERVAL"),
    ("x::INT", 1, "A '::' cast or a typed literal (use CAST(x AS type))"),
    ("x = DATE '2020-01-01'", 10, "A '::' cast or a typed literal (use CAST(x AS type))"),
    ("f(a) ^ 2", 1, "A bitwise operator"),
    ("x.y.z", 1, "A name of more than two parts (a.b.c; struct fields are reached with ->)"),
    ("a IS TRUE", 1, "IS other than IS [NOT] NULL / IS [NOT] DISTINCT FROM"),
    ("arr[1:2]", 5, "An array slice [a:b]"),
    ("{x}", 2, "A {...} struct literal (use STRUCT(name := value, ...))"),
    ("a IN (SELECT b FROM t)", 14, "A sub-query"),
    ("COUNT(*) OVER (PARTITION BY a)", 1, "A window function (OVER)"),
])
def test_standard_sql_that_ksqldb_lacks_is_refused_where_it_is(text: str, column: int, what: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse_expression(text)
    assert caught.value.message == f"line 1:{column}: {what} is not supported"


@pytest.mark.parametrize(("text", "column"), [("(a, b)", 3), ("f(x, (a + 1, b))", 12), ("(1, 'x', 2)", 3)])
def test_row_values_are_an_unclosed_parenthesis_at_their_first_comma(text: str, column: int) -> None:
    """ksqlDB's grammar has no row values: ANTLR reads `(` expression `)` and misses the `)`."""
    with pytest.raises(ParseError) as caught:
        parse_expression(text)
    assert caught.value.message == f"line 1:{column}: Syntax Error\nmissing ')' at ','"


def test_a_row_value_after_the_first_group_by_item_is_the_same_syntax_error() -> None:
    """group-by.json "with groupings": `GROUP BY f3, (f2, f1)` (only a whole `GROUP BY (a, b)` is
    a list); the place is in the whole request (line 2)."""
    text = ("CREATE STREAM TEST (ID INT KEY, f1 INT) WITH (kafka_topic='t', value_format='JSON');\n"
            "CREATE TABLE OUTPUT AS SELECT f1, f2, COUNT(*) FROM TEST GROUP BY f3, (f2, f1);")
    with pytest.raises(ParseError) as caught:
        parse_statements(text)
    assert caught.value.message == "line 2:74: Syntax Error\nmissing ')' at ','"
    (statement,) = parse_statements("SELECT F1, COUNT(*) FROM TEST GROUP BY (F2, F1) EMIT CHANGES;")
    assert statement is not None


@pytest.mark.parametrize(("text", "inner"), [
    ("a NOT LIKE 'x%'", exp.Like), ("a NOT LIKE 'x!%' ESCAPE '!'", exp.Escape), ("a NOT IN (1, 2)", exp.In),
    ("a NOT BETWEEN 1 AND 2", exp.Between), ("a IS NOT NULL", exp.Is),
])
def test_negated_predicates_are_not_nodes(text: str, inner: type[exp.Expression]) -> None:
    tree = parse_expression(text)
    assert isinstance(tree, exp.Not)
    assert isinstance(tree.this, inner)
    assert not any(node.args.get("negate") for node in tree.walk())


def test_distinct_from() -> None:
    assert isinstance(parse_expression("a IS NOT DISTINCT FROM b"), exp.NullSafeEQ)
    assert isinstance(parse_expression("a IS DISTINCT FROM b"), exp.NullSafeNEQ)


@pytest.mark.parametrize("text", ["2E"])
def test_malformed_numbers_are_syntax_errors(text: str) -> None:
    # (ksqlDB's lexer reads this as a DIGIT_IDENTIFIER naming no column; the statement is refused either way.)
    with pytest.raises(ParseError):
        parse_expression(text)


@pytest.mark.parametrize("text", ["1R", "1_000", "2R3", "2Ex"])
def test_a_name_may_start_with_a_digit(text: str) -> None:
    # ksqlDB's DIGIT_IDENTIFIER: a digit followed by letters, digits, '_' or '@' (math.json's `AS 1R`).
    tree = parse_expression(text)
    assert isinstance(tree, exp.Column)
    assert tree.name == text.upper()


def test_a_column_alias_may_start_with_a_digit() -> None:
    statement = of_type(parse_statements("CREATE STREAM O AS SELECT ROUND(V, -1) AS 1R, ROUND(V, -2) AS 2R FROM S;")[0],
                        sql_ast.CreateAsSelect, "statement")
    assert [e.alias for e in statement.query.select.expressions] == ["1R", "2R"]


@pytest.mark.parametrize(("text", "value"), [("42", 42), ("2.5", 2.5), ("1e5", 1e5), (".5", 0.5)])
def test_numbers(text: str, value: float) -> None:
    tree = parse_expression(text)
    assert isinstance(tree, exp.Literal)
    assert float(tree.this) == value


@pytest.mark.parametrize("text", [
    "userid", "p.userid", "`Mixed`", "'text'", "-2.5", "a + b * 2", "a % 3", "first || ' ' || last", "a != b", "a <> b",
    "a IS NOT DISTINCT FROM b", "a NOT BETWEEN 1 AND 5", "a NOT IN (1, 2)", "a NOT LIKE 'x%' ESCAPE '\\'",
    "a IS NOT NULL", "NOT a AND b OR c", "CASE a WHEN 1 THEN 'one' END", "CAST(a AS ARRAY<STRING>)",
    "SUBSTRING(s, 1, 3)", "`MyUdf`(x)", "REDUCE(m, 0, (s, k, v) => s + v)", "address->city", "arr[-1]", "m['key']",
    "ARRAY[1, 2]", "MAP('a' := 1, 'b' := 2)", "STRUCT(name := 'x', age := 3)", "ts AT TIME ZONE 'UTC'", "(a + b) * c",
])
def test_documented_expression_forms_parse(text: str) -> None:
    assert isinstance(parse_expression(text), exp.Expression)


def test_lambda_variables_follow_ksqldb_name_rules_and_keep_struct_access() -> None:
    tree = parse_expression("TRANSFORM(arr, X => x->name + y)")
    (lam,) = tree.find_all(exp.Lambda)
    assert [i.name for i in lam.expressions] == ["X"]
    add = lam.this
    assert isinstance(add, exp.Add)
    assert add.this == exp.Dot(this=exp.to_identifier("X"), expression=exp.to_identifier("NAME"))
    assert add.expression == exp.column("Y")   # not a lambda variable: a column


def test_lambda_quoted_variable_does_not_capture_unquoted_name() -> None:
    (lam,) = parse_expression("TRANSFORM(arr, `x` => x)").find_all(exp.Lambda)
    assert lam.this == exp.column("X")
