"""ksqlDB's table functions, lambda functions and the collection functions built on Spark's
higher-order functions, registered into ``functions``' catalog (same ``FunctionDef`` rules).

Everything here is Spark SQL: no Python UDF is needed, because Spark's higher-order functions
(``transform``, ``filter``, ``aggregate``, ``exists``, ``zip_with``, ``map_filter``, ``sequence``)
express each of them with ksqlDB's null handling added as guards:

- **Table functions** (``EXPLODE``, ``CUBE_EXPLODE``): the Spark form is the ARRAY the function
  spreads over output rows; the compiler (``engine/compile/table_functions.py``) zips the arrays
  of every table function of a SELECT into rows as ksqlDB's ``KudtfFlatMapper`` does (as many rows
  as the longest, NULL where a shorter one has ended; a NULL or empty array gives no row).
- **Lambda functions** (``TRANSFORM``, ``FILTER``, ``REDUCE``, over an ARRAY or a MAP): the
  analyzer (``analyzer_lambdas``) types the lambda bodies; the Spark forms come from
  ``CallSite.lambdas``. ksqlDB's generated Java fails on arithmetic over a NULL operand inside a
  lambda (an unboxing ``NullPointerException``), and its function then returns NULL for the whole
  collection (``TRANSFORM([5, NULL], x => x + 5)`` is NULL, where Spark's ``transform`` gives
  ``[10, NULL]``): the analyzer gives each lambda a *null guard* (its arithmetic operands that may
  be NULL), and the translation answers NULL when the guard holds for any element. A MAP lambda
  takes (key, value): Spark's ``zip_with(map_keys(m), map_values(m), (k, v) -> ...)`` gives that
  binding without renaming the body's variables. ksqlDB's TRANSFORM of a MAP that maps two entries
  to one key fails (``Collectors.toMap``) and is NULL; so is it here (Spark would fail the query).
- ``HISTOGRAM(s)`` (a stream aggregation): each distinct value of the group with its count, from
  the group's ``collect_list`` (NULLs not counted, as ksqlDB's); its state is the group's values.
  A table aggregation refuses it, as ksqlDB (it is not a TableUdaf there).
- ``ATTR(x)`` (a stream aggregation): the group's value when it has exactly one distinct value
  (NULL counting as one), else NULL: ``collect_set`` plus whether a NULL was seen. (ksqlDB also
  aggregates a table with it; the table aggregation here does not have it yet.)
- ``GENERATE_SERIES`` is a scalar in ksqlDB (an ARRAY); a zero step or a step of the wrong sign
  is ksqlDB's ``KsqlFunctionException`` (NULL and a processing-log entry), NULL here too (Spark's
  ``sequence`` would fail the query).
"""

from __future__ import annotations

from collections.abc import Sequence

from oncestream.sql.language import types as t
from oncestream.sql.language.function_catalog import (
    CallSite,
    FunctionTypeError,
    LambdaSite,
    TypeRule,
    _add,
    _section,
    _type_list,
    spark_type_name,
)
from oncestream.sql.language.types import BaseType, SqlType

# Spark lambda parameter names of the translations' own lambdas; ksqlDB's (upper-cased or quoted)
# names are emitted quoted, so these cannot capture a user's variable.
_E, _B, _K, _V, _M, _X, _J = "__os_e", "__os_b", "__os_k", "__os_v", "__os_m", "__os_x", "__os_j"

CUBE_MAX_COLUMNS = 20   # ksqlDB's Cube.MAX_COLUMNS


def _with_alternatives(name: str, arg_types: Sequence[SqlType | None], *alternatives: str) -> str:
    """ksqlDB's UdfIndex message for a function with several signatures."""
    return (f"Function '{name}' does not accept parameters ({_type_list(arg_types)}).\nValid alternatives are:\n"
            + "\n".join(alternatives))


# ----------------------------------------------------------------------------------------------
# table functions


def _explode_type(arg_types: Sequence[SqlType | None]) -> SqlType:
    a = arg_types[0] if len(arg_types) == 1 else None
    if len(arg_types) != 1 or (a is not None and a.base is not BaseType.ARRAY):
        raise FunctionTypeError(_with_alternatives("explode", arg_types, "explode(ARRAY<DECIMAL> input)",
                                                   "explode(ARRAY<T> list)"))
    return a.element if a is not None and a.element is not None else t.STRING


def _cube_type(arg_types: Sequence[SqlType | None]) -> SqlType:
    a = arg_types[0] if len(arg_types) == 1 else None
    if len(arg_types) != 1 or (a is not None and a.base is not BaseType.ARRAY):
        raise FunctionTypeError(_with_alternatives("cube_explode", arg_types, "cube_explode(ARRAY<T> columns)"))
    return a if a is not None else t.array_of(t.STRING)


def _cube(c: CallSite) -> str:
    """Every combination of the elements and NULLs, in ksqlDB's order (bit d-1-j of the mask
    keeps element j); a combination that would NULL an element already NULL is a duplicate and
    is skipped. More than 20 elements is ksqlDB's error: no row."""
    a = c.args[0]
    d = f"size({a})"
    bit = f"shiftleft(1, {d} - 1 - {_J})"
    duplicate = f"exists(transform({a}, ({_X}, {_J}) -> {_X} IS NULL AND ({_M} & {bit}) <> 0), {_B} -> {_B})"
    row = f"transform({a}, ({_X}, {_J}) -> CASE WHEN ({_M} & {bit}) = 0 THEN NULL ELSE {_X} END)"
    masks = f"filter(sequence(0, shiftleft(1, {d}) - 1), {_M} -> NOT {duplicate})"
    return f"CASE WHEN {a} IS NULL OR {d} > {CUBE_MAX_COLUMNS} THEN NULL ELSE transform({masks}, {_M} -> {row}) END"


# ----------------------------------------------------------------------------------------------
# lambda functions: types come from the analyzer (analyzer_lambdas), these are the Spark forms


def _lambda(site: LambdaSite, body: str | None = None) -> str:
    params = site.params[0] if len(site.params) == 1 else f"({', '.join(site.params)})"
    return f"{params} -> {body if body is not None else site.body}"


def _entries_zip(m: str, site: LambdaSite, body: str) -> str:
    """An ARRAY of ``body`` over a MAP's entries, ``site``'s two parameters bound to key and value."""
    return f"zip_with(map_keys({m}), map_values({m}), {_lambda(site, body)})"


def _array_guard(a: str, site: LambdaSite) -> str | None:
    if site.null_guard is None:
        return None
    return f"exists({a}, {_lambda(site, site.null_guard)})"


def _map_guard(m: str, site: LambdaSite) -> str | None:
    if site.null_guard is None:
        return None
    return f"exists({_entries_zip(m, site, site.null_guard)}, {_B} -> {_B})"


def _guarded(result: str, *guards: str | None) -> str:
    present = [g for g in guards if g is not None]
    if not present:
        return result
    return f"CASE WHEN {' OR '.join(present)} THEN NULL ELSE {result} END"


def _is_map(c: CallSite) -> bool:
    ty = c.types[0] if c.types else None
    return ty is not None and ty.base is BaseType.MAP


def _transform(c: CallSite) -> str:
    source = c.args[0]
    if not _is_map(c):
        site = c.lambdas[0]
        return _guarded(f"transform({source}, {_lambda(site)})", _array_guard(source, site))
    keys_site, values_site = c.lambdas[0], c.lambdas[1]
    keys = _entries_zip(source, keys_site, keys_site.body)
    values = _entries_zip(source, values_site, values_site.body)
    # ksqlDB's Collectors.toMap fails on a duplicate key or a NULL value: NULL, not a failed query
    # (Spark's map_from_arrays would fail it; a NULL key is Spark's failure too)
    clash = (f"size(array_distinct({keys})) <> size({keys}) OR exists({keys}, {_K} -> {_K} IS NULL) "
             f"OR exists({values}, {_V} -> {_V} IS NULL)")
    return _guarded(f"CASE WHEN {clash} THEN NULL ELSE map_from_arrays({keys}, {values}) END",
                    _map_guard(source, keys_site), _map_guard(source, values_site))


def _filter(c: CallSite) -> str:
    source, site = c.args[0], c.lambdas[0]
    if not _is_map(c):
        return _guarded(f"filter({source}, {_lambda(site)})", _array_guard(source, site))
    return _guarded(f"map_filter({source}, {_lambda(site)})", _map_guard(source, site))


def _reduce(c: CallSite, result_type: SqlType | None) -> str:
    source, initial, site = c.args[0], c.args[1], c.lambdas[0]
    cast_to = spark_type_name(result_type) if result_type is not None else None

    def typed(sql: str) -> str:
        # Spark's aggregate wants the merge's type to be the initial state's exactly
        return f"CAST({sql} AS {cast_to})" if cast_to is not None else sql

    state = site.params[0]
    if not _is_map(c):
        element_site = LambdaSite(site.params[1:], site.body, site.null_guard)
        folded = f"aggregate({source}, {typed(initial)}, {_lambda(site, typed(site.body))})"
        guard = _array_guard(source, element_site)
    else:
        entry_site = LambdaSite(site.params[1:], typed(site.body), site.null_guard)
        step = f"element_at({_entries_zip(f'map({_E}.key, {_E}.value)', entry_site, entry_site.body)}, 1)"
        folded = f"aggregate(map_entries({source}), {typed(initial)}, ({state}, {_E}) -> {step})"
        guard = _map_guard(source, entry_site)
    # ksqlDB: a NULL initial state is NULL; a NULL collection is the initial state
    return (f"CASE WHEN {initial} IS NULL THEN NULL WHEN {source} IS NULL THEN {typed(initial)} "
            f"ELSE {_guarded(folded, guard)} END")


def _reduce_spark(c: CallSite) -> str:
    # The state's type is the initial state's (ksqlDB's generic S), else the body's.
    initial = c.types[1] if len(c.types) > 1 else None
    return _reduce(c, initial)


def _lambda_type(name: str) -> TypeRule:
    def rule(arg_types: Sequence[SqlType | None]) -> SqlType:
        raise FunctionTypeError(f"Function '{name}' takes a lambda: its type is given by the analyzer")
    return rule


# ----------------------------------------------------------------------------------------------
# scalars over collections


def _series_type(arg_types: Sequence[SqlType | None]) -> SqlType:
    ints = (BaseType.INTEGER, BaseType.BIGINT)
    n = len(arg_types)
    ok = n in (2, 3) and all(a is None or a.base in ints for a in arg_types[:2]) and \
        (n == 2 or arg_types[2] is None or arg_types[2].base is BaseType.INTEGER)
    if not ok:
        raise FunctionTypeError(_with_alternatives(
            "GENERATE_SERIES", arg_types, "GENERATE_SERIES(INT start, INT end)", "GENERATE_SERIES(INT start, INT end, INT step)",
            "GENERATE_SERIES(BIGINT start, BIGINT end)", "GENERATE_SERIES(BIGINT start, BIGINT end, INT step)"))
    wide = any(a is not None and a.base is BaseType.BIGINT for a in arg_types[:2])
    return t.array_of(t.BIGINT if wide else t.INTEGER)


def _series(c: CallSite) -> str:
    wide = any(ty is not None and ty.base is BaseType.BIGINT for ty in c.types[:2])
    spark_type = "BIGINT" if wide else "INT"
    start, end = (f"CAST({a} AS {spark_type})" for a in c.args[:2])
    if len(c.args) == 2:
        return f"sequence({start}, {end})"
    step = f"CAST({c.args[2]} AS {spark_type})"
    wrong = f"{step} = 0 OR ({end} > {start} AND {step} < 0) OR ({end} < {start} AND {step} > 0)"
    return f"CASE WHEN {wrong} THEN NULL ELSE sequence({start}, {end}, {step}) END"


_ENTRY_VALUES = (BaseType.INTEGER, BaseType.BIGINT, BaseType.DOUBLE, BaseType.BOOLEAN, BaseType.STRING)


def _entries_type(arg_types: Sequence[SqlType | None]) -> SqlType:
    m = arg_types[0] if arg_types else None
    sorted_ok = len(arg_types) == 2 and (arg_types[1] is None or arg_types[1].base is BaseType.BOOLEAN)
    if not sorted_ok or m is None or m.base is not BaseType.MAP or m.key is None or m.element is None \
            or m.key.base is not BaseType.STRING or m.element.base not in _ENTRY_VALUES:
        raise FunctionTypeError(_with_alternatives(
            "ENTRIES", arg_types, *(f"ENTRIES(MAP<VARCHAR, {v}> map, BOOLEAN sorted)"
                                    for v in ("INT", "BIGINT", "DOUBLE", "BOOLEAN", "VARCHAR"))))
    return t.array_of(t.struct_of(("K", t.STRING), ("V", m.element)))


def _entries(c: CallSite) -> str:
    m, entries = c.args[0], f"map_entries({c.args[0]})"
    ordered = f"CASE WHEN coalesce({c.args[1]}, false) THEN array_sort({entries}) ELSE {entries} END"
    return f"CASE WHEN {m} IS NULL THEN NULL ELSE transform({ordered}, {_E} -> named_struct('K', {_E}.key, 'V', {_E}.value)) END"


_section("TABLE")
_add("EXPLODE", 1, 1, _explode_type, lambda c: c.args[0],
     "One output row per element of the array (none for NULL or empty).", "explode of the array (zipped)", table=True)
_add("CUBE_EXPLODE", 1, 1, _cube_type, _cube,
     "One output row per combination of the elements and NULLs (2^n rows, duplicates from NULLs skipped).",
     "explode of transform(filter(sequence(0, 2^n - 1), ...), ...)", table=True)
_section("LAMBDA")
_add("TRANSFORM", 2, 3, _lambda_type("TRANSFORM"), _transform,
     "Apply a lambda to each element (array: x => ...; map: (k, v) => key, (k, v) => value); NULL for NULL.",
     "transform(a, x -> f) / map_from_arrays(zip_with(keys, values, kf), zip_with(keys, values, vf))")
_add("FILTER", 2, 2, _lambda_type("FILTER"), _filter,
     "The elements (array: x => ...; map: (k, v) => ...) for which the lambda is true; NULL for NULL.",
     "filter(a, x -> p) / map_filter(m, (k, v) -> p)")
_add("REDUCE", 3, 3, _lambda_type("REDUCE"), _reduce_spark,
     "Fold the elements into the initial state ((s, x) => ... / (s, k, v) => ...); NULL state: NULL; NULL collection: the state.",
     "aggregate(a, s0, (s, x) -> f)")
def _histogram_type(arg_types: Sequence[SqlType | None]) -> SqlType:
    if len(arg_types) != 1 or not (arg_types[0] is None or arg_types[0].base is BaseType.STRING):
        raise FunctionTypeError(f"Function 'HISTOGRAM' does not accept parameters ({_type_list(arg_types)}).")
    return t.map_of(t.STRING, t.BIGINT)


# ksqlDB's HistogramUdaf keeps at most this many distinct values; later new ones are ignored
# (the ones it keeps are still counted). The stream form below and the table form
# (engine/compile/table_udafs.py) both apply it.
HISTOGRAM_LIMIT = 1000


def _histogram(c: CallSite) -> str:
    """The group's values in arrival order (collect_list skips NULLs), their first HISTOGRAM_LIMIT
    distinct ones (array_distinct keeps first occurrences) each with its count."""
    values = f"collect_list({c.args[0]})"
    count = f"CAST(size(filter({values}, {_V} -> {_V} = {_K})) AS BIGINT)"
    counted = f"transform(slice(array_distinct({values}), 1, {HISTOGRAM_LIMIT}), {_K} -> struct({_K}, {count}))"
    return f"map_from_entries({counted})"


_section("AGGREGATE")
_add("HISTOGRAM", 1, 1, _histogram_type, _histogram,
     "Each distinct value of the group (the first 1000) with its number of occurrences.",
     "map_from_entries of the first 1000 distinct values of collect_list(x) and their counts", aggregate=True)
def _attr_type(arg_types: Sequence[SqlType | None]) -> SqlType:
    if len(arg_types) != 1 or (arg_types[0] is not None and arg_types[0].base is BaseType.MAP):
        raise FunctionTypeError(f"Function 'ATTR' does not accept parameters ({_type_list(arg_types)}).")
    return arg_types[0] or t.STRING


def _attr(c: CallSite) -> str:
    values = f"collect_set({c.args[0]})"
    return f"CASE WHEN size({values}) = 1 AND NOT bool_or({c.args[0]} IS NULL) THEN element_at({values}, 1) END"


_add("ATTR", 1, 1, _attr_type, _attr, "The group's single distinct value (NULL counting), else NULL.",
     "element_at(collect_set(x), 1) when it is the only value", aggregate=True)
_section("ARRAY")
_add("GENERATE_SERIES", 2, 3, _series_type, _series,
     "The integers from start to end (inclusive) by step (default 1 or -1); NULL for a zero or wrong-sign step.",
     "sequence(start, end[, step])")
_section("MAP")
_add("ENTRIES", 2, 2, _entries_type, _entries,
     "An array of STRUCT<K, V> of the map's entries, sorted by key if asked.",
     "transform(map_entries(m), e -> named_struct('K', e.key, 'V', e.value))")
