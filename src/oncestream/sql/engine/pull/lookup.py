"""Which store keys a pull query has to read: key lookups, key ranges, or a full scan.

The store of a table is keyed by the changelog's record keys, i.e. the key columns encoded in the
table's KEY_FORMAT by ``oncestream.sql.engine.serde`` (plus the window for a windowed table:
``key || start`` for TUMBLING/HOPPING, ``key || end || start`` for SESSION). This module reads
the WHERE clause's top-level conjuncts and derives a ``KeyAccess``:

- every key column pinned by ``=`` or ``IN`` -> point reads (``get`` per key; for a windowed
  table a prefix scan per key, or a ``get`` when ``WINDOWSTART =`` pins a time window too);
- one key column bounded by ``> >= < <=`` / ``BETWEEN`` -> a range scan over the raw key bytes,
  but only where the encoding's byte order is the value order: KAFKA ``STRING`` and ``BYTES``
  (UTF-8 byte order is code point order), KAFKA ``INTEGER``/``BIGINT`` when the lower bound is
  >= 0 (big-endian two's complement orders non-negative values; negative ones sort after them),
  non-windowed tables only; everything else (JSON and DELIMITED keys, DOUBLE, negative or open
  lower bounds, windowed tables) scans the whole store and filters;
- otherwise a full scan.

Whatever the access path, the complete WHERE is evaluated on every row read: the access path
only narrows what is read, so it never changes a result (a scan over ``"ab"`` that also reaches
``"abc"`` is filtered out, a bound's inclusiveness is checked by the filter).
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from sqlglot import exp

from oncestream.sql.engine.serde import RecordLayout, SerdeError
from oncestream.sql.language.catalog import WINDOWEND, WINDOWSTART, Format, SourceInfo
from oncestream.sql.language.evaluate import column_name, constant_value, is_constant
from oncestream.sql.language.sql_ast import WindowKind
from oncestream.sql.language.types import BaseType

# Keys of at most this many combinations are read one by one; more (a large IN on several key
# columns) falls back to a scan rather than building a huge candidate list.
MAX_POINT_KEYS = 10_000

_FLIPPED: dict[type[exp.Expr], type[exp.Expr]] = {
    exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE, exp.EQ: exp.EQ}


@dataclass
class Bounds:
    """Constraints on one column from the WHERE conjuncts: allowed values (``=``, ``IN``;
    None when not pinned) and the tightest lower/upper bound seen (inclusive or not)."""

    points: list[Any] | None = None
    lower: tuple[Any, bool] | None = None
    upper: tuple[Any, bool] | None = None

    def pin(self, values: list[Any]) -> None:
        if self.points is None:
            self.points = list(values)
        else:
            self.points = [v for v in self.points if v in values]

    def bound_below(self, value: Any, inclusive: bool) -> None:
        if self.lower is None or value > self.lower[0] or (value == self.lower[0] and not inclusive):
            self.lower = (value, inclusive)

    def bound_above(self, value: Any, inclusive: bool) -> None:
        if self.upper is None or value < self.upper[0] or (value == self.upper[0] and not inclusive):
            self.upper = (value, inclusive)


@dataclass
class KeyAccess:
    """How to read the store: ``kind`` is ``points`` (``keys`` are encoded keys, or key
    prefixes for a windowed table with ``prefix`` True), ``range`` (``start``/``end`` raw
    bytes, end exclusive) or ``scan``."""

    kind: str
    keys: list[bytes] = field(default_factory=list)
    prefix: bool = False
    start: bytes | None = None
    end: bytes | None = None


def conjuncts(where: exp.Expr | None) -> list[exp.Expr]:
    """The top-level AND terms of ``where`` (parentheses unwrapped)."""
    if where is None:
        return []
    while isinstance(where, exp.Paren):
        where = where.this
    if isinstance(where, exp.And):
        return conjuncts(where.this) + conjuncts(where.expression)
    return [where]


def _constant(node: exp.Expr) -> tuple[bool, Any]:
    if not is_constant(node):
        return False, None
    try:
        return True, constant_value(node)
    except Exception:  # noqa: BLE001 - an odd constant just means "no key access"; the filter reports it
        return False, None


def column_bounds(where: exp.Expr | None) -> dict[str, Bounds]:
    """Per column name, what the WHERE's conjuncts say about it (comparisons with constants)."""
    out: dict[str, Bounds] = {}
    for term in conjuncts(where):
        _add_term(term, out)
    return out


def _add_term(term: exp.Expr, out: dict[str, Bounds]) -> None:
    if isinstance(term, exp.In) and isinstance(term.this, exp.Column) and term.expressions:
        values = []
        for item in term.expressions:
            ok, value = _constant(item)
            if not ok or value is None:
                return
            values.append(value)
        out.setdefault(column_name(term.this), Bounds()).pin(values)
        return
    if isinstance(term, exp.Between) and isinstance(term.this, exp.Column):
        ok_low, low = _constant(term.args["low"])
        ok_high, high = _constant(term.args["high"])
        bounds = out.setdefault(column_name(term.this), Bounds())
        if ok_low and low is not None:
            bounds.bound_below(low, True)
        if ok_high and high is not None:
            bounds.bound_above(high, True)
        return
    op = type(term)
    if op not in _FLIPPED:
        return
    left, right = term.this, term.expression
    if not isinstance(left, exp.Column):
        left, right, op = right, left, _FLIPPED[op]
    if not isinstance(left, exp.Column):
        return
    ok, value = _constant(right)
    if not ok or value is None:
        return
    bounds = out.setdefault(column_name(left), Bounds())
    if op is exp.EQ:
        bounds.pin([value])
    elif op in (exp.GT, exp.GTE):
        bounds.bound_below(value, op is exp.GTE)
    else:
        bounds.bound_above(value, op is exp.LTE)


def _unwindowed(layout: RecordLayout) -> RecordLayout:
    return replace(layout, window=None, window_size_ms=None)


def _typed(value: Any, base: BaseType) -> Any:
    """``value`` as the key column's Python type, or raise ValueError (then no key access)."""
    if base in (BaseType.INTEGER, BaseType.BIGINT):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(value)
        return value
    if base is BaseType.STRING:
        if not isinstance(value, str):
            raise ValueError(value)
        return value
    if base is BaseType.DOUBLE:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(value)
        return float(value)
    if base is BaseType.BOOLEAN and isinstance(value, bool):
        return value
    raise ValueError(value)


def plan_key_access(source: SourceInfo, layout: RecordLayout, where: exp.Expr | None) -> KeyAccess:
    """The access path for ``where`` over ``source``'s store (see the module docstring)."""
    keys = source.key_columns
    if not keys or source.key_format is Format.NONE:
        return KeyAccess("scan")
    bounds = column_bounds(where)
    try:
        points = _point_keys(source, layout, bounds)
    except (ValueError, SerdeError):
        points = None
    if points is not None:
        return points
    if source.window is None and len(keys) == 1:
        ranged = _range(source, layout, bounds.get(keys[0].name))
        if ranged is not None:
            return ranged
    return KeyAccess("scan")


def _point_keys(source: SourceInfo, layout: RecordLayout, bounds: dict[str, Bounds]) -> KeyAccess | None:
    keys = source.key_columns
    pinned = [bounds[c.name].points if c.name in bounds else None for c in keys]
    if any(p is None for p in pinned):
        return None
    choices = [[_typed(v, c.type.base) for v in p or []] for c, p in zip(keys, pinned, strict=True)]
    count = 1
    for values in choices:
        count *= len(values)
    if count > MAX_POINT_KEYS:
        return None
    base_layout = _unwindowed(layout)
    encoded: list[bytes] = []
    for combo in itertools.product(*choices):
        data = base_layout.encode_key({c.name: v for c, v in zip(keys, combo, strict=True)})
        if data is not None and data not in encoded:
            encoded.append(data)
    window = source.window
    if window is None:
        return KeyAccess("points", keys=encoded)
    start = bounds.get(WINDOWSTART)
    if window.kind is not WindowKind.SESSION and start is not None and start.points is not None:
        starts = [s for s in start.points if isinstance(s, int) and not isinstance(s, bool)]
        if len(starts) == len(start.points):
            # A time window is identified by its start: key || start is the exact store key.
            exact = [k + struct.pack(">q", s) for k in encoded for s in dict.fromkeys(starts)]
            return KeyAccess("points", keys=exact)
    return KeyAccess("points", keys=encoded, prefix=True)


def _range(source: SourceInfo, layout: RecordLayout, bounds: Bounds | None) -> KeyAccess | None:
    if bounds is None or source.key_format is not Format.KAFKA:
        return None
    column = source.key_columns[0]
    base = column.type.base
    try:
        lower = _typed(bounds.lower[0], base) if bounds.lower is not None else None
        upper = _typed(bounds.upper[0], base) if bounds.upper is not None else None
    except ValueError:
        return None
    if base in (BaseType.STRING, BaseType.BYTES):
        start = layout.encode_key({column.name: lower}) if lower is not None else None
        end = (layout.encode_key({column.name: upper}) or b"") + b"\x00" if upper is not None else None
        return KeyAccess("range", start=start, end=end)
    if base in (BaseType.INTEGER, BaseType.BIGINT):
        if lower is None or lower < 0:
            return None   # negative keys sort after the positive ones in two's complement bytes
        start = layout.encode_key({column.name: lower})
        width = 4 if base is BaseType.INTEGER else 8
        if upper is not None and upper < 0:
            return KeyAccess("points", keys=[])   # lower >= 0 > upper: nothing matches
        # Past the last non-negative value: 0x80 followed by zeros is the first negative one.
        end = (layout.encode_key({column.name: upper}) or b"") + b"\x00" if upper is not None else b"\x80" + b"\x00" * (width - 1)
        return KeyAccess("range", start=start, end=end)
    return None


def read_candidates(access: KeyAccess, reader: Any) -> Iterator[tuple[bytes, bytes]]:
    """``(key, value)`` pairs of the store the access path covers (a superset of the matches)."""
    if access.kind == "points":
        for key in access.keys:
            if access.prefix:
                yield from reader.prefix(key)
            else:
                value = reader.get(key)
                if value is not None:
                    yield key, value
        return
    if access.kind == "range":
        yield from reader.range(access.start, access.end)
        return
    yield from reader.range()


__all__ = ["WINDOWEND", "WINDOWSTART", "Bounds", "KeyAccess", "column_bounds", "conjuncts",
           "plan_key_access", "read_candidates"]
