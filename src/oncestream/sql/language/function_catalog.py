"""The frame of ksqlDB's function catalog (``functions`` explains it): the types a function
definition is made of (``FunctionDef``, ``CallSite``, ``LambdaSite``, the rule types), ksqlDB's
refusal text, the type predicates every definition module uses, and the registry itself
(``_add`` / ``_section``). The definition modules (``functions`` and ``functions_*``) import this
one and register into it; ``functions`` imports them all, so the catalog is complete once
``functions`` is imported, without an import cycle between them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from oncestream.sql.language import types as t
from oncestream.sql.language.types import BaseType, SqlType


class FunctionTypeError(Exception):
    """The arguments' types are not accepted by the function (ksqlDB's wording in ``str()``)."""


@dataclass(frozen=True)
class CallSite:
    """One call to translate: the arguments' Spark SQL text and ksqlDB types (None: NULL literal).

    ``order_sql`` is only used by the offset-ordered aggregates (``LATEST_BY_OFFSET``,
    ``EARLIEST_BY_OFFSET``): an expression (given by the compiler) that increases with the order
    in which ksqlDB would have processed the records, e.g. ``struct(ROWTIME, ROWPARTITION, ROWOFFSET)``."""

    args: Sequence[str]
    types: Sequence[SqlType | None] = ()
    order_sql: str | None = None
    # the lambda arguments (TRANSFORM, FILTER, REDUCE), in order: their parameters' Spark names,
    # their body's Spark SQL, and the SQL of ksqlDB's NULL-operand failure for the body (or None);
    # ``args`` then holds only the other arguments. ``functions_collections`` explains the guard.
    lambdas: Sequence[LambdaSite] = ()


@dataclass(frozen=True)
class LambdaSite:
    """One translated lambda argument (see ``CallSite.lambdas``)."""

    params: tuple[str, ...]
    body: str
    null_guard: str | None = None


TypeRule = Callable[[Sequence[SqlType | None]], SqlType]
SparkRule = Callable[[CallSite], str]
PythonRule = Callable[[list[Any]], Any]


@dataclass(frozen=True)
class FunctionDef:
    """A ksqlDB function: name, arity, return-type rule and Spark SQL translation."""

    name: str
    aggregate: bool
    min_args: int
    max_args: int | None
    return_type: TypeRule
    spark: SparkRule
    description: str
    spark_doc: str                    # the Spark equivalent as docs/sql-functions.md shows it
    aliases: tuple[str, ...] = field(default=())
    category: str = "OTHER"           # SHOW FUNCTIONS' category (STRING, MATHEMATICAL, ...)
    python: PythonRule | None = None  # the same function over Python values (None: Spark only)
    table: bool = False               # a table function: the Spark form is the ARRAY it spreads over rows

    def result_type(self, arg_types: Sequence[SqlType | None]) -> SqlType:
        """The call's type; raises ``FunctionTypeError`` with ksqlDB's message when refused."""
        n = len(arg_types)
        if n < self.min_args or (self.max_args is not None and n > self.max_args):
            raise FunctionTypeError(_refused(self.name, arg_types))
        return self.return_type(arg_types)


def _type_list(arg_types: Sequence[SqlType | None]) -> str:
    return ", ".join("null" if a is None else a.ksql_name for a in arg_types)


# The functions ksqlDB registers under a name that is not upper case (the ``name`` of their
# @UdfDescription / @UdafDescription / @UdtfDescription): its refusals spell the function so
# (``Function 'greatest' does not accept parameters (STRING, INTEGER).``), whatever the query wrote.
_REGISTERED_SPELLINGS = {n.upper(): n for n in (
    "Abs", "Ceil", "Chr", "Floor", "LPad", "RPad", "Round", "acos", "array_concat", "array_distinct",
    "array_except", "array_intersect", "array_max", "array_min", "array_remove", "array_sort", "array_union",
    "asin", "atan", "atan2", "avg", "bigint_from_bytes", "cbrt", "collect_list", "collect_set", "concat",
    "concat_ws", "convert_tz", "correlation", "cos", "cosh", "cot", "cube_explode", "dateadd", "datesub",
    "datetostring", "degrees", "double_from_bytes", "elt", "encode", "exp", "explode", "extractjsonfield",
    "field", "filter", "format_date", "format_time", "format_timestamp", "from_bytes", "from_days",
    "from_unixtime", "geo_distance", "greatest", "histogram", "initcap", "instr", "int_from_bytes", "lcase",
    "least", "len", "ln", "log", "map_keys", "map_union", "map_values", "mask", "mask_keep_left",
    "mask_keep_right", "mask_left", "mask_right", "md5", "parse_date", "parse_time", "parse_timestamp", "pi",
    "power", "radians", "random", "reduce", "regexp_extract", "regexp_extract_all", "regexp_replace",
    "regexp_split_to_array", "replace", "reverse", "sign", "sin", "sinh", "slice", "split", "split_to_map",
    "sqrt", "stringtodate", "stringtotimestamp", "substring", "sum_list", "tan", "tanh", "timeadd", "timestampadd",
    "timestampsub", "timestamptostring", "timesub", "to_bytes", "transform", "trim", "trunc", "ucase",
    "unix_date", "unix_timestamp", "url_decode_param", "url_encode_param", "url_extract_fragment",
    "url_extract_host", "url_extract_parameter", "url_extract_path", "url_extract_port",
    "url_extract_protocol", "url_extract_query")}


def registered_name(name: str) -> str:
    """A function's name as ksqlDB registered it, which its error messages use."""
    return _REGISTERED_SPELLINGS.get(name.upper(), name)


def _refused(name: str, arg_types: Sequence[SqlType | None]) -> str:
    return f"Function '{registered_name(name)}' does not accept parameters ({_type_list(arg_types)})."


# ----------------------------------------------------------------------------------------------
# type predicates and rules

NUMERIC_ORDER = (BaseType.INTEGER, BaseType.BIGINT, BaseType.DECIMAL, BaseType.DOUBLE)


def is_numeric(ty: SqlType | None) -> bool:
    return ty is None or ty.base in NUMERIC_ORDER


def is_string(ty: SqlType | None) -> bool:
    return ty is None or ty.base is BaseType.STRING


def is_integral(ty: SqlType | None) -> bool:
    return ty is None or ty.base in (BaseType.INTEGER, BaseType.BIGINT)


def is_array(ty: SqlType | None) -> bool:
    return ty is None or ty.base is BaseType.ARRAY


def is_map(ty: SqlType | None) -> bool:
    return ty is None or ty.base is BaseType.MAP


def is_timestamp(ty: SqlType | None) -> bool:
    return ty is None or ty.base is BaseType.TIMESTAMP


def is_date(ty: SqlType | None) -> bool:
    return ty is None or ty.base is BaseType.DATE


def decimal_of(ty: SqlType) -> SqlType:
    """An integer type as the DECIMAL ksqlDB widens it to (INT: (10, 0), BIGINT: (19, 0))."""
    if ty.base is BaseType.INTEGER:
        return t.decimal(10, 0)
    if ty.base is BaseType.BIGINT:
        return t.decimal(19, 0)
    return ty


def wider_numeric(a: SqlType | None, b: SqlType | None) -> SqlType | None:
    """ksqlDB's numeric promotion INTEGER < BIGINT < DECIMAL < DOUBLE (for GREATEST, CASE...)."""
    if a is None:
        return b
    if b is None:
        return a
    ia, ib = NUMERIC_ORDER.index(a.base), NUMERIC_ORDER.index(b.base)
    if a.base is BaseType.DECIMAL and b.base is BaseType.DECIMAL:
        scale = max(a.scale or 0, b.scale or 0)
        whole = max((a.precision or 0) - (a.scale or 0), (b.precision or 0) - (b.scale or 0))
        return t.decimal(min(38, whole + scale), scale)
    if BaseType.DECIMAL in (a.base, b.base) and BaseType.DOUBLE not in (a.base, b.base):
        return wider_numeric(decimal_of(a), decimal_of(b))
    return a if ia >= ib else b


def spark_type_name(ty: SqlType) -> str:
    """The Spark SQL type a ksqlDB type maps to (used in CASTs)."""
    b = ty.base
    simple = {BaseType.BOOLEAN: "BOOLEAN", BaseType.INTEGER: "INT", BaseType.BIGINT: "BIGINT",
              BaseType.DOUBLE: "DOUBLE", BaseType.STRING: "STRING", BaseType.BYTES: "BINARY",
              BaseType.TIMESTAMP: "TIMESTAMP", BaseType.DATE: "DATE", BaseType.TIME: "TIMESTAMP"}
    if b in simple:
        return simple[b]
    if b is BaseType.DECIMAL:
        return f"DECIMAL({ty.precision}, {ty.scale})"
    if b is BaseType.ARRAY and ty.element is not None:
        return f"ARRAY<{spark_type_name(ty.element)}>"
    if b is BaseType.MAP and ty.key is not None and ty.element is not None:
        return f"MAP<{spark_type_name(ty.key)}, {spark_type_name(ty.element)}>"
    if b is BaseType.STRUCT:
        return "STRUCT<" + ", ".join(f"`{f.name}`: {spark_type_name(f.type)}" for f in ty.fields) + ">"
    raise FunctionTypeError(f"no Spark type for {ty.ksql_name}")




# ----------------------------------------------------------------------------------------------
# the catalog

_CATALOG: dict[str, FunctionDef] = {}
_category = "OTHER"


def _section(category: str) -> None:
    global _category
    _category = category


def _add(name: str, min_args: int, max_args: int | None, rule: TypeRule, spark: SparkRule, description: str,
         spark_doc: str, *, aggregate: bool = False, aliases: tuple[str, ...] = (), table: bool = False) -> None:
    fd = FunctionDef(name, aggregate, min_args, max_args, rule, spark, description, spark_doc, aliases, _category,
                     table=table)
    for n in (name, *aliases):
        _CATALOG[n] = fd
