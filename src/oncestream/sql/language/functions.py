"""ksqlDB's function catalog, restricted to what Spark SQL can express: the one home of what a
function means, for the analyzer, the compiler and the pull-query evaluator.

Each ``FunctionDef`` carries its rules side by side:

- ``return_type(arg_types) -> SqlType``: ksqlDB's return-type rule (raises ``FunctionTypeError``
  when ksqlDB would refuse the arguments);
- ``spark(call) -> str``: the Spark SQL text for a call, built from the *already translated* Spark
  SQL of the arguments (``CallSite.args``) and their ksqlDB types. It is a plain function from
  strings to a string (not a sqlglot transform), so the compiler can use it with any renderer;
- ``python(values) -> value`` (for the functions pull queries may call): the same function over
  Python values (None is NULL), used by ``oncestream.sql.language.evaluate``. Its null handling is
  ksqlDB's, as the Spark form's guards give it (``tests/spark/sql/test_expression_agreement.py``
  runs both forms on the same inputs).

The analyzer rewrites every function call of a query into ``exp.Anonymous(this=<ksqlDB name>,
expressions=[args])`` with ``meta["ksql_type"]`` on every node, so the compiler only needs
``lookup(name).spark(CallSite(...))`` for each call. ``docs/sql-functions.md`` lists the catalog and
what is not supported.

Where Spark differs from ksqlDB on a corner (null handling, rounding), the translation adds the
guard that gives ksqlDB's answer; the remaining differences are written in the docs.
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from oncestream.sql.language import array_sets, java_text, zone_text
from oncestream.sql.language import types as t
from oncestream.sql.language.function_catalog import (  # noqa: F401  (the catalog's frame, re-exported)
    _CATALOG,
    NUMERIC_ORDER,
    CallSite,
    FunctionDef,
    FunctionTypeError,
    LambdaSite,
    PythonRule,
    SparkRule,
    TypeRule,
    _add,
    _refused,
    _section,
    _type_list,
    decimal_of,
    is_array,
    is_date,
    is_integral,
    is_map,
    is_numeric,
    is_string,
    is_timestamp,
    registered_name,
    spark_type_name,
    wider_numeric,
)
from oncestream.sql.language.types import BaseType, SqlType


def _all(pred: Callable[[SqlType | None], bool], name: str, result: Callable[[Sequence[SqlType | None]], SqlType]) -> TypeRule:
    def rule(arg_types: Sequence[SqlType | None]) -> SqlType:
        if not all(pred(a) for a in arg_types):
            raise FunctionTypeError(_refused(name, arg_types))
        return result(arg_types)
    return rule


def _sig(name: str, *preds: Callable[[SqlType | None], bool], result: SqlType | Callable[[Sequence[SqlType | None]], SqlType],
         optional_from: int | None = None) -> TypeRule:
    """A fixed signature: one predicate per argument (arguments from ``optional_from`` may be absent)."""
    def rule(arg_types: Sequence[SqlType | None]) -> SqlType:
        lo = len(preds) if optional_from is None else optional_from
        if not (lo <= len(arg_types) <= len(preds)) or not all(p(a) for p, a in zip(preds, arg_types)):
            raise FunctionTypeError(_refused(name, arg_types))
        return result if isinstance(result, SqlType) else result(arg_types)
    return rule


def _any(_: SqlType | None) -> bool:
    return True


def _first_non_null(arg_types: Sequence[SqlType | None]) -> SqlType:
    for a in arg_types:
        if a is not None:
            return a
    return t.STRING


def _same_as_first(name: str, pred: Callable[[SqlType | None], bool]) -> TypeRule:
    def rule(arg_types: Sequence[SqlType | None]) -> SqlType:
        if len(arg_types) != 1 or not pred(arg_types[0]):
            raise FunctionTypeError(_refused(name, arg_types))
        return arg_types[0] or t.INTEGER
    return rule


def _common_type(name: str) -> TypeRule:
    """All arguments of one type (numerics widened): COALESCE, IFNULL."""
    def rule(arg_types: Sequence[SqlType | None]) -> SqlType:
        known = [a for a in arg_types if a is not None]
        if not known:
            return t.STRING
        if all(a.base in NUMERIC_ORDER for a in known):
            out: SqlType | None = None
            for a in known:
                out = wider_numeric(out, a)
            return out or t.INTEGER
        temporal = [a for a in known if a.base in (BaseType.DATE, BaseType.TIME, BaseType.TIMESTAMP)]
        if temporal and all(a == temporal[0] or a.base is BaseType.STRING for a in known):
            # ksqlDB reads string arguments as the temporal type (GREATEST(d1, d2, '2022-06-14'))
            return temporal[0]
        if any(a != known[0] for a in known):
            raise FunctionTypeError(_refused(name, arg_types))
        return known[0]
    return rule


_TEMPORAL = (BaseType.DATE, BaseType.TIME, BaseType.TIMESTAMP)


def _extremum_type(name: str) -> TypeRule:
    """GREATEST / LEAST as ksqlDB's overloads resolve them (one per type: INTEGER, BIGINT, DOUBLE,
    DECIMAL, STRING, BYTES, DATE, TIME, TIMESTAMP): arguments of one type take its overload;
    numerics of several types widen only when one overload alone takes them all, which is DOUBLE
    (INTEGER with BIGINT fits the BIGINT, DECIMAL and DOUBLE ones: ambiguous, as are all NULLs);
    a temporal type takes STRING arguments (read as that type)."""
    def rule(arg_types: Sequence[SqlType | None]) -> SqlType:
        known = [a for a in arg_types if a is not None]
        bases = {a.base for a in known}
        if not known or (bases <= set(NUMERIC_ORDER) and len(bases) > 1 and BaseType.DOUBLE not in bases):
            raise FunctionTypeError(f"Function '{registered_name(name)}' cannot be resolved due to ambiguous "
                                    f"method parameters ({_type_list(arg_types)}).")
        if bases <= set(NUMERIC_ORDER):
            if len(bases) > 1:
                return t.DOUBLE
            out: SqlType | None = None
            for a in known:
                out = wider_numeric(out, a)
            return out or t.INTEGER
        temporal = [a for a in known if a.base in _TEMPORAL]
        if temporal and all(a == temporal[0] or a.base is BaseType.STRING for a in known):
            return temporal[0]
        if len(bases) > 1:
            raise FunctionTypeError(_refused(name, arg_types))
        return known[0]
    return rule


def _extremum(name: str, spark_name: str) -> SparkRule:
    """Spark's ``greatest``/``least`` over the arguments as the chosen overload's type (Spark
    does not read a string as a date)."""
    def rule(c: CallSite) -> str:
        try:
            result = _extremum_type(name)(c.types)
        except FunctionTypeError:      # a call the analyzer refuses: nothing to convert
            return f"{spark_name}({', '.join(c.args)})"
        args = []
        for sql, ty in zip(c.args, c.types, strict=True):
            if ty == result:
                args.append(sql)
            elif result.base is BaseType.TIME:
                # the frame's TIME is its milliseconds of the day
                args.append(f"CAST(unix_millis(CAST(concat('1970-01-01 ', {sql}) AS TIMESTAMP)) AS INT)")
            else:
                args.append(f"CAST({sql} AS {spark_type_name(result)})")
        return f"{spark_name}({', '.join(args)})"
    return rule


def _element(arg_types: Sequence[SqlType | None]) -> SqlType:
    a = arg_types[0]
    return a.element if a is not None and a.element is not None else t.STRING


# ----------------------------------------------------------------------------------------------
# Spark SQL builders


def _call(spark_name: str) -> SparkRule:
    return lambda c: f"{spark_name}({', '.join(c.args)})"


def _null_if_null(expr: Callable[[CallSite], str]) -> SparkRule:
    """Spark returns a value (-1, '') where ksqlDB returns NULL for a NULL first argument."""
    return lambda c: f"CASE WHEN {c.args[0]} IS NULL THEN NULL ELSE {expr(c)} END"


def _cast(inner: SparkRule, spark_type: str) -> SparkRule:
    return lambda c: f"CAST({inner(c)} AS {spark_type})"


def _same_type_cast(inner: SparkRule) -> SparkRule:
    """Keep ksqlDB's result type where Spark widens (SUM(INT) is INT in ksqlDB, BIGINT in Spark)."""
    def rule(c: CallSite) -> str:
        ty = c.types[0] if c.types else None
        return inner(c) if ty is None else f"CAST({inner(c)} AS {spark_type_name(ty)})"
    return rule


def _round(c: CallSite) -> str:
    """ksqlDB rounds ties towards positive infinity (``Math.round``; on BigDecimal HALF_UP above
    zero, HALF_DOWN below): ROUND(-1.5) is -1 where Spark's HALF_UP gives -2. A negative value
    that lies halfway between its floor and ceiling (at ``n`` places) is sent to the ceiling;
    every other value rounds as Spark does. On a DOUBLE Spark's floor/ceil/round at ``n`` places
    all work on the value's shortest decimal form, as ksqlDB's ``BigDecimal.valueOf`` does."""
    ty = c.types[0] if c.types else None
    x = c.args[0]
    places = f", {c.args[1]}" if len(c.args) > 1 else ""
    if ty is not None and ty.base in (BaseType.INTEGER, BaseType.BIGINT):
        return f"round({x}{places})"  # no fraction, no tie (a negative n rounds as Spark does)
    ceiling = f"ceil({x}{places})"
    rounded = (f"CASE WHEN {x} < 0 AND floor({x}{places}) + {ceiling} = 2 * {x} "
               f"THEN {ceiling} ELSE round({x}{places}) END")
    if ty is not None and ty.base is BaseType.DOUBLE:
        return f"CAST({rounded} AS {'DOUBLE' if places else 'BIGINT'})"
    return rounded


def _ceil_floor(spark_name: str) -> SparkRule:
    def rule(c: CallSite) -> str:
        ty = c.types[0] if c.types else None
        if ty is not None and ty.base is BaseType.DOUBLE:
            return f"CAST({spark_name}({c.args[0]}) AS DOUBLE)"
        if ty is not None and ty.base in (BaseType.INTEGER, BaseType.BIGINT):
            return c.args[0]
        return f"{spark_name}({c.args[0]})"
    return rule


def _tz_wrap(ts_sql: str, c: CallSite, index: int) -> str:
    # Spark renders timestamps in the session time zone (the runtime sets it to UTC, ksqlDB's
    # default); an explicit zone shifts the instant into that zone's wall clock first.
    return f"from_utc_timestamp({ts_sql}, {c.args[index]})" if len(c.args) > index else ts_sql


def _zone_pattern(c: CallSite, millis_sql: str) -> str:
    # zone letters print the named zone's name and offset, not the session's (zone_text explains)
    if len(c.args) > 2 and zone_text.needs_zone_pattern(c.args[1]):
        return f"{zone_text.ZONE_PATTERN_UDF}({c.args[1]}, {c.args[2]}, {millis_sql})"
    return c.args[1]


def _timestamptostring(c: CallSite) -> str:
    return (f"date_format({_tz_wrap(f'timestamp_millis({c.args[0]})', c, 2)}, "
            f"{_zone_pattern(c, f'CAST({c.args[0]} AS BIGINT)')})")


def _format_timestamp(c: CallSite) -> str:
    return f"date_format({_tz_wrap(c.args[0], c, 2)}, {_zone_pattern(c, f'unix_millis({c.args[0]})')})"


def _parse_ts(c: CallSite) -> str:
    ts = f"to_timestamp({c.args[0]}, {c.args[1]})"
    return f"to_utc_timestamp({ts}, {c.args[2]})" if len(c.args) > 2 else ts


def _stringtotimestamp(c: CallSite) -> str:
    return f"unix_millis({_parse_ts(c)})"


def _unix_timestamp(c: CallSite) -> str:
    return f"unix_millis({c.args[0]})" if c.args else "unix_millis(current_timestamp())"


# Java's regex that matches between every two characters (Pattern.compile("").split gives no
# leading or trailing empty string; Spark's split on '' adds a trailing one)
_BETWEEN_CHARACTERS = java_text.spark_string(r"(?!\z)")


def _split_type(arg_types: Sequence[SqlType | None]) -> SqlType:
    if len(arg_types) == 2 and all(is_string(a) for a in arg_types):
        return t.array_of(S)
    if len(arg_types) == 2 and all(_bytes_or_null(a) for a in arg_types):
        return t.array_of(t.BYTES)
    raise FunctionTypeError(_refused("SPLIT", arg_types))


def _bytes_or_null(ty: SqlType | None) -> bool:
    return ty is None or ty.base is BaseType.BYTES


def _split_strings(s: str, delimiter: str) -> str:
    return (f"split({s}, CASE WHEN {delimiter} = '' THEN {_BETWEEN_CHARACTERS} "
            f"ELSE {java_text.pattern_quote_sql(delimiter)} END, -1)")


def _split(c: CallSite) -> str:
    """ksqlDB splits on the literal delimiter (Guava's Splitter), an empty one between characters;
    Spark's split takes a regex: the delimiter is quoted as Pattern.quote does. BYTES are split
    as ISO-8859-1 text (one character a byte, so the pieces encode back to the same bytes)."""
    if not any(ty is not None and ty.base is BaseType.BYTES for ty in c.types):
        return _split_strings(c.args[0], c.args[1])
    text, delimiter = (f"decode({a}, 'ISO-8859-1')" for a in c.args)
    return f"transform({_split_strings(text, delimiter)}, __os_p -> encode(__os_p, 'ISO-8859-1'))"


def _chr_type(arg_types: Sequence[SqlType | None]) -> SqlType:
    if len(arg_types) != 1 or not (is_string(arg_types[0]) or (arg_types[0] is not None and
                                                                arg_types[0].base is BaseType.INTEGER)):
        raise FunctionTypeError(_refused("CHR", arg_types))
    return S


# a '\\u' escape (after an even run of backslashes) without four hex digits: unescapeJava throws
_BAD_UNICODE_ESCAPE = java_text.spark_string(r"(^|[^\\])(?:\\\\)*+\\u++\+?+(?![0-9a-fA-F]{4})")
_UNICODE_ESCAPE = java_text.spark_string("\\u")
_MAX_CODE_POINT = 0x10FFFF


def _chr(c: CallSite) -> str:
    """ksqlDB's Chr: of an INTEGER, Character.toChars (NULL outside the code points; Spark's chr
    takes the value mod 256); of a STRING starting with a '\\u' escape, commons-lang3's
    unescapeJava (NULL where it would fail). Both are the very Java methods, called by reflect."""
    x = c.args[0]
    if c.types and c.types[0] is not None and c.types[0].base is BaseType.INTEGER:
        return f"CASE WHEN {x} BETWEEN 0 AND {_MAX_CODE_POINT} THEN reflect('java.lang.Character', 'toString', {x}) END"
    return (f"CASE WHEN char_length({x}) >= 6 AND startswith({x}, {_UNICODE_ESCAPE}) "
            f"AND NOT {x} RLIKE {_BAD_UNICODE_ESCAPE} "
            f"THEN reflect('org.apache.commons.lang3.StringEscapeUtils', 'unescapeJava', {x}) END")


def _regexp_extract(c: CallSite) -> str:
    # ksqlDB: REGEXP_EXTRACT(pattern, string [, group]) and NULL when nothing matches (Spark: '').
    group = c.args[2] if len(c.args) > 2 else "0"
    return f"CASE WHEN {c.args[1]} RLIKE {c.args[0]} THEN regexp_extract({c.args[1]}, {c.args[0]}, {group}) END"


def _field(c: CallSite) -> str:
    # ksqlDB FIELD(s, a, b, ...): 1-based position of s among the rest, 0 if absent or s is NULL.
    return f"coalesce(array_position(array({', '.join(c.args[1:])}), {c.args[0]}), 0)"


def _array_join(c: CallSite) -> str:
    """ksqlDB's ArrayJoin: each element's toString, a NULL element written 'null', a NULL
    delimiter read as ''."""
    delim = f"coalesce({c.args[1]}, '')" if len(c.args) > 1 else "','"
    return f"array_join(transform({c.args[0]}, __os_e -> CAST(__os_e AS STRING)), {delim}, 'null')"


def _array_sort(c: CallSite) -> str:
    """ksqlDB's ArraySort: NULLs last in either direction ('ASC'/'ASCENDING', 'DESC'/'DESCENDING';
    another direction or NULL gives NULL). Spark's array_sort puts NULLs last ascending, its
    sort_array last descending."""
    if len(c.args) == 1:
        return f"array_sort({c.args[0]})"
    direction = f"upper({c.args[1]})"
    return (f"CASE WHEN {direction} IN ('ASC', 'ASCENDING') THEN array_sort({c.args[0]}) "
            f"WHEN {direction} IN ('DESC', 'DESCENDING') THEN sort_array({c.args[0]}, false) END")


def _by_offset(latest: bool) -> SparkRule:
    """LATEST_BY_OFFSET / EARLIEST_BY_OFFSET (x [, ignoreNulls]) and (x, n [, ignoreNulls])."""
    def rule(c: CallSite) -> str:
        order = c.order_sql or "ROWOFFSET"
        x = c.args[0]
        with_n = len(c.args) >= 2 and not _is_boolean(c, 1)
        ignore_nulls_arg = c.args[2] if with_n and len(c.args) > 2 else (c.args[1] if not with_n and len(c.args) > 1 else "true")
        ignore_nulls = ignore_nulls_arg.strip().lower() != "false"
        if not with_n:
            if not ignore_nulls:
                return f"{'max_by' if latest else 'min_by'}({x}, {order})"
            # ksqlDB ignores NULL values by default: a NULL ordering key makes max_by/min_by skip the row
            return f"{'max_by' if latest else 'min_by'}({x}, CASE WHEN {x} IS NOT NULL THEN {order} END)"
        entry = f"struct({order} AS o, {x} AS v)"
        collected = f"collect_list(CASE WHEN {x} IS NOT NULL THEN {entry} END)" if ignore_nulls else f"collect_list({entry})"
        # the n latest (or earliest), returned oldest first as ksqlDB does
        picked = f"slice(sort_array({collected}, {'false' if latest else 'true'}), 1, {c.args[1]})"
        values = f"transform({picked}, e -> e.v)"
        return f"reverse({values})" if latest else values
    return rule


def _is_boolean(c: CallSite, index: int) -> bool:
    ty = c.types[index] if len(c.types) > index else None
    if ty is not None:
        return ty.base is BaseType.BOOLEAN
    return c.args[index].strip().lower() in ("true", "false")


def _by_offset_type(name: str) -> TypeRule:
    def rule(arg_types: Sequence[SqlType | None]) -> SqlType:
        n = len(arg_types)
        x = arg_types[0] if arg_types else None
        def boolean(a: SqlType | None) -> bool:
            return a is None or a.base is BaseType.BOOLEAN

        if n == 1 or (n == 2 and boolean(arg_types[1]) and arg_types[1] is not None):
            return x or INT
        if n in (2, 3) and is_integral(arg_types[1]) and (n == 2 or boolean(arg_types[2])):
            return t.array_of(x or INT)
        raise FunctionTypeError(_refused(name, arg_types))
    return rule


def _stddev(root: bool) -> SparkRule:
    """ksqlDB's StandardDeviationSamp/SampleUdaf: the Youngs-Cramer accumulator STRUCT<SUM (the
    argument's type, wrapping as Java's int/long), COUNT, M2> folded over the values in arrival
    order, so every result is ksqlDB's to the last bit (Spark's stddev_samp updates its moments in
    another order, and is NULL below two values where ksqlDB gives 0.0). The fold needs the
    group's values (collect_list), which the aggregation state keeps."""
    def rule(c: CallSite) -> str:
        ty = c.types[0] if c.types else None
        base = ty.base if ty is not None else BaseType.DOUBLE
        sum_type = {BaseType.INTEGER: "INT", BaseType.BIGINT: "BIGINT"}.get(base, "DOUBLE")
        x = c.args[0] if sum_type != "DOUBLE" else f"CAST({c.args[0]} AS DOUBLE)"
        delta = "(__os_v * (__os_a.n + 1) - (__os_a.s + __os_v))"
        step = (f"(__os_a, __os_v) -> named_struct('s', CAST(__os_a.s + __os_v AS {sum_type}), 'n', __os_a.n + 1, "
                f"'m2', __os_a.m2 + CASE WHEN __os_a.n > 0 THEN CAST({delta} AS DOUBLE) * CAST({delta} AS DOUBLE) "
                f"/ ((__os_a.n + 1) * __os_a.n) ELSE CAST(0 AS DOUBLE) END)")
        variance = "CASE WHEN __os_a.n < 2 THEN CAST(0 AS DOUBLE) ELSE __os_a.m2 / (__os_a.n - 1) END"
        finish = f"__os_a -> {f'sqrt({variance})' if root else variance}"
        zero = f"named_struct('s', CAST(0 AS {sum_type}), 'n', CAST(0 AS BIGINT), 'm2', CAST(0 AS DOUBLE))"
        return f"aggregate(collect_list({x}), {zero}, {step}, {finish})"
    return rule


def _correlation(c: CallSite) -> str:
    """ksqlDB's CorrelationUdaf: sums of x, y, x², y², xy over the pairs without a NULL, then
    (n·Σxy - ΣxΣy) / sqrt((n·Σx² - (Σx)²)(n·Σy² - (Σy)²)) with Java's double division (x/0 is
    NaN or ±Infinity, where Spark's corr is NULL; Spark's NaN is unequal to 0)."""
    both = f"{c.args[0]} IS NOT NULL AND {c.args[1]} IS NOT NULL"
    x, y = (f"CAST({a} AS DOUBLE)" for a in c.args)

    def total(term: str) -> str:
        return f"coalesce(sum(CASE WHEN {both} THEN {term} END), CAST(0 AS DOUBLE))"

    n = f"count(CASE WHEN {both} THEN 1 END)"
    sx, sy = total(x), total(y)
    numerator = f"({n} * {total(f'{x} * {y}')} - {sx} * {sy})"
    denominator = (f"sqrt(({n} * {total(f'{x} * {x}')} - {sx} * {sx}) * "
                   f"({n} * {total(f'{y} * {y}')} - {sy} * {sy}))")
    return (f"CASE WHEN {denominator} <> 0 THEN {numerator} / {denominator} "
            f"WHEN {numerator} > 0 THEN CAST('Infinity' AS DOUBLE) WHEN {numerator} < 0 THEN CAST('-Infinity' AS DOUBLE) "
            f"ELSE CAST('NaN' AS DOUBLE) END")


def _topk(distinct: bool) -> SparkRule:
    def rule(c: CallSite) -> str:
        if not distinct and len(c.args) > 2:
            return _topk_with_columns(c)
        coll = "collect_set" if distinct else "collect_list"
        return f"slice(sort_array({coll}({c.args[0]}), false), 1, {c.args[1]})"
    return rule


# TOPK(sort_col, other columns..., k): ksqlDB's TopkKudaf keeps STRUCT<sort_col, col0, col1...>
# entries for the k largest sort values. Its list is sorted stably after each insert and an equal
# value never displaces a kept one, so among equal sort values the earlier record comes first:
# the same as ordering every non-NULL entry by (sort value descending, arrival ascending).
_TOPK_SORT_FIELD = "sort_col"


def _topk_fields(arg_types: Sequence[SqlType | None]) -> list[tuple[str, SqlType]]:
    values = list(arg_types[:-1])
    return [(_TOPK_SORT_FIELD if i == 0 else f"col{i - 1}", ty or S) for i, ty in enumerate(values)]


def _topk_type(arg_types: Sequence[SqlType | None]) -> SqlType:
    """TOPK(x, k) is ARRAY<x's type>; TOPK(x, others..., k) ARRAY<STRUCT<sort_col, col0...>>,
    whose sort column must be INTEGER, BIGINT, DOUBLE or STRING (TopkKudaf's factories)."""
    if len(arg_types) == 2:
        x = arg_types[0]
        if (x is None or x.base not in (BaseType.ARRAY, BaseType.MAP)) and is_integral(arg_types[1]):
            return t.array_of(x or INT)
        raise FunctionTypeError(_refused("TOPK", arg_types))
    sortable = (BaseType.INTEGER, BaseType.BIGINT, BaseType.DOUBLE, BaseType.STRING)
    x = arg_types[0]
    if x is None or x.base not in sortable or not is_integral(arg_types[-1]) or arg_types[-1] is None:
        raise FunctionTypeError(_refused("TOPK", arg_types))
    return t.array_of(t.struct_of(*_topk_fields(arg_types)))


def _topk_with_columns(c: CallSite) -> str:
    x, k = c.args[0], c.args[-1]
    names = [name for name, _ in _topk_fields(list(c.types) if c.types else [None] * len(c.args))]
    entry = ", ".join(f"'{name}', {arg}" for name, arg in zip(names, c.args[:-1]))
    order = c.order_sql or "ROWOFFSET"
    collected = (f"collect_list(CASE WHEN {x} IS NOT NULL THEN "
                 f"named_struct('v', {x}, 'o', {order}, 'e', named_struct({entry})) END)")
    compare = ("(__os_l, __os_r) -> CASE WHEN __os_l.v > __os_r.v THEN -1 WHEN __os_l.v < __os_r.v THEN 1 "
               "WHEN __os_l.o < __os_r.o THEN -1 WHEN __os_l.o > __os_r.o THEN 1 ELSE 0 END")
    return f"transform(slice(array_sort({collected}, {compare}), 1, {k}), __os_t -> __os_t.e)"
S, INT, B, D = t.STRING, t.INTEGER, t.BIGINT, t.DOUBLE

# strings
_section("STRING")
_add("UCASE", 1, 1, _sig("UCASE", is_string, result=S), _call("upper"), "Upper-case a string.", "upper(s)")
_add("LCASE", 1, 1, _sig("LCASE", is_string, result=S), _call("lower"), "Lower-case a string.", "lower(s)")
_add("CONCAT", 1, None, _all(is_string, "CONCAT", lambda _: S), lambda c: f"concat_ws('', {', '.join(c.args)})",
     "Concatenate strings; NULL arguments count as empty strings.", "concat_ws('', a, b, ...)")
_add("CONCAT_WS", 2, None, _all(is_string, "CONCAT_WS", lambda _: S), _call("concat_ws"),
     "Concatenate with a separator, skipping NULLs.", "concat_ws(sep, a, ...)")
_add("SUBSTRING", 2, 3, _sig("SUBSTRING", is_string, is_integral, is_integral, result=S, optional_from=2), _call("substring"),
     "Substring from a 1-based position (negative: from the end), optional length.", "substring(s, pos[, len])")
_add("LEN", 1, 1, _sig("LEN", is_string, result=INT), _call("char_length"), "Length in characters.", "char_length(s)")
# Java's String.trim, as ksqlDB's TRIM: every character up to U+0020 (tabs, CR, LF, controls) at
# either end, where Spark's trim drops only spaces. \z: Java's $ also matches before a final
# line terminator (U+2028 too), which String.trim keeps.
_add("TRIM", 1, 1, _sig("TRIM", is_string, result=S),
     lambda c: f"regexp_replace({c.args[0]}, '^[\\\\x00-\\\\x20]+|[\\\\x00-\\\\x20]+\\\\z', '')",
     "Remove leading and trailing characters up to U+0020 (Java's String.trim).",
     "regexp_replace(s, '^[\\x00-\\x20]+|[\\x00-\\x20]+\\z', '')")
_add("LTRIM", 1, 1, _sig("LTRIM", is_string, result=S), _call("ltrim"), "Remove leading spaces.", "ltrim(s)")
_add("RTRIM", 1, 1, _sig("RTRIM", is_string, result=S), _call("rtrim"), "Remove trailing spaces.", "rtrim(s)")
_add("REPLACE", 3, 3, _sig("REPLACE", is_string, is_string, is_string, result=S), _call("replace"),
     "Replace every occurrence of a substring.", "replace(s, old, new)")
_add("SPLIT", 2, 2, _split_type, _split,
     "Split a string (or BYTES) on a literal delimiter into an array; an empty delimiter splits every character.",
     "split(s, Pattern.quote(delimiter), -1)")
_add("INSTR", 2, 2, _sig("INSTR", is_string, is_string, result=INT), _call("instr"),
     "1-based position of a substring, 0 if absent.", "instr(s, sub)")
_add("LPAD", 3, 3, _sig("LPAD", is_string, is_integral, is_string, result=S), _call("lpad"),
     "Left-pad to a length.", "lpad(s, n, pad)")
_add("RPAD", 3, 3, _sig("RPAD", is_string, is_integral, is_string, result=S), _call("rpad"),
     "Right-pad to a length.", "rpad(s, n, pad)")
_add("INITCAP", 1, 1, _sig("INITCAP", is_string, result=S), _call("initcap"), "Capitalise each word.", "initcap(s)")
_add("REGEXP_EXTRACT", 2, 3, _sig("REGEXP_EXTRACT", is_string, is_string, is_integral, result=S, optional_from=2),
     _regexp_extract,
     "First match of a regex (or of a group), NULL if none.", "CASE WHEN s RLIKE p THEN regexp_extract(s, p, g) END")
_add("REGEXP_REPLACE", 3, 3, _sig("REGEXP_REPLACE", is_string, is_string, is_string, result=S), _call("regexp_replace"),
     "Replace every regex match.", "regexp_replace(s, p, r)")
_add("MASK", 1, 1, _sig("MASK", is_string, result=S), lambda c: f"mask({c.args[0]}, 'X', 'x', 'n', '-')",
     "Mask letters (X/x), digits (n) and other characters (-).", "mask(s, 'X', 'x', 'n', '-')")
_add("MD5", 1, 1, _sig("MD5", is_string, result=S), _call("md5"), "Hex MD5 digest of the UTF-8 string.", "md5(s)")
_add("CHR", 1, 1, _chr_type, _chr,
     "The character of a code point, or of a '\\uXXXX' escape (a surrogate pair makes one character); NULL when invalid.",
     "reflect: Character.toString(n) / StringEscapeUtils.unescapeJava(s)")
_add("REGEXP_EXTRACT_ALL", 2, 3,
     _sig("REGEXP_EXTRACT_ALL", is_string, is_string, is_integral, result=t.array_of(S), optional_from=2),
     lambda c: f"regexp_extract_all({c.args[1]}, {c.args[0]}, {c.args[2] if len(c.args) > 2 else '0'})",
     "Every match of a regex (or of a group).", "regexp_extract_all(s, p, g)")
_add("REGEXP_SPLIT_TO_ARRAY", 2, 2, _sig("REGEXP_SPLIT_TO_ARRAY", is_string, is_string, result=t.array_of(S)),
     lambda c: f"split({c.args[0]}, {c.args[1]}, -1)", "Split on a regex.", "split(s, regex, -1)")

# math
_section("MATHEMATICAL")
_add("ABS", 1, 1, _same_as_first("ABS", is_numeric), _call("abs"), "Absolute value.", "abs(x)")
_add("CEIL", 1, 1, _same_as_first("CEIL", is_numeric), _ceil_floor("ceil"), "Round up.", "ceil(x) (cast back to the input type)")
_add("FLOOR", 1, 1, _same_as_first("FLOOR", is_numeric), _ceil_floor("floor"),
     "Round down.", "floor(x) (cast back to the input type)")


def _round_type(arg_types: Sequence[SqlType | None]) -> SqlType:
    if not (1 <= len(arg_types) <= 2) or not is_numeric(arg_types[0]) or (len(arg_types) == 2 and not is_integral(arg_types[1])):
        raise FunctionTypeError(_refused("ROUND", arg_types))
    a = arg_types[0] or D
    if a.base is BaseType.DOUBLE:
        return D if len(arg_types) == 2 else B
    if a.base is BaseType.DECIMAL and len(arg_types) == 1:
        return t.decimal(min(38, (a.precision or 0) - (a.scale or 0) + 1), 0)
    return a


_add("ROUND", 1, 2, _round_type, _round, "Round to n decimal places, ties towards positive infinity.",
     "round(x[, n]), negative ties sent to ceil(x[, n])")
_add("SQRT", 1, 1, _sig("SQRT", is_numeric, result=D), _call("sqrt"), "Square root.", "sqrt(x)")
def _java_math(method: str, x: str) -> str:
    """java.lang.Math.<method>(x) as ksqlDB's UDFs call it, for a non-null ``x``: Spark's own
    ``exp``/``ln`` use StrictMath (``EXP(1)`` differs in the last digit) and answer NULL where Java
    answers NaN or -Infinity (``LN(-1)``, ``LN(0)``). ``reflect`` answers the value as a string."""
    return f"CAST(reflect('java.lang.Math', '{method}', CAST({x} AS DOUBLE)) AS DOUBLE)"


def _java_math_of(method: str) -> SparkRule:
    # reflect() fails on a null argument (it cannot pass null as a double): NULL in, NULL out
    return lambda c: f"CASE WHEN {c.args[0]} IS NULL THEN NULL ELSE {_java_math(method, c.args[0])} END"


def _log(c: CallSite) -> str:
    if len(c.args) == 1:
        return _java_math_of("log")(c)
    base, x = c.args
    # ksqlDB's Log UDF: NaN for a base <= 0 or 1, else Math.log(x) / Math.log(base)
    return (f"CASE WHEN {base} IS NULL OR {x} IS NULL THEN NULL"
            f" WHEN {base} <= 0 OR {base} = 1 THEN CAST('NaN' AS DOUBLE)"
            f" ELSE {_java_math('log', x)} / {_java_math('log', base)} END")


_add("EXP", 1, 1, _sig("EXP", is_numeric, result=D), _java_math_of("exp"), "e to the power x (java.lang.Math.exp).",
     "reflect('java.lang.Math', 'exp', x)")
_add("LN", 1, 1, _sig("LN", is_numeric, result=D), _java_math_of("log"),
     "Natural logarithm (NaN below 0, -Infinity at 0).", "reflect('java.lang.Math', 'log', x)")
_add("POWER", 2, 2, _sig("POWER", is_numeric, is_numeric, result=D), _call("power"), "x to the power y.", "power(x, y)")
_add("SIGN", 1, 1, _sig("SIGN", is_numeric, result=INT), _cast(_call("sign"), "INT"), "-1, 0 or 1.", "CAST(sign(x) AS INT)")
_add("RANDOM", 0, 0, _sig("RANDOM", result=D), lambda c: "rand()", "A random DOUBLE in [0, 1).", "rand()")
_add("GREATEST", 1, None, _extremum_type("GREATEST"), _extremum("GREATEST", "greatest"),
     "The largest argument, NULLs ignored.", "greatest(a, ...)")
_add("LEAST", 1, None, _extremum_type("LEAST"), _extremum("LEAST", "least"), "The smallest argument, NULLs ignored.",
     "least(a, ...)")
for _trig in ("ACOS", "ASIN", "ATAN", "COS", "COSH", "COT", "SIN", "SINH", "TAN", "TANH", "DEGREES", "RADIANS", "CBRT"):
    _add(_trig, 1, 1, _sig(_trig, is_numeric, result=D), _call(_trig.lower()), f"{_trig.capitalize()} of x, as DOUBLE.",
         f"{_trig.lower()}(x)")
_add("ATAN2", 2, 2, _sig("ATAN2", is_numeric, is_numeric, result=D), _call("atan2"), "Arc tangent of y/x.", "atan2(y, x)")
_add("PI", 0, 0, _sig("PI", result=D), lambda c: "pi()", "The constant pi.", "pi()")
_add("LOG", 1, 2, _sig("LOG", is_numeric, is_numeric, result=D, optional_from=1), _log,
     "Natural logarithm, or LOG(base, x) (NaN for a base <= 0 or 1).", "Math.log via reflect: log(x) / log(base)")

# date and time (BIGINT epoch milliseconds or TIMESTAMP)
_section("DATE / TIME")
_add("UNIX_TIMESTAMP", 0, 1, _sig("UNIX_TIMESTAMP", is_timestamp, result=B, optional_from=0),
     _unix_timestamp, "Epoch milliseconds now, or of a TIMESTAMP.", "unix_millis(current_timestamp()) / unix_millis(ts)")
_add("TIMESTAMPTOSTRING", 2, 3, _sig("TIMESTAMPTOSTRING", is_integral, is_string, is_string, result=S, optional_from=2),
     _timestamptostring,
     "Format epoch milliseconds with a pattern (optional time zone).", "date_format(timestamp_millis(ms), fmt)")
_add("STRINGTOTIMESTAMP", 2, 3, _sig("STRINGTOTIMESTAMP", is_string, is_string, is_string, result=B, optional_from=2),
     _stringtotimestamp,
     "Parse a string into epoch milliseconds.", "unix_millis(to_timestamp(s, fmt))")
_add("FORMAT_TIMESTAMP", 2, 3,
     _sig("FORMAT_TIMESTAMP", is_timestamp, is_string, is_string, result=S, optional_from=2),
     _format_timestamp, "Format a TIMESTAMP with a pattern.", "date_format(ts, fmt)")
_add("PARSE_TIMESTAMP", 2, 3, _sig("PARSE_TIMESTAMP", is_string, is_string, is_string, result=t.TIMESTAMP, optional_from=2),
     _parse_ts,
     "Parse a string into a TIMESTAMP.", "to_timestamp(s, fmt)")
_add("FROM_UNIXTIME", 1, 1, _sig("FROM_UNIXTIME", is_integral, result=t.TIMESTAMP), _call("timestamp_millis"),
     "Epoch milliseconds to TIMESTAMP.", "timestamp_millis(ms)")
_add("FORMAT_DATE", 2, 2, _sig("FORMAT_DATE", is_date, is_string, result=S), _call("date_format"),
     "Format a DATE with a pattern.", "date_format(d, fmt)")
_add("PARSE_DATE", 2, 2, _sig("PARSE_DATE", is_string, is_string, result=t.DATE), _call("to_date"),
     "Parse a string into a DATE.", "to_date(s, fmt)")
_add("FROM_DAYS", 1, 1, _sig("FROM_DAYS", is_integral, result=t.DATE), _call("date_from_unix_date"),
     "Days since the epoch to DATE.", "date_from_unix_date(n)")
_add("UNIX_DATE", 0, 1, _sig("UNIX_DATE", is_date, result=INT, optional_from=0),
     lambda c: f"unix_date({c.args[0]})" if c.args else "unix_date(current_date())",
     "Days since the epoch, today or of a DATE.", "unix_date(d)")
_add("DATETOSTRING", 2, 2, _sig("DATETOSTRING", is_integral, is_string, result=S),
     lambda c: f"date_format(date_from_unix_date({c.args[0]}), {c.args[1]})",
     "Format days since the epoch with a pattern.", "date_format(date_from_unix_date(n), fmt)")
_add("STRINGTODATE", 2, 2, _sig("STRINGTODATE", is_string, is_string, result=INT),
     lambda c: f"unix_date(to_date({c.args[0]}, {c.args[1]}))",
     "Parse a string into days since the epoch.", "unix_date(to_date(s, fmt))")

# nulls
_section("CONDITIONAL")
_add("IFNULL", 2, 2, _common_type("IFNULL"), _call("coalesce"),
     "The first argument unless NULL, else the second.", "coalesce(a, b)")
_add("COALESCE", 1, None, _common_type("COALESCE"), _call("coalesce"), "The first non-NULL argument.", "coalesce(a, ...)")


def _nullif_type(arg_types: Sequence[SqlType | None]) -> SqlType:
    if len(arg_types) != 2:
        raise FunctionTypeError(_refused("NULLIF", arg_types))
    return _first_non_null(arg_types)


_add("NULLIF", 2, 2, _nullif_type, _call("nullif"), "NULL when both arguments are equal, else the first.", "nullif(a, b)")
_add("AS_VALUE", 1, 1, _sig("AS_VALUE", _any, result=_first_non_null), lambda c: c.args[0],
     "Copy a key column into the value.", "the argument itself")

# collections
_section("ARRAY")
_add("ARRAY_LENGTH", 1, 1, _sig("ARRAY_LENGTH", is_array, result=INT), _null_if_null(lambda c: f"size({c.args[0]})"),
     "Number of elements, NULL for NULL.", "size(a) (NULL for NULL)")
_add("ARRAY_CONTAINS", 2, 2, _sig("ARRAY_CONTAINS", is_array, _any, result=t.BOOLEAN), _call("array_contains"),
     "Whether the array holds the value.", "array_contains(a, v)")
_add("ARRAY_DISTINCT", 1, 1, _sig("ARRAY_DISTINCT", is_array, result=_first_non_null), array_sets.array_distinct,
     "The distinct elements, first occurrence order.", "array_distinct(a)")
_add("ARRAY_MAX", 1, 1, _sig("ARRAY_MAX", is_array, result=_element), _call("array_max"), "The largest element.", "array_max(a)")
_add("ARRAY_MIN", 1, 1, _sig("ARRAY_MIN", is_array, result=_element), _call("array_min"), "The smallest element.", "array_min(a)")
_add("ARRAY_SORT", 1, 2, _sig("ARRAY_SORT", is_array, is_string, result=_first_non_null, optional_from=1), _array_sort,
     "Sort ascending (or 'DESC'), NULLs last.", "array_sort(a) / sort_array(a, false)")
_add("ARRAY_REMOVE", 2, 2, _sig("ARRAY_REMOVE", is_array, _any, result=_first_non_null), array_sets.array_remove,
     "Remove every element equal to the value.", "array_remove(a, v)")
_add("ARRAY_UNION", 2, 2, _sig("ARRAY_UNION", is_array, is_array, result=_first_non_null), array_sets.array_union,
     "Distinct elements of both.", "array_union(a, b)")
_add("ARRAY_INTERSECT", 2, 2, _sig("ARRAY_INTERSECT", is_array, is_array, result=_first_non_null), array_sets.array_intersect,
     "Distinct elements in both.", "array_intersect(a, b)")
_add("ARRAY_EXCEPT", 2, 2, _sig("ARRAY_EXCEPT", is_array, is_array, result=_first_non_null), array_sets.array_except,
     "Distinct elements of a not in b.", "array_except(a, b)")
_add("ARRAY_JOIN", 1, 2, _sig("ARRAY_JOIN", is_array, is_string, result=S, optional_from=1), _array_join,
     "Join elements into a string (default delimiter ',').", "array_join(a, delim)")
_add("ARRAY_CONCAT", 2, 2, _sig("ARRAY_CONCAT", is_array, is_array, result=_first_non_null),
     lambda c: f"CASE WHEN {c.args[0]} IS NULL THEN {c.args[1]} WHEN {c.args[1]} IS NULL THEN {c.args[0]} "
               f"ELSE concat({c.args[0]}, {c.args[1]}) END",
     "Concatenate two arrays; a NULL array counts as empty (NULL if both are).", "concat(a, b) (NULL-guarded)")
_add("SLICE", 3, 3, _sig("SLICE", is_array, is_integral, is_integral, result=_first_non_null),
     lambda c: f"slice({c.args[0]}, {c.args[1]}, {c.args[2]} - {c.args[1]} + 1)",
     "Elements from a 1-based position to another, inclusive.", "slice(a, from, to - from + 1)")
_add("AS_MAP", 2, 2, _sig("AS_MAP", is_array, is_array, result=lambda a: t.map_of(_element(a), _element(a[1:]))),
     lambda c: f"CASE WHEN {c.args[0]} IS NULL OR {c.args[1]} IS NULL THEN NULL ELSE map_from_arrays({c.args[0]}, "
               f"transform({c.args[0]}, (__os_x, __os_j) -> try_element_at({c.args[1]}, __os_j + 1))) END",
     "A map from an array of keys and an array of values (a key without a value maps to NULL, extra values "
     "are ignored, as ksqlDB's AsMap).", "map_from_arrays(k, values padded or cut to k's length)")
_section("MAP")
_add("MAP_KEYS", 1, 1, _sig("MAP_KEYS", is_map, result=lambda a: t.array_of(a[0].key if a[0] and a[0].key else S)),
     _call("map_keys"), "The keys of a map.", "map_keys(m)")
_add("MAP_VALUES", 1, 1, _sig("MAP_VALUES", is_map, result=lambda a: t.array_of(_element(a))),
     _call("map_values"), "The values of a map.", "map_values(m)")


def _elt_type(arg_types: Sequence[SqlType | None]) -> SqlType:
    if len(arg_types) < 2 or not is_integral(arg_types[0]) or not all(is_string(a) for a in arg_types[1:]):
        raise FunctionTypeError(_refused("ELT", arg_types))
    return S


_section("STRING")
_add("ELT", 2, None, _elt_type, _call("elt"),
     "The n-th (1-based) of the string arguments, NULL out of range.", "elt(n, a, ...)")
_add("FIELD", 2, None, _all(is_string, "FIELD", lambda _: INT), _field,
     "1-based position of the first argument among the others, 0 if absent.", "array_position(array(...), s)")
_section("JSON")
_add("EXTRACTJSONFIELD", 2, 2, _sig("EXTRACTJSONFIELD", is_string, is_string, result=S), _call("get_json_object"),
     "The JSON value at a JSONPath, as a string.", "get_json_object(json, path)")
_section("OTHER")
_add("UUID", 0, 0, _sig("UUID", result=S), lambda c: "uuid()", "A random UUID string.", "uuid()")

# aggregates
_section("AGGREGATE")


def _sum_type(arg_types: Sequence[SqlType | None]) -> SqlType:
    if len(arg_types) != 1 or not is_numeric(arg_types[0]):
        raise FunctionTypeError(_refused("SUM", arg_types))
    return arg_types[0] or INT


def _sum_list_type(arg_types: Sequence[SqlType | None]) -> SqlType:
    """ksqlDB's ListSumUdaf: ARRAY<INTEGER | BIGINT | DOUBLE> summed into the element type."""
    ty = arg_types[0] if len(arg_types) == 1 else None
    element = ty.element if ty is not None and ty.base is BaseType.ARRAY else None
    if element is None or element.base not in (BaseType.INTEGER, BaseType.BIGINT, BaseType.DOUBLE):
        raise FunctionTypeError(_refused("SUM_LIST", arg_types))
    return element


def _sum_list(c: CallSite) -> str:
    """Each list's non-NULL elements summed, then the lists of the group; 0 with none (the
    UDAF's initial value). Integers add in BIGINT and are cast back, which wraps as Java's int
    does: addition modulo 2^32 gives the same result in any order."""
    ty = c.types[0] if c.types else None
    element = ty.element if ty is not None and ty.element is not None else INT
    inner = "DOUBLE" if element.base is BaseType.DOUBLE else "BIGINT"
    per_list = (f"aggregate({c.args[0]}, CAST(0 AS {inner}), (__os_a, __os_e) -> "
                f"__os_a + coalesce(CAST(__os_e AS {inner}), CAST(0 AS {inner})))")
    return f"CAST(coalesce(sum({per_list}), CAST(0 AS {inner})) AS {spark_type_name(element)})"


def _comparable(name: str) -> TypeRule:
    def rule(arg_types: Sequence[SqlType | None]) -> SqlType:
        if len(arg_types) != 1 or (arg_types[0] is not None and arg_types[0].base in
                                   (BaseType.ARRAY, BaseType.MAP, BaseType.STRUCT, BaseType.BOOLEAN)):
            raise FunctionTypeError(_refused(name, arg_types))
        return arg_types[0] or INT
    return rule


def _count_spark(c: CallSite) -> str:
    return f"count({c.args[0] if c.args else '*'})"


_add("COUNT", 0, 1, lambda a: B, _count_spark, "Number of rows (COUNT(*)) or of non-NULL values.", "count(x) / count(*)",
     aggregate=True)
_add("SUM", 1, 1, _sum_type, _same_type_cast(_call("sum")), "Sum, in the argument's type.", "CAST(sum(x) AS <type of x>)",
     aggregate=True)
_add("SUM_LIST", 1, 1, _sum_list_type, _sum_list,
     "Sum of the elements of the group's lists (NULLs skipped), in the element type.",
     "CAST(coalesce(sum(aggregate(list, 0, (a, e) -> a + coalesce(e, 0))), 0) AS <element type>)", aggregate=True)
_add("MIN", 1, 1, _comparable("MIN"), _call("min"), "Smallest value.", "min(x)", aggregate=True)
_add("MAX", 1, 1, _comparable("MAX"), _call("max"), "Largest value.", "max(x)", aggregate=True)
_add("AVG", 1, 1, _sig("AVG", is_numeric, result=D), _cast(_call("avg"), "DOUBLE"),
     "Average as DOUBLE.", "CAST(avg(x) AS DOUBLE)",
     aggregate=True)
_add("COUNT_DISTINCT", 1, 1, _sig("COUNT_DISTINCT", _any, result=B), _call("approx_count_distinct"),
     "Approximate number of distinct values (HyperLogLog in both).", "approx_count_distinct(x)", aggregate=True)
_add("COLLECT_LIST", 1, 1, _sig("COLLECT_LIST", _any, result=lambda a: t.array_of(a[0] or S)),
     lambda c: array_sets.collect_all(c.args[0]),
     "Array of the values, NULLs included.", "collect_list of each value in a struct (Spark's drops NULLs)",
     aggregate=True)
_add("COLLECT_SET", 1, 1, _sig("COLLECT_SET", _any, result=lambda a: t.array_of(a[0] or S)), array_sets.collect_set,
     "Array of the distinct values (NULL among them), in first-seen order.",
     "array_distinct of collect_list(named_struct(x)) (MAPs compared by entries)", aggregate=True)
_add("LATEST_BY_OFFSET", 1, 3, _by_offset_type("LATEST_BY_OFFSET"), _by_offset(latest=True),
     "The latest value in offset order (NULLs ignored unless ignoreNulls is false); with n, the n latest as an ARRAY.",
     "max_by(x, <offset order>); n: slice(sort_array(collect_list(struct(order, x)), false), 1, n)", aggregate=True)
_add("EARLIEST_BY_OFFSET", 1, 3, _by_offset_type("EARLIEST_BY_OFFSET"), _by_offset(latest=False),
     "The earliest value in offset order (NULLs ignored unless ignoreNulls is false); with n, the n earliest as an ARRAY.",
     "min_by(x, <offset order>); n: slice(sort_array(collect_list(struct(order, x))), 1, n)", aggregate=True)
_add("TOPK", 2, None, _topk_type, _topk(False),
     "The k largest values, descending; TOPK(x, other columns..., k): STRUCTs of sort_col (x) and col0... "
     "(the other columns of those records), equal values in arrival order.",
     "slice(sort_array(collect_list(x), false), 1, k); with columns: array_sort by (x desc, arrival)", aggregate=True)
_add("TOPKDISTINCT", 2, 2, _sig("TOPKDISTINCT", lambda a: a is None or a.base not in (BaseType.ARRAY, BaseType.MAP),
                                is_integral, result=lambda a: t.array_of(a[0] or INT)), _topk(True),
     "The k largest distinct values, descending.", "slice(sort_array(collect_set(x), false), 1, k)", aggregate=True)
_add("STDDEV_SAMP", 1, 1, _sig("STDDEV_SAMP", is_numeric, result=D), _stddev(root=False),
     "The sample VARIANCE (as ksqlDB's StandardDeviationSampUdaf answers; 0.0 below two values).",
     "Youngs-Cramer fold of collect_list(x): M2 / (n - 1)", aggregate=True)
_add("STDDEV_SAMPLE", 1, 1, _sig("STDDEV_SAMPLE", is_numeric, result=D), _stddev(root=True),
     "Sample standard deviation (0.0 below two values).",
     "Youngs-Cramer fold of collect_list(x): sqrt(M2 / (n - 1))", aggregate=True)
_add("CORRELATION", 2, 2, _sig("CORRELATION", is_numeric, is_numeric, result=D), _correlation,
     "Pearson correlation of x and y by ksqlDB's single-pass formula (NaN for one pair or no variance).",
     "(n*sum(xy) - sum(x)*sum(y)) / sqrt((n*sum(xx) - sum(x)^2) * (n*sum(yy) - sum(y)^2)), Java's x/0",
     aggregate=True)


# ----------------------------------------------------------------------------------------------
# Python forms (pull queries): the same functions over Python values, None being NULL


def _strict(fn: Callable[..., Any]) -> PythonRule:
    """A function that is NULL when any argument is NULL (most of ksqlDB's, and Spark's)."""
    return lambda args: None if any(a is None for a in args) else fn(*args)


def _py_round(args: list[Any]) -> Any:
    value = args[0]
    places = args[1] if len(args) > 1 else 0
    if value is None or places is None:
        return None
    # ksqlDB rounds ties towards positive infinity (half up above zero, half down below) and
    # ROUND(x) of a DOUBLE is a BIGINT.
    quantum = decimal.Decimal(1).scaleb(-int(places))
    mode = decimal.ROUND_HALF_UP if value > 0 else decimal.ROUND_HALF_DOWN
    rounded = decimal.Decimal(str(value)).quantize(quantum, rounding=mode)
    if len(args) == 1:
        return int(rounded)
    return float(rounded) if isinstance(value, float) else rounded


def _py_substring(args: list[Any]) -> Any:
    if any(a is None for a in args):
        return None
    text = args[0] if isinstance(args[0], bytes | bytearray) else str(args[0])   # BYTES too
    pos = int(args[1])
    # ksqlDB's SUBSTRING is 1-based (0 counts as 1); a negative position counts from the end.
    start = max(pos - 1, 0) if pos >= 0 else max(len(text) + pos, 0)
    if len(args) > 2:
        return text[start:start + max(int(args[2]), 0)]
    return text[start:]


def _py_ceil_floor(fn: Callable[[float], int]) -> PythonRule:
    # an integer stays itself; a DOUBLE stays a DOUBLE (as the Spark form casts back)
    return _strict(lambda x: x if isinstance(x, int) else float(fn(x)))


# The characters Java's String.trim drops at either end: U+0000 to U+0020.
_JAVA_TRIMMED = "".join(map(chr, range(0x21)))


def _with_python(name: str, rule: PythonRule) -> None:
    fd = replace(_CATALOG[name], python=rule)
    for n in (fd.name, *fd.aliases):
        _CATALOG[n] = fd


def _py_chr(args: list[Any]) -> Any:
    x = args[0]
    if x is None:
        return None
    if isinstance(x, str):
        if len(x) < 6 or not x.startswith("\\u"):
            return None
        try:
            return java_text.unescape_java(x)
        except java_text.JavaEscapeError:
            return None          # ksqlDB logs the UDF's failure and gives NULL
    return java_text.join_surrogates(chr(x)) if 0 <= x <= _MAX_CODE_POINT else None


def _py_split(args: list[Any]) -> Any:
    text, delimiter = args
    if text is None or delimiter is None:
        return None
    if not delimiter:
        return [text] if not text else [text[i:i + 1] for i in range(len(text))]
    return text.split(delimiter)


def _py_array_join(args: list[Any]) -> Any:
    if args[0] is None:
        return None
    delimiter = args[1] if len(args) > 1 else ","
    return ("" if delimiter is None else delimiter).join(
        "null" if e is None else java_text.java_to_string(e) for e in args[0])


_with_python("CHR", _py_chr)
_with_python("SPLIT", _py_split)
_with_python("ARRAY_JOIN", _py_array_join)
_with_python("UCASE", _strict(lambda s: str(s).upper()))
_with_python("LCASE", _strict(lambda s: str(s).lower()))
_with_python("LEN", _strict(lambda s: len(s)))
_with_python("TRIM", _strict(lambda s: str(s).strip(_JAVA_TRIMMED)))
_with_python("ABS", _strict(abs))
_with_python("ROUND", _py_round)
_with_python("FLOOR", _py_ceil_floor(math.floor))
_with_python("CEIL", _py_ceil_floor(math.ceil))
_with_python("SUBSTRING", _py_substring)
# CONCAT skips NULL arguments; COALESCE / IFNULL give the first non-NULL.
_with_python("CONCAT", lambda args: "".join(str(a) for a in args if a is not None))
_with_python("COALESCE", lambda args: next((a for a in args if a is not None), None))
_with_python("IFNULL", lambda args: args[0] if args[0] is not None else args[1])


# ksqlDB functions with no faithful Spark SQL translation here (docs/sql-functions.md explains).
NOT_SUPPORTED: dict[str, str] = {
    "ATTEMPT_TO_CAST": "not translated yet",
    "REGEXP_SPLIT_TO_MAP": "not translated yet",
}


def is_table_function(name: str) -> bool:
    fd = lookup(name)
    return fd is not None and fd.table


def lookup(name: str) -> FunctionDef | None:
    """The function called ``name`` (any case; aliases included), or None."""
    return _CATALOG.get(name.upper())


def is_aggregate(name: str) -> bool:
    fd = lookup(name)
    return fd is not None and fd.aggregate


# ksqlDB's aggregates whose state (the UDAF's intermediate type) is the primitive they return;
# every other one keeps an ARRAY, MAP or STRUCT (AverageUdaf's Struct, TopkKudaf's List,
# HistogramUdaf's Map, LatestByOffset's Struct...)
_PRIMITIVE_STATE = frozenset({"COUNT", "SUM", "MIN", "MAX"})


def has_composite_state(name: str) -> bool:
    """Whether the aggregate ``name`` keeps an ARRAY, MAP or STRUCT as its state."""
    fd = lookup(name)
    return fd is not None and fd.aggregate and fd.name not in _PRIMITIVE_STATE


def catalog() -> dict[str, FunctionDef]:
    """Every function by its ksqlDB name (aliases not repeated)."""
    return {fd.name: fd for fd in _CATALOG.values()}


def unknown_function_message(name: str) -> str:
    """ksqlDB's message for a call to a function it does not know (or we do not support)."""
    reason = NOT_SUPPORTED.get(name.upper())
    if reason is not None:
        return f"Function '{name.upper()}' is not supported: {reason}"
    return f"Can't find any functions with the name '{name.upper()}'"


def python_functions() -> dict[str, FunctionDef]:
    """The functions with a Python form (those pull queries can evaluate), by ksqlDB name."""
    return {name: fd for name, fd in catalog().items() if fd.python is not None}


# table functions, lambda functions and the collection functions built on Spark's higher-order
# functions register themselves into the catalog (a module of their own: this one is long)
from oncestream.sql.language import (  # noqa: E402,F401  (they register)
    functions_collections,
    functions_conversions,
    functions_json,
    functions_time,
)
