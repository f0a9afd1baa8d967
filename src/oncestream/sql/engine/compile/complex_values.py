"""ksqlDB's rules for ARRAY, MAP and STRUCT values where Spark's operators differ, as Spark SQL
text over an already translated operand (``compile.expressions`` splices it in):

- **Equality** (``=``, ``<>``, ``IS [NOT] DISTINCT FROM``) over values holding MAPs: Spark refuses
  it (``INVALID_ORDERING_TYPE``); both sides are compared in ``language.comparable_form``'s
  map-free form (``compile.expressions`` applies it).
- **CAST between STRUCTs** matches fields by name (ksqlDB's ``CastEvaluator``: a target field the
  source lacks is null); Spark's cast goes by position.
- **CAST to STRING** of a complex value writes Java's ``toString`` of ksqlDB's value: ``[1, 3]``
  for a list, ``{k=1}`` for a map, ``Struct{F0=1,f1=3}`` for a Connect struct (its null fields left
  out); Spark writes ``{k -> 1}`` and ``{1, 3}``.

A null value stays null in each.
"""

from __future__ import annotations

from oncestream.sql.language.comparable_form import quote_name as _quote
from oncestream.sql.language.comparable_form import text_literal as _text
from oncestream.sql.language.function_catalog import spark_type_name
from oncestream.sql.language.types import BaseType, SqlType

_COMPLEX = (BaseType.ARRAY, BaseType.MAP, BaseType.STRUCT)


def cast(sql: str, source: SqlType | None, target: SqlType, depth: int = 0) -> str | None:
    """Spark SQL for ``CAST(sql AS target)`` with ksqlDB's meaning, or None where Spark's own CAST
    already has it (no STRUCT cast or complex-to-STRING inside)."""
    if source is None:
        return None
    var = f"__cv{depth}"
    if target.base is BaseType.STRING and source.base in _COMPLEX:
        return to_string(sql, source, depth)
    if source.base is BaseType.STRUCT and target.base is BaseType.STRUCT:
        theirs = {f.name: f.type for f in source.fields}
        fields = []
        for f in target.fields:
            if f.name in theirs:
                value = cast_any(f"({sql}).{_quote(f.name)}", theirs[f.name], f.type, depth + 1)
            else:
                value = f"CAST(NULL AS {spark_type_name(f.type)})"
            fields.append(f"{_text(f.name)}, {value}")
        return f"CASE WHEN {sql} IS NULL THEN NULL ELSE named_struct({', '.join(fields)}) END"
    if source.base is BaseType.ARRAY and target.base is BaseType.ARRAY and source.element and target.element:
        inner = cast(var, source.element, target.element, depth + 1)
        return None if inner is None else f"transform({sql}, {var} -> {inner})"
    if source.base is BaseType.MAP and target.base is BaseType.MAP and source.element and target.element:
        inner = cast(var, source.element, target.element, depth + 1)
        key = f"{var}k"
        return None if inner is None else \
            f"transform_values({sql}, ({key}, {var}) -> {inner})"
    return None


def cast_any(sql: str, source: SqlType, target: SqlType, depth: int) -> str:
    """``cast``, or Spark's CAST where that is ksqlDB's."""
    return cast(sql, source, target, depth) or f"CAST({sql} AS {spark_type_name(target)})"


def to_string(sql: str, t: SqlType, depth: int = 0) -> str:
    """Java's ``toString`` of ksqlDB's value ``sql`` of type ``t`` (a list, map or Connect struct,
    however nested; a null inside is ``null``), null for a null value."""
    var = f"__cv{depth}"
    element = t.element

    def part(inner_sql: str, inner: SqlType) -> str:
        shown = to_string(inner_sql, inner, depth + 1) if inner.base in _COMPLEX else f"CAST({inner_sql} AS STRING)"
        return f"coalesce({shown}, 'null')"

    if t.base is BaseType.ARRAY and element is not None:
        return f"concat('[', array_join(transform({sql}, {var} -> {part(var, element)}), ', '), ']')"
    if t.base is BaseType.MAP and element is not None:
        entry = f"concat({var}.key, '=', {part(f'{var}.value', element)})"
        return f"concat('{{', array_join(transform(map_entries({sql}), {var} -> {entry}), ', '), '}}')"
    if t.base is BaseType.STRUCT:
        # Connect's Struct.toString leaves null fields out
        fields = []
        for f in t.fields:
            field_sql = f"({sql}).{_quote(f.name)}"
            shown = to_string(field_sql, f.type, depth + 1) if f.type.base in _COMPLEX else f"CAST({field_sql} AS STRING)"
            fields.append(f"CASE WHEN {field_sql} IS NULL THEN NULL ELSE concat({_text(f.name + '=')}, {shown}) END")
        listed = f"concat_ws(',', {', '.join(fields)})" if fields else "''"
        return f"CASE WHEN {sql} IS NULL THEN NULL ELSE concat('Struct{{', {listed}, '}}') END"
    return f"CAST({sql} AS STRING)"
