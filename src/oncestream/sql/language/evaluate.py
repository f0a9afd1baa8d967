"""ksqlDB's expression semantics over Python values: the evaluator of pull-query expressions
(projection and WHERE) over one row.

Pull queries are answered in Python from the state store, not by Spark, so their expressions are
evaluated here, over the sqlglot trees the parser and analyzer produce. Function calls are named
as the analyzer names them (``analyzer_expr.call_parts``) and run by the function catalog's Python
form (``functions.FunctionDef.python``), beside the same entry's type rule and Spark form, so a
function means the same in a pull query and in a compiled query. Only the subset a lookup needs is
supported (ksqlDB also refuses much in pull queries):

- column references (qualified or not) and the pseudo columns present in the row
  (``WINDOWSTART``, ``WINDOWEND`` of windowed tables);
- literals: numbers, strings, booleans, NULL;
- comparisons ``= <> != < <= > >=``, ``BETWEEN``, ``IN (...)``, ``IS [NOT] NULL``, ``LIKE``; a
  comparison or ``BETWEEN`` with a NULL operand is false, not NULL (ksqlDB's generated code and
  its interpreter check for null operands first: ``ComparisonInterpreter``);
- ``AND``, ``OR``, ``NOT`` with SQL's three-valued logic (NULL is unknown);
- arithmetic ``+ - * / %`` and unary minus (integer ``/`` truncates as Java does; a division by
  zero gives NULL, as ksqlDB's expression evaluation logs and nulls it), ``||``;
- ``CAST(x AS INTEGER|BIGINT|DOUBLE|STRING|BOOLEAN)``, ``CASE``;
- struct fields ``s->f`` and subscripts ``a[i]`` (arrays 1-based, negative from the end, out of
  range NULL, as ksqlDB) and ``m['k']``;
- the catalog's functions that have a Python form (``functions.python_functions()``: ``UCASE``,
  ``LCASE``, ``LEN``, ``ABS``, ``ROUND``, ``FLOOR``, ``CEIL``, ``CONCAT``, ``COALESCE``, ``IFNULL``,
  ``SUBSTRING``, ``TRIM``...).

Anything else raises ``StatementError`` naming the expression (``check_supported`` does it
before any row is read, so an unsupported query fails whatever the table holds).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
from collections.abc import Mapping
from typing import Any

from sqlglot import exp

from oncestream.sql.errors import StatementError
from oncestream.sql.language import functions
from oncestream.sql.language.analyzer_expr import TYPE_KEY, call_parts
from oncestream.sql.language.types import BaseType, SqlType

Row = Mapping[str, Any]


class UnsupportedInPullQueryError(StatementError):
    """An expression a pull query cannot evaluate (ksqlDB refuses many in pull queries too)."""


def _unsupported(node: exp.Expr) -> UnsupportedInPullQueryError:
    return UnsupportedInPullQueryError(f"Pull queries don't support the expression '{node.sql()}'.")


def column_name(node: exp.Column) -> str:
    """The column's name without its qualifier (``T.ID`` -> ``ID``)."""
    return node.name


# --- functions -------------------------------------------------------------------------------


def _function_call(node: exp.Expr) -> tuple[functions.FunctionDef, list[exp.Expr]] | None:
    """The catalog's function (with a Python form) ``node`` calls, by the analyzer's naming of
    calls, and its argument expressions; None if ``node`` is no such call."""
    parts = call_parts(node)
    if parts is None:
        return None
    definition = functions.lookup(parts[0])
    if definition is None or definition.python is None:
        return None
    return definition, parts[1]


# --- checks ----------------------------------------------------------------------------------

_LEAVES = (exp.Column, exp.Literal, exp.Boolean, exp.Null, exp.DataType, exp.Identifier, exp.Star)
_OPERATORS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.And, exp.Or, exp.Not, exp.Paren,
              exp.Neg, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.DPipe, exp.Between, exp.In, exp.Is,
              exp.Like, exp.Cast, exp.Case, exp.If, exp.Alias, exp.Tuple, exp.Dot, exp.Bracket)
_CAST_TARGETS = {
    exp.DataType.Type.INT: "INTEGER", exp.DataType.Type.BIGINT: "BIGINT", exp.DataType.Type.DOUBLE: "DOUBLE",
    exp.DataType.Type.FLOAT: "DOUBLE", exp.DataType.Type.VARCHAR: "STRING", exp.DataType.Type.TEXT: "STRING",
    exp.DataType.Type.BOOLEAN: "BOOLEAN",
}


def check_supported(node: exp.Expr) -> None:
    """Raise ``UnsupportedInPullQueryError`` if ``node`` (or anything in it) is not evaluable."""
    if isinstance(node, _LEAVES):
        return
    if isinstance(node, exp.In) and (node.args.get("query") is not None or node.args.get("unnest") is not None):
        raise _unsupported(node)
    if isinstance(node, exp.Is) and not isinstance(node.expression, exp.Null):
        raise _unsupported(node)
    if isinstance(node, exp.Cast):
        to = node.args.get("to")
        if not isinstance(to, exp.DataType) or to.this not in _CAST_TARGETS:
            raise _unsupported(node)
        check_supported(node.this)
        return
    if isinstance(node, _OPERATORS):
        for child in node.iter_expressions():
            check_supported(child)
        return
    call = _function_call(node)
    if call is None:
        raise _unsupported(node)
    definition, args = call
    if len(args) < definition.min_args or (definition.max_args is not None and len(args) > definition.max_args):
        raise UnsupportedInPullQueryError(
            f"Function {definition.name} does not accept {len(args)} argument(s): '{node.sql()}'.")
    for arg in args:
        check_supported(arg)


# --- evaluation ------------------------------------------------------------------------------

def literal_value(node: exp.Literal) -> Any:
    """A literal's Python value: str, int, or float / Decimal for numbers with a point."""
    text = node.this
    if node.is_string:
        return text
    try:
        return int(text)
    except ValueError:
        pass
    if "e" in text.lower():
        return float(text)
    return decimal.Decimal(text)   # ksqlDB: 1.5 is a DECIMAL literal


def _compare(op: type[exp.Expr], left: Any, right: Any) -> bool | None:
    if left is None or right is None:
        return False      # ksqlDB: a comparison with a null operand is false
    try:
        if op is exp.EQ:
            return bool(left == right)
        if op is exp.NEQ:
            return bool(left != right)
        if op is exp.GT:
            return bool(left > right)
        if op is exp.GTE:
            return bool(left >= right)
        if op is exp.LT:
            return bool(left < right)
        return bool(left <= right)
    except TypeError:
        raise StatementError(f"Cannot compare {type(left).__name__} with {type(right).__name__} "
                             f"({left!r}, {right!r}).") from None


# Java's integer widths: ksqlDB's INTEGER and BIGINT arithmetic wraps on overflow (as Spark's does
# with ANSI off), by the type the analyzer gave the expression.
_INTEGER_BITS = {BaseType.INTEGER: 32, BaseType.BIGINT: 64}


def _wrapped(node: exp.Expr, value: Any) -> Any:
    ty = node.meta.get(TYPE_KEY)
    bits = _INTEGER_BITS.get(ty.base) if isinstance(ty, SqlType) else None
    if bits is None or not isinstance(value, int) or isinstance(value, bool):
        return value
    half = 1 << (bits - 1)
    return (value + half) % (1 << bits) - half


def _arith(node: exp.Expr, left: Any, right: Any) -> Any:
    return _wrapped(node, _java_arith(node, left, right))


def _java_arith(node: exp.Expr, left: Any, right: Any) -> Any:
    if left is None or right is None:
        return None
    if isinstance(left, decimal.Decimal) and isinstance(right, float):
        left = float(left)
    elif isinstance(right, decimal.Decimal) and isinstance(left, float):
        right = float(right)
    try:
        if isinstance(node, exp.Add):
            return left + right
        if isinstance(node, exp.Sub):
            return left - right
        if isinstance(node, exp.Mul):
            return left * right
        if right == 0:
            return None
        both_int = isinstance(left, int) and isinstance(right, int)
        if not both_int:
            return left / right if isinstance(node, exp.Div) else math.fmod(left, right)
        if isinstance(node, exp.Div):
            # Java integer division truncates toward zero (Python's // floors).
            quotient = abs(left) // abs(right)
            return quotient if (left < 0) == (right < 0) else -quotient
        # Java's % takes the sign of the dividend.
        remainder = abs(left) % abs(right)
        return remainder if left >= 0 else -remainder
    except TypeError:
        raise StatementError(f"Cannot apply '{node.sql()}' to {left!r} and {right!r}.") from None


# ksqlDB's (SqlBooleans) and Spark's words for a STRING cast to BOOLEAN; anything else is NULL
_BOOLEAN_WORDS = {"true": True, "t": True, "yes": True, "y": True, "false": False, "f": False, "no": False, "n": False}


def _cast(value: Any, target: str) -> Any:
    if value is None:
        return None
    try:
        if target in ("INTEGER", "BIGINT"):
            return int(value) if not isinstance(value, str) else int(value.strip())
        if target == "DOUBLE":
            return float(value)
        if target == "BOOLEAN":
            if isinstance(value, str):
                return _BOOLEAN_WORDS.get(value.strip().lower())
            return bool(value)
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)
    except (ValueError, decimal.InvalidOperation):
        return None   # ksqlDB's CAST of an unparsable string gives NULL


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def timestamp_text(millis: int) -> str:
    """A TIMESTAMP (millis) as ksqlDB writes it: ``yyyy-MM-ddTHH:mm:ss.SSS`` in UTC."""
    stamp = _EPOCH + dt.timedelta(milliseconds=millis)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}"


def _time_text(millis: int) -> str:
    # Java's LocalTime.ofSecondOfDay(ms / 1000).toString(): the seconds only when not 0
    clock = _EPOCH + dt.timedelta(seconds=millis // 1000)
    return clock.strftime("%H:%M" if clock.second == 0 else "%H:%M:%S")


# CAST(x AS STRING) of the time types (held as numbers in a row) as ksqlDB's SqlTimeTypes writes
# them; the compiled form is compile.expressions._temporal_to_string
def date_text(days: int) -> str:
    """A DATE (days since the epoch) as ksqlDB writes it: ``yyyy-MM-dd``."""
    return (_EPOCH.date() + dt.timedelta(days=days)).isoformat()


_TEMPORAL_TEXT = {
    BaseType.TIMESTAMP: timestamp_text,
    BaseType.DATE: date_text,
    BaseType.TIME: _time_text,
}


def _like(value: Any, pattern: Any) -> bool | None:
    if value is None or pattern is None:
        return None
    regex = "".join(".*" if ch == "%" else "." if ch == "_" else re.escape(ch) for ch in str(pattern))
    return re.fullmatch(regex, str(value), flags=re.DOTALL) is not None


def _not(value: Any) -> bool | None:
    return None if value is None else not value


def _connective(node: exp.And | exp.Or, row: Row, decisive: bool) -> bool | None:
    """SQL's three-valued AND (``decisive`` False) or OR (``decisive`` True): one operand equal to
    ``decisive`` settles it even if the other is NULL; otherwise a NULL makes the result NULL."""
    left = evaluate(node.this, row)
    if left is decisive:
        return decisive
    right = evaluate(node.expression, row)
    if right is decisive:
        return decisive
    return None if left is None or right is None else not decisive


def _in(node: exp.In, row: Row) -> bool | None:
    value = evaluate(node.this, row)
    if value is None:
        return None
    saw_null = False
    for item in node.expressions:
        candidate = evaluate(item, row)
        if candidate is None:
            saw_null = True
        elif _compare(exp.EQ, value, candidate):
            return True
    return None if saw_null else False


def _case(node: exp.Case, row: Row) -> Any:
    subject = node.this
    base = evaluate(subject, row) if subject is not None else None
    for branch in node.args.get("ifs") or []:
        if subject is not None:
            hit = _compare(exp.EQ, base, evaluate(branch.this, row))
        else:
            hit = evaluate(branch.this, row)
        if hit is True:
            return evaluate(branch.args["true"], row)
    default = node.args.get("default")
    return evaluate(default, row) if default is not None else None


def _subscript(base: Any, index: Any) -> Any:
    if base is None or index is None:
        return None
    if isinstance(base, dict):
        return base.get(index)
    if isinstance(base, list) and isinstance(index, int) and not isinstance(index, bool):
        # ksqlDB arrays are 1-based; -1 is the last element; out of range is NULL.
        position = index - 1 if index > 0 else len(base) + index
        return base[position] if index != 0 and 0 <= position < len(base) else None
    return None


def evaluate(node: exp.Expr, row: Row) -> Any:
    """The value of ``node`` for ``row`` (column name -> value). NULL is None."""
    if isinstance(node, exp.Column):
        name = column_name(node)
        if name not in row:
            raise StatementError(f"Column '{name}' cannot be resolved.")
        return row[name]
    if isinstance(node, exp.Literal):
        return literal_value(node)
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, (exp.Paren, exp.Alias)):
        return evaluate(node.this, row)
    if isinstance(node, (exp.And, exp.Or)):
        return _connective(node, row, decisive=isinstance(node, exp.Or))
    if isinstance(node, exp.Not):
        return _not(evaluate(node.this, row))
    if isinstance(node, (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)):
        return _compare(type(node), evaluate(node.this, row), evaluate(node.expression, row))
    if isinstance(node, exp.Between):
        value = evaluate(node.this, row)
        low = _compare(exp.GTE, value, evaluate(node.args["low"], row))
        high = _compare(exp.LTE, value, evaluate(node.args["high"], row))
        if low is False or high is False:
            return False
        return None if low is None or high is None else True
    if isinstance(node, exp.In):
        return _in(node, row)
    if isinstance(node, exp.Is):
        value = evaluate(node.this, row)
        if isinstance(node.expression, exp.Null):
            return value is None
        raise _unsupported(node)
    if isinstance(node, exp.Like):
        return _like(evaluate(node.this, row), evaluate(node.expression, row))
    if isinstance(node, exp.Neg):
        value = evaluate(node.this, row)
        return None if value is None else _wrapped(node, -value)
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod)):
        return _arith(node, evaluate(node.this, row), evaluate(node.expression, row))
    if isinstance(node, exp.DPipe):
        left, right = evaluate(node.this, row), evaluate(node.expression, row)
        return None if left is None or right is None else f"{left}{right}"
    if isinstance(node, exp.Cast):
        to = node.args.get("to")
        target = _CAST_TARGETS.get(to.this) if isinstance(to, exp.DataType) else None
        if target is None:
            raise _unsupported(node)
        source = node.this.meta.get(TYPE_KEY)
        value = evaluate(node.this, row)
        if target == "STRING" and isinstance(value, int) and getattr(source, "base", None) in _TEMPORAL_TEXT:
            return _TEMPORAL_TEXT[source.base](value)
        return _cast(value, target)
    if isinstance(node, exp.Case):
        return _case(node, row)
    if isinstance(node, exp.Dot):
        base = evaluate(node.this, row)
        return base.get(node.expression.name) if isinstance(base, dict) else None
    if isinstance(node, exp.Bracket):
        if len(node.expressions) != 1:
            raise _unsupported(node)
        return _subscript(evaluate(node.this, row), evaluate(node.expressions[0], row))
    if isinstance(node, exp.If):
        hit = evaluate(node.this, row)
        other = node.args.get("false")
        return evaluate(node.args["true"], row) if hit is True else (evaluate(other, row) if other is not None else None)
    call = _function_call(node)
    if call is not None:
        definition, args = call
        assert definition.python is not None   # _function_call returns only functions with a Python form
        return definition.python([evaluate(arg, row) for arg in args])
    raise _unsupported(node)


def is_constant(node: exp.Expr) -> bool:
    """True if ``node`` references no column (it can be evaluated once, before reading rows)."""
    return node.find(exp.Column) is None


def constant_value(node: exp.Expr) -> Any:
    """The value of a column-free expression."""
    return evaluate(node, {})
