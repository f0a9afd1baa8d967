"""The common type of a constructor's elements, as ksqlDB's ``CoercionUtil`` resolves it for
``ARRAY[...]`` and ``MAP(...)``, and the elements rewritten to that type.

- numbers widen (INT, BIGINT, DECIMAL, DOUBLE);
- a string literal counts as the number it spells (``'2e1'`` in a list of INTs) or as a BOOLEAN
  (``'yes'``) where the list's type is one; a number or boolean literal counts as a STRING where
  the list's type is STRING;
- STRUCT constructors with different fields unify into one STRUCT holding every field
  (``ARRAY[STRUCT(x := a, y := b), STRUCT(y := a, z := b)]``), a field both have taking their
  common type; each element is then cast to it, by field name, a field it lacks being null.

The analyzer (``analyzer_expr``) calls ``common_type`` on the resolved elements; the compiler sees
the casts it inserts as ordinary typed CASTs (``compile.complex_values`` casts STRUCTs by name).
"""

from __future__ import annotations

import decimal

from sqlglot import exp

from oncestream.sql.errors import StatementError
from oncestream.sql.language import functions
from oncestream.sql.language import types as t
from oncestream.sql.language.types import BaseType, SqlType, StructField

TYPE_KEY = "ksql_type"          # analyzer_expr.TYPE_KEY


def _type_of(node: exp.Expr) -> SqlType | None:
    ty = node.meta.get(TYPE_KEY)
    return ty if isinstance(ty, SqlType) else None


def common_type(items: list[exp.Expr], what: str) -> SqlType:
    """The elements' common type (rules in the module docstring); ``items`` are rewritten to that
    type in place. ``what`` names the list in errors ("ARRAY", "MAP key", "MAP value")."""
    out: SqlType | None = None
    for item in items:
        ty = _type_of(item)
        if ty is None:
            continue
        string_literal = isinstance(item, exp.Literal) and item.is_string
        if out is None:
            out = ty
        elif string_literal and functions.is_numeric(out):
            out = numeric_of_text(str(item.this), out)
        elif string_literal and out.base is BaseType.BOOLEAN:
            boolean_of_text(str(item.this))
        elif functions.is_numeric(out) and functions.is_numeric(ty):
            out = functions.wider_numeric(out, ty)
        elif out.base is BaseType.STRING and isinstance(item, (exp.Literal, exp.Boolean)) and \
                ty.base in (*functions.NUMERIC_ORDER, BaseType.BOOLEAN):
            pass        # ksqlDB's lax literal coercion: 10 is '10' in a list of strings
        elif out.base is BaseType.STRUCT and isinstance(item, exp.Struct) and ty.base is BaseType.STRUCT:
            out = struct_union(ty, out, what)
        elif out != ty:
            raise StatementError(f"invalid input syntax for type {out.ksql_name}: {what} elements must all be of one type")
    common = out or t.STRING
    items[:] = [coerced(item, common) for item in items]
    return common


def struct_union(source: SqlType, target: SqlType, what: str) -> SqlType:
    """The STRUCT holding the fields of a STRUCT constructor (``source``) and of the type so far
    (``target``): the source's names first, then the target's others (CoercionUtil's
    resolveCommonStructType); a field in both takes their common type."""
    fields: list[StructField] = []
    for name in dict.fromkeys([f.name for f in source.fields] + [f.name for f in target.fields]):
        mine = next((f.type for f in source.fields if f.name == name), None)
        theirs = next((f.type for f in target.fields if f.name == name), None)
        if mine is None or theirs is None or mine == theirs:
            field_type = mine or theirs
        elif functions.is_numeric(mine) and functions.is_numeric(theirs):
            field_type = functions.wider_numeric(theirs, mine)
        elif mine.base is BaseType.STRUCT and theirs.base is BaseType.STRUCT:
            field_type = struct_union(mine, theirs, what)
        else:
            raise StatementError(f"invalid input syntax for type {target.ksql_name}: {what} elements must all be of one type")
        if field_type is None:
            raise StatementError(f"invalid input syntax for type {target.ksql_name}: {what} elements must all be of one type")
        fields.append(StructField(name, field_type))
    return SqlType(BaseType.STRUCT, fields=tuple(fields))


def numeric_of_text(text: str, target: SqlType) -> SqlType:
    """The common type of a numeric list and a string literal spelling a number in it
    (CoercionUtil's resolveCommonNumericTypeFromStringLiteral)."""
    try:
        value = decimal.Decimal(text.strip())
    except decimal.InvalidOperation:
        raise StatementError(f'invalid input syntax for type {target.base.value}: "{text}".') from None
    if not value.is_finite():
        raise StatementError(f'invalid input syntax for type {target.base.value}: "{text}".')
    if "." not in text and "e" not in text.lower():
        spelled = t.INTEGER if -(2 ** 31) < value < 2 ** 31 - 1 else t.BIGINT if -(2 ** 63) < value < 2 ** 63 - 1 else None
        if spelled is not None:
            widened = functions.wider_numeric(spelled, target) if target.base is not BaseType.DECIMAL else \
                functions.wider_numeric(functions.decimal_of(spelled), target)
            return widened or target
    exponent = value.as_tuple().exponent
    scale = max(-exponent, 0) if isinstance(exponent, int) else 0
    digits = len(str(abs(value.quantize(decimal.Decimal(1).scaleb(-scale)))).replace(".", "").lstrip("0")) or 1
    spelled = t.decimal(max(digits, scale, 1), scale)
    if target.base is BaseType.DOUBLE:
        return t.DOUBLE
    return functions.wider_numeric(spelled, target if target.base is BaseType.DECIMAL else functions.decimal_of(target)) \
        or target


def boolean_of_text(text: str) -> bool:
    """ksqlDB's SqlBooleans reading of a string literal (any prefix of true / false / yes / no)."""
    lowered = text.strip().lower()
    if not lowered or not any(word.startswith(lowered) for word in ("true", "false", "yes", "no")):
        raise StatementError(f'invalid input syntax for type BOOLEAN: "{text}".')
    return any(word.startswith(lowered) for word in ("true", "yes"))


def coerced(item: exp.Expr, common: SqlType) -> exp.Expr:
    """A constructor's element as ``common``: a literal converted, a STRUCT of other fields cast
    to the unified STRUCT, anything else as it is (Spark widens numbers in ARRAY and MAP itself)."""
    ty = _type_of(item)
    if ty is None or ty == common:
        return item
    out: exp.Expr
    if isinstance(item, exp.Literal) and item.is_string and functions.is_numeric(common):
        out = exp.Cast(this=exp.Literal.number(str(item.this).strip()),
                       to=exp.DataType.build(functions.spark_type_name(common), dialect="spark"))
    elif isinstance(item, exp.Literal) and item.is_string and common.base is BaseType.BOOLEAN:
        out = exp.Boolean(this=boolean_of_text(str(item.this)))
    elif common.base is BaseType.STRING and isinstance(item, (exp.Literal, exp.Boolean)):
        out = exp.Literal.string(("true" if item.this else "false") if isinstance(item, exp.Boolean) else str(item.this))
    elif common.base is BaseType.STRUCT and ty.base is BaseType.STRUCT:
        return cast_to(item, common)
    else:
        return item
    out.meta[TYPE_KEY] = common
    return out


def cast_to(item: exp.Expr, target: SqlType) -> exp.Expr:
    """``item`` as a value of ``target``: a typed CAST, which the compiler turns into ksqlDB's
    by-name STRUCT cast (``compile.complex_values``); NULL and values already of ``target`` as they are."""
    ty = _type_of(item)
    if ty is None or ty == target:
        return item
    out = exp.Cast(this=item, to=exp.DataType.build(functions.spark_type_name(target), dialect="spark"))
    out.meta[TYPE_KEY] = target
    return out
