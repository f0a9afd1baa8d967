"""The ksqlDB function catalog: return-type rules as ksqlDB documents them, Spark SQL
translations that are valid Spark SQL, and docs/sql-functions.md listing every function."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlglot

from oncestream.sql.language import functions, java_text
from oncestream.sql.language import types as t
from oncestream.sql.language.functions import CallSite, FunctionTypeError, LambdaSite

DOCS = Path(__file__).resolve().parents[3] / "docs" / "sql-functions.md"


def rt(name: str, *types: t.SqlType | None) -> t.SqlType:
    fd = functions.lookup(name)
    assert fd is not None
    return fd.result_type(list(types))


@pytest.mark.parametrize(("name", "args", "expected"), [
    ("UCASE", [t.STRING], t.STRING),
    ("LEN", [t.STRING], t.INTEGER),
    ("SUBSTRING", [t.STRING, t.INTEGER], t.STRING),
    ("SUBSTRING", [t.STRING, t.INTEGER, t.INTEGER], t.STRING),
    ("SPLIT", [t.STRING, t.STRING], t.array_of(t.STRING)),
    ("CONCAT", [t.STRING, t.STRING, None], t.STRING),
    ("ABS", [t.BIGINT], t.BIGINT),
    ("ROUND", [t.DOUBLE], t.BIGINT),
    ("ROUND", [t.DOUBLE, t.INTEGER], t.DOUBLE),
    ("ROUND", [t.decimal(5, 2)], t.decimal(4, 0)),
    ("ROUND", [t.INTEGER], t.INTEGER),
    ("CEIL", [t.DOUBLE], t.DOUBLE),
    ("SQRT", [t.INTEGER], t.DOUBLE),
    ("SIGN", [t.DOUBLE], t.INTEGER),
    ("GREATEST", [t.INTEGER, t.BIGINT, t.DOUBLE], t.DOUBLE),
    ("LEAST", [t.INTEGER, t.INTEGER], t.INTEGER),
    ("GREATEST", [t.DATE, None, t.STRING], t.DATE),
    ("COALESCE", [None, t.STRING], t.STRING),
    ("IFNULL", [t.INTEGER, t.BIGINT], t.BIGINT),
    ("TIMESTAMPTOSTRING", [t.BIGINT, t.STRING], t.STRING),
    ("STRINGTOTIMESTAMP", [t.STRING, t.STRING, t.STRING], t.BIGINT),
    ("PARSE_TIMESTAMP", [t.STRING, t.STRING], t.TIMESTAMP),
    ("FROM_UNIXTIME", [t.BIGINT], t.TIMESTAMP),
    ("UNIX_TIMESTAMP", [], t.BIGINT),
    ("ARRAY_LENGTH", [t.array_of(t.STRING)], t.INTEGER),
    ("ARRAY_MAX", [t.array_of(t.DOUBLE)], t.DOUBLE),
    ("MAP_KEYS", [t.map_of(t.STRING, t.INTEGER)], t.array_of(t.STRING)),
    ("MAP_VALUES", [t.map_of(t.STRING, t.INTEGER)], t.array_of(t.INTEGER)),
    ("ELT", [t.INTEGER, t.STRING, t.STRING], t.STRING),
    ("FIELD", [t.STRING, t.STRING, t.STRING], t.INTEGER),
    ("EXTRACTJSONFIELD", [t.STRING, t.STRING], t.STRING),
    ("COUNT", [], t.BIGINT),
    ("COUNT", [t.STRING], t.BIGINT),
    ("SUM", [t.INTEGER], t.INTEGER),
    ("SUM", [t.decimal(6, 2)], t.decimal(6, 2)),
    ("AVG", [t.INTEGER], t.DOUBLE),
    ("MIN", [t.STRING], t.STRING),
    ("COUNT_DISTINCT", [t.STRING], t.BIGINT),
    ("COLLECT_LIST", [t.INTEGER], t.array_of(t.INTEGER)),
    ("COLLECT_SET", [t.STRING], t.array_of(t.STRING)),
    ("LATEST_BY_OFFSET", [t.DOUBLE], t.DOUBLE),
    ("EARLIEST_BY_OFFSET", [t.STRING], t.STRING),
    ("TOPK", [t.INTEGER, t.INTEGER], t.array_of(t.INTEGER)),
    ("SUM_LIST", [t.array_of(t.BIGINT)], t.BIGINT),
    # TopkKudaf's struct overload: the sort column, then the other columns of those records
    ("TOPK", [t.BIGINT, t.STRING, t.DOUBLE, t.INTEGER],
     t.array_of(t.struct_of(("sort_col", t.BIGINT), ("col0", t.STRING), ("col1", t.DOUBLE)))),
    ("LATEST_BY_OFFSET", [t.DOUBLE, t.BOOLEAN], t.DOUBLE),
    ("LATEST_BY_OFFSET", [t.DOUBLE, t.INTEGER], t.array_of(t.DOUBLE)),
    ("EARLIEST_BY_OFFSET", [t.STRING, t.INTEGER, t.BOOLEAN], t.array_of(t.STRING)),
    ("LOG", [t.INTEGER], t.DOUBLE),
    ("LOG", [t.INTEGER, t.DOUBLE], t.DOUBLE),
    ("SLICE", [t.array_of(t.STRING), t.INTEGER, t.INTEGER], t.array_of(t.STRING)),
    ("AS_MAP", [t.array_of(t.STRING), t.array_of(t.BIGINT)], t.map_of(t.STRING, t.BIGINT)),
    ("STRINGTODATE", [t.STRING, t.STRING], t.INTEGER),
    ("FROM_DAYS", [t.INTEGER], t.DATE),
    ("STDDEV_SAMPLE", [t.INTEGER], t.DOUBLE),
    ("CORRELATION", [t.DOUBLE, t.DOUBLE], t.DOUBLE),
])
def test_return_type_rules(name: str, args: list, expected: t.SqlType) -> None:
    assert rt(name, *args) == expected


@pytest.mark.parametrize(("name", "args", "spelled"), [
    # the name as ksqlDB registered the function (its @UdfDescription), which its refusals use
    ("UCASE", [t.INTEGER], "ucase"), ("LEN", [t.STRING, t.STRING], "len"), ("ABS", [t.STRING], "Abs"),
    ("SUM", [t.STRING], "SUM"), ("ARRAY_LENGTH", [t.STRING], "ARRAY_LENGTH"), ("MIN", [t.array_of(t.INTEGER)], "MIN"),
    ("COALESCE", [t.STRING, t.INTEGER], "COALESCE"), ("ELT", [t.STRING, t.STRING], "elt"),
    ("SUBSTRING", [t.STRING], "substring"), ("GREATEST", [t.STRING, t.INTEGER], "greatest"), ("LEAST", [], "least"),
    ("TOPK", [t.BOOLEAN, t.STRING, t.INTEGER], "TOPK"), ("SUM_LIST", [t.array_of(t.STRING)], "sum_list"),
    ("SUM_LIST", [t.INTEGER], "sum_list"), ("TOPK", [t.INTEGER, t.STRING, t.STRING], "TOPK"),
])
def test_refused_arguments_use_ksqldb_wording(name: str, args: list, spelled: str) -> None:
    fd = functions.lookup(name)
    assert fd is not None
    with pytest.raises(FunctionTypeError, match=rf"^Function '{spelled}' does not accept parameters \(.*\)\.$"):
        fd.result_type(args)


@pytest.mark.parametrize(("args", "outcome"), [
    # greatest.json / least.json: one overload per type; mixed numerics only widen to DOUBLE
    ([t.INTEGER, t.INTEGER, None], t.INTEGER), ([t.INTEGER, t.BIGINT, t.decimal(30, 18), t.DOUBLE, None], t.DOUBLE),
    ([t.decimal(9, 2), t.decimal(7, 6)], t.decimal(13, 6)), ([t.DATE, None, t.STRING], t.DATE),
    ([t.INTEGER, t.BIGINT], "ambiguous method parameters (INTEGER, BIGINT)."),
    ([t.INTEGER, t.BIGINT, t.decimal(50, 30)], "ambiguous method parameters (INTEGER, BIGINT, DECIMAL(50, 30))."),
    ([None, None, None, None], "ambiguous method parameters (null, null, null, null)."),
])
def test_greatest_and_least_resolve_as_ksqldb_overloads(args: list, outcome: t.SqlType | str) -> None:
    for name in ("GREATEST", "LEAST"):
        fd = functions.lookup(name)
        assert fd is not None
        if isinstance(outcome, str):
            with pytest.raises(FunctionTypeError) as refused:
                fd.result_type(args)
            assert str(refused.value) == f"Function '{name.lower()}' cannot be resolved due to {outcome}"
        else:
            assert fd.result_type(args) == outcome


def test_aliases_and_case_insensitive_lookup() -> None:
    assert functions.lookup("ucase") is functions.lookup("UCASE")
    assert functions.lookup("nope") is None
    assert functions.is_aggregate("count")
    assert not functions.is_aggregate("ucase")
    assert "Can't find any functions with the name 'NOPE'" == functions.unknown_function_message("nope")
    assert functions.unknown_function_message("attempt_to_cast").startswith(
        "Function 'ATTEMPT_TO_CAST' is not supported")


def _sample_args(fd: functions.FunctionDef) -> tuple[list[str], list[t.SqlType | None]]:
    n = fd.min_args if fd.max_args is None or fd.min_args > 0 else 0
    n = max(n, 1) if fd.max_args != 0 else 0
    return [f"a{i}" for i in range(n)], [None] * n


@pytest.mark.parametrize("name", sorted(functions.catalog()))
def test_every_translation_is_valid_spark_sql(name: str) -> None:
    fd = functions.catalog()[name]
    args, types = _sample_args(fd)
    if fd.max_args is not None and fd.max_args >= 2 and len(args) < fd.min_args:
        args, types = [f"a{i}" for i in range(fd.min_args)], [None] * fd.min_args
    lambdas: list[LambdaSite] = []
    if fd.category == "LAMBDA":   # TRANSFORM / FILTER / REDUCE of an ARRAY: the lambda apart from the args
        args, types = args[:fd.min_args - 1], types[:fd.min_args - 1]
        lambdas = [LambdaSite(("x",) if fd.name != "REDUCE" else ("s", "x"), "x", "x IS NULL")]
    sql = fd.spark(CallSite(args=args, types=types, order_sql="struct(o1, o2)", lambdas=lambdas))
    sqlglot.parse_one(f"SELECT {sql}", dialect="spark")   # raises on a syntax error


def test_translations_keep_ksqldb_semantics() -> None:
    def spark(name: str, args: list[str], types: list[t.SqlType | None] | None = None) -> str:
        fd = functions.lookup(name)
        assert fd is not None
        return fd.spark(CallSite(args=args, types=types or [None] * len(args), order_sql="o"))
    assert spark("UCASE", ["s"]) == "upper(s)"
    assert spark("CONCAT", ["a", "b"]) == "concat_ws('', a, b)"       # NULLs count as ''
    assert spark("SUM", ["x"], [t.INTEGER]) == "CAST(sum(x) AS INT)"   # ksqlDB keeps INT
    assert spark("ROUND", ["x"], [t.DOUBLE]) == \
        "CAST(CASE WHEN x < 0 AND floor(x) + ceil(x) = 2 * x THEN ceil(x) ELSE round(x) END AS BIGINT)"  # ties up
    assert spark("REGEXP_EXTRACT", ["p", "s"]).startswith("CASE WHEN s RLIKE p")  # ksqlDB's (pattern, string) order
    assert spark("ARRAY_LENGTH", ["a"]) == "CASE WHEN a IS NULL THEN NULL ELSE size(a) END"
    assert spark("LATEST_BY_OFFSET", ["x"]) == "max_by(x, CASE WHEN x IS NOT NULL THEN o END)"
    assert spark("LATEST_BY_OFFSET", ["x", "false"], [t.INTEGER, t.BOOLEAN]) == "max_by(x, o)"
    assert spark("LATEST_BY_OFFSET", ["x", "2"], [t.INTEGER, t.INTEGER]) == (
        "reverse(transform(slice(sort_array(collect_list(CASE WHEN x IS NOT NULL THEN struct(o AS o, x AS v) END), false), "
        "1, 2), e -> e.v))")
    assert spark("COUNT", ["*"]) == "count(*)"
    assert spark("AS_VALUE", ["k"]) == "k"
    assert spark("SLICE", ["a", "2", "3"]) == "slice(a, 2, 3 - 2 + 1)"   # ksqlDB: inclusive end, Spark: a length
    # java.lang.Math's log and exp, as ksqlDB's UDFs call them (NaN / -Infinity where Spark's ln is NULL)
    java_log = "CAST(reflect('java.lang.Math', 'log', CAST(x AS DOUBLE)) AS DOUBLE)"
    assert spark("LOG", ["x"]) == f"CASE WHEN x IS NULL THEN NULL ELSE {java_log} END"
    assert spark("LN", ["x"]) == spark("LOG", ["x"])
    assert "WHEN b <= 0 OR b = 1 THEN CAST('NaN' AS DOUBLE)" in spark("LOG", ["b", "x"])
    assert "reflect('java.lang.Math', 'exp'" in spark("EXP", ["x"])
    assert spark("TIMESTAMPTOSTRING", ["ts", "'yyyy'", "'Europe/Paris'"]) == \
        "date_format(from_utc_timestamp(timestamp_millis(ts), 'Europe/Paris'), 'yyyy')"


def test_trim_is_javas_string_trim() -> None:
    """ksqlDB's TRIM is String.trim: every character up to U+0020 goes at both ends (string.json's
    tabs), nothing above it (no-break space, em space, U+2028 stay)."""
    fd = functions.lookup("TRIM")
    assert fd is not None
    assert fd.python is not None
    assert fd.python([" \t with white space \t"]) == "with white space"
    assert fd.python(["\x00\r\n a \x1f"]) == "a"
    assert fd.python(["\u00a0a\u2003\u2028"]) == "\u00a0a\u2003\u2028"
    assert fd.python([None]) is None
    assert "\\\\x20]+\\\\z" in fd.spark(CallSite(args=["s"], types=[None], order_sql="o"))


def test_spark_type_names() -> None:
    assert functions.spark_type_name(t.struct_of(("A", t.array_of(t.INTEGER)), ("B", t.map_of(t.STRING, t.decimal(4, 2))))) == \
        "STRUCT<`A`: ARRAY<INT>, `B`: MAP<STRING, DECIMAL(4, 2)>>"


def test_docs_list_every_function_and_every_unsupported_one() -> None:
    text = DOCS.read_text()
    for name in functions.catalog():
        assert f"`{name}`" in text, name
    for name in functions.NOT_SUPPORTED:
        assert f"`{name}`" in text, name


def _py(name: str, *args: object) -> object:
    fd = functions.lookup(name)
    assert fd is not None
    assert fd.python is not None
    return fd.python(list(args))


@pytest.mark.parametrize(("arg", "expected"), [
    # chr.json "codepoint from decimal code" / "codepoint from text code": ksqlDB's Chr UDF
    (75, "K"), (22909, "好"), (99000, "𘊸"), (-1, None), (0x110000, None), (None, None),
    ("\\u004b", "K"), ("\\u597d", "好"), ("\\ud820\\udeb8", "𘊸"), ("75", None), ("004b", None), ("bogus", None),
    ("", None),
    # unescapeJava beyond the first escape: more u's, a '+', text after it, control escapes; a bad
    # escape fails the UDF (NULL); a lone surrogate is written as '?'
    ("\\uuu004bSQL", "KSQL"), ("\\u+004b\\n", "K\n"), ("\\u004b\\uZZZZ", None), ("\\u004b\\u12", None),
    ("\\\\u004b", None), ("\\u004b\\\\uZZZZ", "K\\uZZZZ"), ("\\ud820", "?"), ("\\u004b\\101", "KA"),
])
def test_chr_python_form_is_ksqldb_chr(arg: object, expected: object) -> None:
    assert _py("CHR", arg) == expected


@pytest.mark.parametrize(("text", "delimiter", "expected"), [
    # split.json: a literal delimiter keeps empty pieces; an empty one splits every character
    ("a.b.c", ".", ["a", "b", "c"]), (".abc.", ".", ["", "abc", ""]), ("..a..", ".", ["", "", "a", "", ""]),
    ("abc", ".", ["abc"]), ("", ".", [""]), ("a$$b.c", "$$", ["a", "b.c"]), ("abc", "", ["a", "b", "c"]), ("", "", [""]),
    ("a\\Eb", "\\E", ["a", "b"]), (None, ".", None), ("a", None, None),
    (b"a.b", b".", [b"a", b"b"]), (b"ab", b"", [b"a", b"b"]), (b"", b"", [b""]),
])
def test_split_python_form_is_ksqldb_split(text: object, delimiter: object, expected: object) -> None:
    assert _py("SPLIT", text, delimiter) == expected


def test_array_join_python_form_writes_nulls_and_java_numbers() -> None:
    # arrayjoin.json: NULL elements as 'null', a NULL delimiter as '', elements as Java's toString
    assert _py("ARRAY_JOIN", [True, None, False]) == "true,null,false"
    assert _py("ARRAY_JOIN", [1.23, -23.42, 0.0], " ") == "1.23 -23.42 0.0"
    assert _py("ARRAY_JOIN", ["Hello", "From", "", "Ksqldb"], None) == "HelloFromKsqldb"
    assert _py("ARRAY_JOIN", [1e20, 1.5e-5, 12345678.9], "|") == "1.0E20|1.5E-5|1.23456789E7"
    assert _py("ARRAY_JOIN", None, ",") is None


def test_pattern_quote_closes_a_quote_inside_the_literal() -> None:
    # Java's Pattern.quote (split.json's delimiters are literals; Spark's split takes a regex)
    assert java_text.pattern_quote("a.b") == "\\Qa.b\\E"
    assert java_text.pattern_quote("x\\Ey") == "\\Qx\\E\\\\E\\Qy\\E"
    # the SQL form: the same replacement, each backslash doubled in Spark's string literals
    assert java_text.pattern_quote_sql("d") == "concat('\\\\Q', replace(d, '\\\\E', '\\\\E\\\\\\\\E\\\\Q'), '\\\\E')"


def test_spark_translations_of_the_ksqldb_corners() -> None:
    def spark(name: str, args: list[str], types: list[t.SqlType | None]) -> str:
        fd = functions.lookup(name)
        assert fd is not None
        return fd.spark(CallSite(args=args, types=types, order_sql="o"))
    # Spark's chr takes n mod 256: ksqlDB's code points go through Character.toString
    assert "reflect('java.lang.Character', 'toString', n)" in spark("CHR", ["n"], [t.INTEGER])
    assert "StringEscapeUtils', 'unescapeJava', s)" in spark("CHR", ["s"], [t.STRING])
    assert "ISO-8859-1" in spark("SPLIT", ["b", "d"], [t.BYTES, t.BYTES])
    assert spark("ARRAY_JOIN", ["a", "d"], [t.array_of(t.INTEGER), t.STRING]) == \
        "array_join(transform(a, __os_e -> CAST(__os_e AS STRING)), coalesce(d, ''), 'null')"
    # Spark's collect_list drops NULLs, ksqlDB's keeps them
    assert spark("COLLECT_LIST", ["x"], [t.INTEGER]) == "transform(collect_list(named_struct('v', x)), __os_sx -> __os_sx.v)"
    # STDDEV_SAMP is ksqlDB's variance, STDDEV_SAMPLE its square root; both 0.0 below two values
    samp, sample = spark("STDDEV_SAMP", ["x"], [t.INTEGER]), spark("STDDEV_SAMPLE", ["x"], [t.INTEGER])
    assert "sqrt(" not in samp
    assert sample.endswith(
        "__os_a -> sqrt(CASE WHEN __os_a.n < 2 THEN CAST(0 AS DOUBLE) ELSE __os_a.m2 / (__os_a.n - 1) END))")
    assert "CAST(0 AS INT)" in samp   # the running sum wraps as ksqlDB's int
    assert "CAST('NaN' AS DOUBLE)" in spark("CORRELATION", ["x", "y"], [t.DOUBLE, t.DOUBLE])
    assert spark("ARRAY_SORT", ["a", "d"], [t.array_of(t.INTEGER), t.STRING]) == (
        "CASE WHEN upper(d) IN ('ASC', 'ASCENDING') THEN array_sort(a) "
        "WHEN upper(d) IN ('DESC', 'DESCENDING') THEN sort_array(a, false) END")
