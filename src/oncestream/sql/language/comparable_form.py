"""A Spark-comparable form of values that hold MAPs.

Spark refuses to compare, hash or order a MAP (``INVALID_ORDERING_TYPE``): ``=``, ``IN``,
``array_distinct``, ``array_remove``, ``array_union``... all fail on values with a MAP inside.
ksqlDB compares them as Java's ``Map.equals`` does (same keys, equal values, in any order), which
is equality of the map's entries sorted by key. ``map_free`` rewrites a value into that form, so
a comparison over it means ksqlDB's equality; it lives in the language layer because both the
compiled operators (``engine/compile/complex_values``) and the catalog's collection functions
(``functions_collections``) compare such values.
"""

from __future__ import annotations

from oncestream.sql.language.types import BaseType, SqlType, holds_map


def quote_name(name: str) -> str:
    """A Spark SQL identifier for a field name."""
    return "`" + name.replace("`", "``") + "`"


def text_literal(value: str) -> str:
    """A Spark SQL string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def map_free(sql: str, t: SqlType, depth: int = 0) -> str:
    """``sql`` (of type ``t``) with every MAP inside it replaced by its entries sorted by key: a
    value Spark's ``=`` accepts, equal exactly when ksqlDB's values are equal."""
    if not holds_map(t):
        return sql
    var = f"__cv{depth}"
    element = t.element
    if t.base is BaseType.MAP and element is not None:
        if not holds_map(element):
            return f"array_sort(map_entries({sql}))"
        value = map_free(f"{var}.value", element, depth + 1)
        return f"array_sort(transform(map_entries({sql}), {var} -> named_struct('key', {var}.key, 'value', {value})))"
    if t.base is BaseType.ARRAY and element is not None:
        return f"transform({sql}, {var} -> {map_free(var, element, depth + 1)})"
    fields = ", ".join(f"{text_literal(f.name)}, {map_free(f'({sql}).{quote_name(f.name)}', f.type, depth + 1)}"
                       for f in t.fields)
    return f"CASE WHEN {sql} IS NULL THEN NULL ELSE named_struct({fields}) END"
