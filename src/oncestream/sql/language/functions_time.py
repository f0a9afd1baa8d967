"""ksqlDB's date/time arithmetic with a time-unit keyword: ``TIMESTAMPADD(unit, n, ts)``,
``TIMESTAMPSUB``, ``DATEADD(unit, n, date)``, ``DATESUB``, ``TIMEADD(unit, n, time)``,
``TIMESUB``, registered into ``functions``' catalog.

The unit (``MILLISECONDS``, ``SECONDS``, ``MINUTES``, ``HOURS``, ``DAYS``, and ``NANOSECONDS`` /
``MICROSECONDS``) is a keyword, not a column: the analyzer (``unit_argument``) turns it into a
string literal before typing the call, and refuses any other first argument with ksqlDB's message
(which names the function in lower case: ``Function 'timestampadd' does not accept parameters
(TIMESTAMP, INTEGER, TIMESTAMP).``). The arithmetic is ksqlDB's, in epoch milliseconds
(``unit.toMillis(n)``, truncating as Java's ``TimeUnit`` does): a DATE result is the day of the
shifted instant (``TimeUnit.toDays``, truncating toward zero), a TIME result wraps around the day.
A TIME value is its milliseconds of the day in the compiled frame (``serde_columns``). All are
Spark SQL arithmetic; NULL in, NULL out.

``FORMAT_TIME(time, pattern)`` and ``PARSE_TIME(s, pattern)`` go through a TIMESTAMP on
1970-01-01 in UTC (the server's session zone): Spark's patterns are Java's ``DateTimeFormatter``
ones ksqlDB uses, parsed case-insensitively as ksqlDB does.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from oncestream.sql.errors import StatementError
from oncestream.sql.language import types as t
from oncestream.sql.language.function_catalog import (
    CallSite,
    FunctionTypeError,
    SparkRule,
    TypeRule,
    _add,
    _refused,
    _section,
    is_integral,
)
from oncestream.sql.language.types import BaseType, SqlType

# java.util.concurrent.TimeUnit names and their length in nanoseconds
UNIT_NANOS: dict[str, int] = {
    "NANOSECONDS": 1, "MICROSECONDS": 1_000, "MILLISECONDS": 1_000_000, "SECONDS": 1_000_000_000,
    "MINUTES": 60_000_000_000, "HOURS": 3_600_000_000_000, "DAYS": 86_400_000_000_000,
}
_DAY_MS = 86_400_000
# ksqlDB's function name (as its messages print it) -> the temporal type it shifts
UNIT_FUNCTIONS: dict[str, tuple[str, BaseType]] = {
    "TIMESTAMPADD": ("timestampadd", BaseType.TIMESTAMP), "TIMESTAMPSUB": ("timestampsub", BaseType.TIMESTAMP),
    "DATEADD": ("dateadd", BaseType.DATE), "DATESUB": ("datesub", BaseType.DATE),
    "TIMEADD": ("timeadd", BaseType.TIME), "TIMESUB": ("timesub", BaseType.TIME),
}


def unit_argument(function: str, args: list[exp.Expr], resolved_types: Sequence[SqlType | None]) -> exp.Expr:
    """The unit keyword of a call as a string literal; ksqlDB's refusal when it is not one
    (``resolved_types``: the arguments' types, for the message)."""
    first = args[0] if args else None
    if isinstance(first, exp.Column) and not first.table and first.name.upper() in UNIT_NANOS:
        literal = exp.Literal.string(first.name.upper())
        literal.meta["ksql_type"] = t.STRING
        return literal
    raise StatementError(_refused(UNIT_FUNCTIONS[function][0], resolved_types))


def is_unit_keyword(node: exp.Expr) -> bool:
    return isinstance(node, exp.Column) and not node.table and node.name.upper() in UNIT_NANOS


def _rule(name: str) -> TypeRule:
    shifted = UNIT_FUNCTIONS[name][1]

    def rule(arg_types: Sequence[SqlType | None]) -> SqlType:
        ok = len(arg_types) == 3 and arg_types[0] is not None and arg_types[0].base is BaseType.STRING and \
            is_integral(arg_types[1]) and (arg_types[2] is None or arg_types[2].base is shifted)
        if not ok:
            raise FunctionTypeError(_refused(UNIT_FUNCTIONS[name][0], arg_types))
        return SqlType(shifted)
    return rule


def _millis(c: CallSite, sign: str) -> str:
    unit = c.args[0].strip("'").upper()
    nanos = UNIT_NANOS.get(unit, 1_000_000)
    amount = f"CAST({c.args[1]} AS BIGINT)"
    # TimeUnit.toMillis truncates toward zero (Spark's div does too)
    millis = f"{amount} * {nanos // 1_000_000}" if nanos >= 1_000_000 else f"({amount} div {1_000_000 // nanos})"
    return f"{sign}{millis}"


def _timestamp(sign: str) -> SparkRule:
    return lambda c: f"timestamp_millis(unix_millis({c.args[2]}) {sign} {_millis(c, '')})"


def _date(sign: str) -> SparkRule:
    def rule(c: CallSite) -> str:
        shifted = f"(CAST(unix_date({c.args[2]}) AS BIGINT) * {_DAY_MS} {sign} {_millis(c, '')})"
        return f"date_from_unix_date(CAST({shifted} div {_DAY_MS} AS INT))"
    return rule


def _time(sign: str) -> SparkRule:
    return lambda c: f"CAST(pmod(CAST({c.args[2]} AS BIGINT) {sign} {_millis(c, '')}, {_DAY_MS}) AS INT)"


_section("DATE / TIME")
for _name, _build, _what in (("TIMESTAMPADD", _timestamp("+"), "Add"), ("TIMESTAMPSUB", _timestamp("-"), "Subtract"),
                             ("DATEADD", _date("+"), "Add"), ("DATESUB", _date("-"), "Subtract"),
                             ("TIMEADD", _time("+"), "Add"), ("TIMESUB", _time("-"), "Subtract")):
    _kind = UNIT_FUNCTIONS[_name][1].value
    _add(_name, 3, 3, _rule(_name), _build,
         f"{_what} n units (MILLISECONDS, SECONDS, MINUTES, HOURS, DAYS...) to a {_kind}.",
         "epoch-millisecond arithmetic (unit.toMillis(n))")


def _time_pattern_type(name: str, first: BaseType, result: SqlType) -> TypeRule:
    def rule(arg_types: Sequence[SqlType | None]) -> SqlType:
        ok = len(arg_types) == 2 and (arg_types[0] is None or arg_types[0].base is first) and \
            (arg_types[1] is None or arg_types[1].base is BaseType.STRING)
        if not ok:
            raise FunctionTypeError(_refused(name, arg_types))
        return result
    return rule


_add("FORMAT_TIME", 2, 2, _time_pattern_type("FORMAT_TIME", BaseType.TIME, t.STRING),
     lambda c: f"date_format(timestamp_millis(CAST({c.args[0]} AS BIGINT)), {c.args[1]})",
     "Format a TIME with a pattern.", "date_format(timestamp_millis(ms of day), fmt)")
_add("PARSE_TIME", 2, 2, _time_pattern_type("PARSE_TIME", BaseType.STRING, t.TIME),
     lambda c: f"CAST(unix_millis(to_timestamp({c.args[0]}, {c.args[1]})) AS INT)",
     "Parse a string into a TIME.", "unix_millis(to_timestamp(s, fmt)) (ms of day)")
