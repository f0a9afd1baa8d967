"""The common type of an IN list, found as ksqlDB's ``CoercionUtil.coerceUserList`` finds it, so a
list that does not fit is refused where and as ksqlDB refuses it (pure; the expression resolver
calls ``list_type``).

ksqlDB walks the tested value and then each non-NULL item in order, keeping a running common type
(the tested value's at first): numbers widen it (INTEGER < BIGINT < DECIMAL < DOUBLE, DECIMALs as
``DecimalUtil.widen``: ``functions.wider_numeric``); an ``ARRAY[...]``, ``MAP(...)`` or
``STRUCT(...)`` constructor must be of the common type's kind and its elements are walked against
the element type; a string literal tested against a number or a BOOLEAN must parse as one
(``invalid input syntax for type BIGINT: "x".``), any literal fits a STRING; anything else must be
comparable with the common type. The first item that does not fit is reported with the common
type it was held against: ``operator does not exist: DECIMAL(12, 2) = BOOLEAN (true)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlglot import exp

from oncestream.sql.language import functions
from oncestream.sql.language import types as t
from oncestream.sql.language.coercion import boolean_of_text, numeric_of_text
from oncestream.sql.language.types import BaseType, SqlType


@dataclass(frozen=True)
class Mismatch:
    """Item ``index`` of the list (0-based, the tested value not counted), of type ``item_type``,
    does not fit ``common``, the list's common type up to it."""

    index: int
    common: SqlType
    item_type: SqlType


class _DoesNotFit(Exception):
    """An element of a constructor does not fit: the constructor itself is reported."""


def _wider(a: SqlType, b: SqlType) -> SqlType:
    wider = functions.wider_numeric(a, b)
    assert wider is not None
    return wider


def _widened(common: SqlType, own: SqlType) -> SqlType:
    """``common`` with the numbers inside a comparable ``own`` widened into it: an ARRAY<INT>
    tested against an ARRAY<BIGINT> column is compared as ARRAY<BIGINT>, never narrowed."""
    if functions.is_numeric(common) and functions.is_numeric(own):
        return _wider(common, own)
    if common.base is BaseType.ARRAY and own.base is BaseType.ARRAY and common.element and own.element:
        return t.array_of(_widened(common.element, own.element))
    if common.base is BaseType.MAP and own.base is BaseType.MAP and common.element and own.element:
        return t.map_of(common.key or t.STRING, _widened(common.element, own.element))
    if common.base is BaseType.STRUCT and own.base is BaseType.STRUCT:
        theirs = {f.name: f.type for f in own.fields}
        return t.struct_of(*((f.name, _widened(f.type, theirs[f.name]) if f.name in theirs else f.type)
                             for f in common.fields))
    return common


class _Walk:
    def __init__(self, type_of: Callable[[exp.Expr], SqlType | None],
                 comparable: Callable[[SqlType, SqlType], bool]) -> None:
        self.type_of = type_of
        self.comparable = comparable

    def common(self, node: exp.Expr, common: SqlType | None) -> SqlType | None:
        """``common`` with ``node`` walked into it; raises ``_DoesNotFit``."""
        if isinstance(node, exp.Paren):
            return self.common(node.this, common)
        own = self.type_of(node)
        if common is None:
            return own
        if own is None or isinstance(node, exp.Null):
            return common
        if isinstance(node, exp.Array):
            if common.base is not BaseType.ARRAY or common.element is None:
                raise _DoesNotFit
            return t.array_of(self._elements(common.element, node.expressions))
        if isinstance(node, (exp.VarMap, exp.Map)):
            if common.base is not BaseType.MAP or common.key is None or common.element is None:
                raise _DoesNotFit
            key = self._elements(common.key, node.args["keys"].expressions)
            return t.map_of(key, self._elements(common.element, node.args["values"].expressions))
        if isinstance(node, exp.Struct):
            return self._struct(common, node)
        if isinstance(node, exp.Literal) and node.is_string:
            if functions.is_numeric(common):
                return numeric_of_text(str(node.this), common)
            if common.base is BaseType.BOOLEAN:
                boolean_of_text(str(node.this))      # raises ksqlDB's text for a non-boolean word
                return common
        if common.base is BaseType.STRING and isinstance(node, (exp.Literal, exp.Boolean)):
            return common    # the lax coercion of literals: 10 and true are read as '10' and 'true'
        if functions.is_numeric(common) and functions.is_numeric(own):
            return _wider(common, own)
        if not self.comparable(common, own):
            raise _DoesNotFit
        return _widened(common, own)

    def _elements(self, target: SqlType, items: Sequence[exp.Expr]) -> SqlType:
        common: SqlType | None = target
        for item in items:
            common = self.common(item, common)
        return common or target

    def _struct(self, common: SqlType, node: exp.Struct) -> SqlType:
        if common.base is not BaseType.STRUCT:
            raise _DoesNotFit
        theirs = {f.name: f.type for f in common.fields}
        fields: dict[str, SqlType] = dict(theirs)
        for field in node.expressions:
            if isinstance(field, exp.PropertyEQ):      # as written: F0 := v
                name, value = field.this.name, field.expression
            elif isinstance(field, exp.Alias):         # as resolved: v AS F0
                name, value = field.alias, field.this
            else:
                continue
            walked = self.common(value, theirs[name]) if name in theirs else self.type_of(value)
            fields[name] = walked or t.STRING
        return t.struct_of(*fields.items())


def list_type(tested: SqlType | None, items: Sequence[exp.Expr],
              type_of: Callable[[exp.Expr], SqlType | None],
              comparable: Callable[[SqlType, SqlType], bool]) -> SqlType | Mismatch | None:
    """The common type of the ``tested`` value's type and every one of ``items`` (the IN list as
    written, each typed by ``type_of``; None if all are NULL), or the first item that does not fit
    it (a ``Mismatch``); ``comparable`` says whether two non-constructor types compare. Raises
    ``StatementError`` for a string literal that does not parse as the number or BOOLEAN it is
    tested against. The compiler casts complex values to the common type, so Spark's IN, which
    wants one type, compares STRUCTs by field name as ksqlDB does (``STRUCT(B := 2, A := 4)``)."""
    walk = _Walk(type_of, comparable)
    common = tested
    for index, item in enumerate(items):
        try:
            common = walk.common(item, common)
        except _DoesNotFit:
            assert common is not None
            own = type_of(item)
            assert own is not None
            return Mismatch(index, common, own)
    return common
