"""ksqlDB's set-like ARRAY functions (``ARRAY_DISTINCT``, ``ARRAY_REMOVE``, ``ARRAY_UNION``,
``ARRAY_INTERSECT``, ``ARRAY_EXCEPT`` and the aggregate ``COLLECT_SET``) as Spark SQL, for the catalog in ``functions``.

ksqlDB's UDFs build a ``LinkedHashSet`` (first occurrences, in order) or filter with
``Objects.equals``: a NULL element is a value like any other, and two MAPs are equal when their
entries are. Spark's ``array_distinct`` & co. agree on the order and the NULLs but refuse elements
holding a MAP (``INVALID_ORDERING_TYPE``); for those the translation compares elements in
``comparable_form``'s map-free form with ``exists`` over the earlier elements (quadratic in the
array's length, as small as ksqlDB's arrays are). ``ARRAY_REMOVE`` is always a ``filter``: Spark's
``array_remove`` answers NULL for a NULL victim, where ksqlDB removes the NULL elements.
"""

from __future__ import annotations

from collections.abc import Callable

from oncestream.sql.language.comparable_form import map_free
from oncestream.sql.language.function_catalog import CallSite
from oncestream.sql.language.types import BaseType, SqlType, holds_map

# the translations' own lambda parameters (ksqlDB's lambda names are emitted quoted)
_X, _E, _J = "__os_sx", "__os_se", "__os_sj"


def _element_type(c: CallSite) -> SqlType | None:
    for ty in c.types:
        if ty is not None and ty.base is BaseType.ARRAY:
            return ty.element
    return None


def _same(x: str, y: str, element: SqlType | None) -> str:
    """Null-safe equality of two elements as Java's ``Objects.equals``."""
    if element is not None and holds_map(element):
        return f"{map_free(x, element, 10)} <=> {map_free(y, element, 20)}"
    return f"{x} <=> {y}"


def _distinct(a: str, element: SqlType | None) -> str:
    """The first occurrence of each distinct element, in order."""
    if element is None or not holds_map(element):
        return f"array_distinct({a})"
    earlier = f"slice({a}, 1, {_J})"
    return f"filter({a}, ({_X}, {_J}) -> NOT exists({earlier}, {_E} -> {_same(_E, _X, element)}))"


def array_distinct(c: CallSite) -> str:
    """``ARRAY_DISTINCT(a)``."""
    return _distinct(c.args[0], _element_type(c))


def array_remove(c: CallSite) -> str:
    """``ARRAY_REMOVE(a, victim)``: every element not equal to the victim."""
    element = _element_type(c)
    return f"filter({c.args[0]}, {_X} -> NOT ({_same(_X, c.args[1], element)}))"


def _set_operation(kind: str) -> Callable[[CallSite], str]:
    """Spark's ``array_<kind>``, except over elements holding MAPs: then the distinct elements of
    the first array (and the second's, for a union) kept or dropped by an ``exists`` over the
    other array. A NULL array gives NULL, as in both."""
    def rule(c: CallSite) -> str:
        left, right = c.args[0], c.args[1]
        element = _element_type(c)
        if element is None or not holds_map(element):
            return f"array_{kind}({left}, {right})"
        if kind == "union":
            result = _distinct(f"concat({left}, {right})", element)
        else:
            present = f"exists({right}, {_E} -> {_same(_E, _X, element)})"
            kept = f"filter({left}, {_X} -> {'' if kind == 'intersect' else 'NOT '}{present})"
            result = _distinct(kept, element)
        return f"CASE WHEN {left} IS NULL OR {right} IS NULL THEN NULL ELSE {result} END"
    return rule


def collect_all(value_sql: str) -> str:
    """Every value of the group in arrival order, NULLs included (an aggregate): Spark's
    ``collect_list`` drops NULLs, so each value is collected inside a struct and unwrapped."""
    return f"transform(collect_list(named_struct('v', {value_sql})), {_X} -> {_X}.v)"


def collect_set(c: CallSite) -> str:
    """``COLLECT_SET(x)`` (an aggregate): ksqlDB's CollectSetUdaf adds each value not yet in its
    list, a NULL included, so the set keeps the first-seen order. Spark's ``collect_set`` drops
    NULLs, orders by hash and refuses MAPs: the values are collected wrapped in a struct (which
    ``collect_list`` keeps even when the value is NULL), unwrapped and made distinct here."""
    element = c.types[0] if c.types else None
    return _distinct(collect_all(c.args[0]), element)


array_union = _set_operation("union")
array_intersect = _set_operation("intersect")
array_except = _set_operation("except")
