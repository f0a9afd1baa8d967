"""ksqlDB's undoable aggregate functions (``TableUdaf``: ``initialize``, ``aggregate``, ``undo``,
``map``) in plain Python, and the two per-key steps of a table aggregation built on them.

A table aggregation (``compile/table_aggregation.py``) runs in two stateful steps, each a pure
function here so that it can be tested without Spark:

- ``changelog_step`` (keyed by the source table's record key): the key's records of a micro-batch,
  in offset order, against the contribution its previous row made. Each record emits a retraction
  of the contribution before it and an addition of its own (the group may change); a tombstone, a
  row failing WHERE or a row whose GROUP BY expression is NULL adds nothing (but still retracts),
  as Kafka Streams' ``KTableRepartitionMap`` forwards it.
- ``group_step`` (keyed by the group): the deltas of a micro-batch, in the order of the records
  that caused them (a retraction before the addition of the same record), applied to the group's
  accumulators with ``add``/``undo``; the group's new results. A group whose rows are all gone is
  kept at its initial value (COUNT 0, SUM 0, ...): ksqlDB writes that value, not a tombstone
  (query-validation case "should count back to zero"); HAVING decides tombstones.

Accumulators are JSON values (the state store keeps them as JSON text). Only the functions
ksqlDB implements as ``TableUdaf`` can aggregate a table (``analyzer_aggregates.TABLE_AGGREGATES``,
which the analyzer checks): COUNT, SUM, AVG, COLLECT_LIST, STDDEV_SAMP / STDDEV_SAMPLE,
CORRELATION, HISTOGRAM, ATTR and SUM_LIST.
Integer sums wrap at 32 / 64 bits as Java's ``int`` / ``long`` do.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from oncestream.sql.language.functions_collections import HISTOGRAM_LIMIT

INT = "INTEGER"
BIGINT = "BIGINT"
DOUBLE = "DOUBLE"
DECIMAL = "DECIMAL"


class TableUdafError(ValueError):
    """An aggregate that cannot aggregate a table, or an argument type it does not take."""


def _wrap(value: int, bits: int) -> int:
    """Java's two's-complement overflow of an ``int`` (32) or ``long`` (64)."""
    half = 1 << (bits - 1)
    return ((value + half) % (1 << bits)) - half


def _integral_bits(arg_type: str) -> int | None:
    return {INT: 32, BIGINT: 64}.get(arg_type)


@dataclass(frozen=True)
class TableUdaf:
    """One aggregate call: ``initial`` accumulator, ``add``/``undo`` of one row's arguments, and
    ``result`` (the function's value; a DECIMAL as its text)."""

    name: str
    initial: Callable[[], Any]
    add: Callable[[Any, Sequence[Any]], Any]
    undo: Callable[[Any, Sequence[Any]], Any]
    result: Callable[[Any], Any]


def _number(arg_type: str) -> Callable[[Any], Any]:
    """An argument read from JSON (numbers parsed as Decimal) as the argument's type."""
    if arg_type == DECIMAL:
        return lambda v: Decimal(v)
    if arg_type == DOUBLE:
        return float
    return int


def _count(star: bool) -> TableUdaf:
    def add(acc: int, args: Sequence[Any]) -> int:
        return acc if (not star and args[0] is None) else acc + 1

    def undo(acc: int, args: Sequence[Any]) -> int:
        return acc if (not star and args[0] is None) else acc - 1

    return TableUdaf("COUNT", lambda: 0, add, undo, lambda acc: acc)


def _sum(arg_type: str) -> TableUdaf:
    bits, num = _integral_bits(arg_type), _number(arg_type)

    def combine(acc: Any, value: Any, sign: int) -> Any:
        if arg_type == DECIMAL:
            return str(Decimal(acc) + sign * value)
        total = acc + sign * value
        return _wrap(total, bits) if bits else total

    def add(acc: Any, args: Sequence[Any]) -> Any:
        return acc if args[0] is None else combine(acc, num(args[0]), 1)

    def undo(acc: Any, args: Sequence[Any]) -> Any:
        return acc if args[0] is None else combine(acc, num(args[0]), -1)

    zero: Callable[[], Any] = (lambda: "0") if arg_type == DECIMAL else (lambda: 0.0) if arg_type == DOUBLE else (lambda: 0)
    return TableUdaf("SUM", zero, add, undo, lambda acc: acc)


def _avg(arg_type: str) -> TableUdaf:
    # ksqlDB's AverageUdaf: STRUCT<SUM (the argument's type), COUNT>; 0.0 when COUNT is 0.
    bits, num = _integral_bits(arg_type), _number(arg_type)

    def step(acc: list[Any], args: Sequence[Any], sign: int) -> list[Any]:
        if args[0] is None:
            return acc
        total = acc[0] + sign * float(num(args[0])) if arg_type in (DOUBLE, DECIMAL) else acc[0] + sign * num(args[0])
        return [_wrap(total, bits) if bits else total, acc[1] + sign]

    def result(acc: list[Any]) -> float:
        return 0.0 if acc[1] == 0 else acc[0] / acc[1]

    return TableUdaf("AVG", lambda: [0, 0], lambda a, x: step(a, x, 1), lambda a, x: step(a, x, -1), result)


def _json_value(value: Any) -> Any:
    """A value as the accumulator keeps it (JSON: a Decimal becomes a number)."""
    if isinstance(value, Decimal):
        # only JSON numbers with a fraction or exponent are parsed as Decimal
        return float(value)
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    return value


def _collect_list() -> TableUdaf:
    # ksqlDB's CollectListUdaf: appends (NULLs too); undo removes the LAST occurrence of the value.
    def add(acc: list[Any], args: Sequence[Any]) -> list[Any]:
        return [*acc, _json_value(args[0])]

    def undo(acc: list[Any], args: Sequence[Any]) -> list[Any]:
        value = _json_value(args[0])
        for i in range(len(acc) - 1, -1, -1):
            if acc[i] == value:
                return acc[:i] + acc[i + 1:]
        return acc

    return TableUdaf("COLLECT_LIST", list, add, undo, lambda acc: acc)


def _stddev(arg_type: str, root: bool) -> TableUdaf:
    """ksqlDB's Youngs-Cramer accumulator STRUCT<SUM, COUNT, M2> with its undo, mapped to
    M2 / (COUNT - 1) (STDDEV_SAMP: ksqlDB's StandardDeviationSampUdaf answers the variance) or
    its square root (``root``: STDDEV_SAMPLE); 0.0 below two values."""
    bits, num = _integral_bits(arg_type), _number(arg_type)

    def delta(total: Any, count: int, value: Any) -> float:
        return float(value * (count + 1) - (total + value))

    def add(acc: list[Any], args: Sequence[Any]) -> list[Any]:
        if args[0] is None:
            return acc
        total, count, m2 = acc
        value = float(num(args[0])) if arg_type == DECIMAL else num(args[0])
        new_count = count + 1
        extra = delta(total, count, value) ** 2 / (new_count * (new_count - 1)) if count > 0 else 0.0
        new_total = total + value
        return [_wrap(new_total, bits) if bits else new_total, new_count, m2 + extra]

    def undo(acc: list[Any], args: Sequence[Any]) -> list[Any]:
        if args[0] is None:
            return acc
        total, count, m2 = acc
        value = float(num(args[0])) if arg_type == DECIMAL else num(args[0])
        new_count = count - 1
        less = delta(total, count, value) ** 2 / (new_count * (new_count + 1)) if new_count > 0 else 0.0
        new_total = total - value
        return [_wrap(new_total, bits) if bits else new_total, new_count, m2 - less]

    def result(acc: list[Any]) -> float:
        if acc[1] < 2:
            return 0.0
        variance = acc[2] / (acc[1] - 1)
        if not root:
            return variance
        return math.sqrt(variance) if variance >= 0 else math.nan     # Java's Math.sqrt of a negative

    zero = 0.0 if arg_type in (DOUBLE, DECIMAL) else 0
    return TableUdaf("STDDEV_SAMPLE" if root else "STDDEV_SAMP", lambda: [zero, 0, 0.0], add, undo, result)


def _correlation() -> TableUdaf:
    # ksqlDB's CorrelationUdaf: sums of x, y, x², y², xy and the count; rows with a NULL skipped.
    def step(acc: list[Any], args: Sequence[Any], sign: int) -> list[Any]:
        if args[0] is None or args[1] is None:
            return acc
        x, y = float(args[0]), float(args[1])
        return [acc[0] + sign * x, acc[1] + sign * y, acc[2] + sign * x * x, acc[3] + sign * y * y,
                acc[4] + sign * x * y, acc[5] + sign]

    def result(acc: list[Any]) -> float:
        sx, sy, sxx, syy, sxy, n = acc
        numerator = n * sxy - sx * sy
        denominator = math.sqrt((n * sxx - sx * sx) * (n * syy - sy * sy))
        if denominator == 0:
            # Java's double division: x/0 is NaN or +-Infinity.
            return math.nan if numerator == 0 else math.copysign(math.inf, numerator)
        return numerator / denominator

    return TableUdaf("CORRELATION", lambda: [0.0, 0.0, 0.0, 0.0, 0.0, 0],
                     lambda a, x: step(a, x, 1), lambda a, x: step(a, x, -1), result)


def _sum_list(list_type: str) -> TableUdaf:
    """ksqlDB's ListSumUdaf: each list's non-NULL elements added (undo: subtracted); INT/BIGINT
    wrap as Java's int/long. ``list_type`` is the argument's type, e.g. ``ARRAY<INTEGER>``."""
    element = list_type.removeprefix("ARRAY<").removesuffix(">")
    bits = _integral_bits(element)
    num: Callable[[Any], Any] = float if element == DOUBLE else int

    def step(acc: Any, args: Sequence[Any], sign: int) -> Any:
        if args[0] is None:
            return acc
        total = acc + sign * sum(num(v) for v in args[0] if v is not None)
        return _wrap(total, bits) if bits else total

    zero: Callable[[], Any] = (lambda: 0.0) if element == DOUBLE else (lambda: 0)
    return TableUdaf("SUM_LIST", zero, lambda a, x: step(a, x, 1), lambda a, x: step(a, x, -1), lambda acc: acc)


def _histogram() -> TableUdaf:
    """ksqlDB's HistogramUdaf: value -> count, a value removed when its count falls below 1.
    NULL values are not counted (as the stream aggregation's collect_list skips them: a map key
    cannot be NULL in the formats ksqlDB writes). The accumulator is [[value, count], ...] in
    first-seen order."""
    def add(acc: list[list[Any]], args: Sequence[Any]) -> list[list[Any]]:
        value = args[0]
        if value is None:
            return acc
        for i, (seen, count) in enumerate(acc):
            if seen == value:
                return [*acc[:i], [seen, count + 1], *acc[i + 1:]]
        return [*acc, [value, 1]] if len(acc) < HISTOGRAM_LIMIT else acc

    def undo(acc: list[list[Any]], args: Sequence[Any]) -> list[list[Any]]:
        value = args[0]
        out = []
        for seen, count in acc:
            if seen == value:
                count -= 1
            if count >= 1:
                out.append([seen, count])
        return out

    return TableUdaf("HISTOGRAM", list, add, undo, lambda acc: {value: count for value, count in acc})


def _attr(arg_type: str) -> TableUdaf:
    """ksqlDB's Attr: [value, count] entries (NULL is a value; a count never below 0); the
    result is the one value whose count is positive, else NULL. A DECIMAL is kept as its text,
    exact, as SUM keeps it."""
    def key(value: Any) -> Any:
        if value is None:
            return None
        return str(Decimal(value)) if arg_type == DECIMAL else _json_value(value)

    def update(acc: list[list[Any]], args: Sequence[Any], step: int) -> list[list[Any]]:
        value = key(args[0])
        for i, (seen, count) in enumerate(acc):
            if seen == value:
                return [*acc[:i], [seen, max(0, count + step)], *acc[i + 1:]]
        return [*acc, [value, step]] if step > 0 else acc

    def result(acc: list[list[Any]]) -> Any:
        present = [seen for seen, count in acc if count > 0]
        return present[0] if len(present) == 1 else None

    return TableUdaf("ATTR", list, lambda a, x: update(a, x, 1), lambda a, x: update(a, x, -1), result)


def table_udaf(name: str, arg_types: Sequence[str], star: bool = False) -> TableUdaf:
    """The undoable form of aggregate ``name`` over arguments of ``arg_types`` (ksqlDB base type
    names); ``star`` for COUNT(*) / COUNT()."""
    upper = name.upper()
    numeric = (INT, BIGINT, DOUBLE, DECIMAL)
    first = arg_types[0] if arg_types else None
    if upper == "COUNT":
        return _count(star or not arg_types)
    if upper in ("SUM", "AVG", "STDDEV_SAMP", "STDDEV_SAMPLE") and first not in numeric:
        raise TableUdafError(f"Function '{upper}' does not accept parameters ({first}).")
    if upper == "SUM":
        return _sum(str(first))
    if upper == "AVG":
        return _avg(str(first))
    if upper == "COLLECT_LIST":
        return _collect_list()
    if upper in ("STDDEV_SAMP", "STDDEV_SAMPLE"):
        return _stddev(str(first), root=upper == "STDDEV_SAMPLE")
    if upper == "CORRELATION":
        return _correlation()
    if upper == "SUM_LIST":
        return _sum_list(str(first))
    if upper == "HISTOGRAM":
        return _histogram()
    if upper == "ATTR":
        return _attr(str(first))
    raise TableUdafError(unsupported_message([upper]))


def unsupported_message(names: Sequence[str]) -> str:
    """ksqlDB's error for aggregates that cannot aggregate a table (SchemaKGroupedTable)."""
    joined = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return (f"The aggregation function{'s' if len(names) > 1 else ''} {joined} cannot be applied to a table source, "
            "only to a stream source.")


# -- the two steps --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChangeRow:
    """One source-table record of a key: its position, whether it holds a row that aggregates
    (not a tombstone, passing WHERE), its group (JSON text; None when a GROUP BY expression is
    NULL) and the aggregate arguments (JSON text)."""

    partition: int
    offset: int
    present: bool
    group: str | None
    args: str | None


@dataclass(frozen=True)
class Delta:
    """A contribution to a group: +1 (added) or -1 (retracted), ordered by the record that caused
    it (``seq`` 0 for a retraction, 1 for an addition of the same record)."""

    group: str
    args: str
    sign: int
    partition: int
    offset: int
    seq: int

    def order(self) -> tuple[int, int, int]:
        return (self.partition, self.offset, self.seq)


Contribution = tuple[str, str]   # (group JSON, args JSON) a key's current row adds to its group


def changelog_step(rows: Sequence[ChangeRow], previous: Contribution | None) -> tuple[list[Delta], Contribution | None]:
    """One source key's records of a micro-batch, in offset order, against its previous
    contribution: the deltas to send to the groups and the contribution to keep. Every record
    retracts the contribution before it and adds its own, as Kafka Streams forwards each change,
    so a group a row passes through within the batch is written too (at its value after the
    batch, e.g. COUNT 0), as ksqlDB's changelog has it."""
    deltas: list[Delta] = []
    current = previous
    for row in sorted(rows, key=lambda r: (r.partition, r.offset)):
        if current is not None:
            deltas.append(Delta(current[0], current[1], -1, row.partition, row.offset, 0))
        current = (row.group, row.args or "{}") if row.present and row.group is not None else None
        if current is not None:
            deltas.append(Delta(current[0], current[1], 1, row.partition, row.offset, 1))
    return deltas, current


def group_step(deltas: Sequence[Delta], accumulators: list[Any] | None, udafs: Sequence[TableUdaf],
               arg_slices: Sequence[Sequence[str]], parse: Callable[[str], dict[str, Any]]) -> tuple[list[Any], list[Any]]:
    """One group's deltas of a micro-batch applied (in record order) to its accumulators (None:
    a new group). ``arg_slices[i]`` names the fields of the args JSON that are aggregate ``i``'s
    arguments. Returns (results, accumulators to keep)."""
    accs = list(accumulators) if accumulators is not None else [u.initial() for u in udafs]
    for delta in sorted(deltas, key=Delta.order):
        values = parse(delta.args)
        for i, udaf in enumerate(udafs):
            args = [values.get(name) for name in arg_slices[i]]
            accs[i] = udaf.add(accs[i], args) if delta.sign > 0 else udaf.undo(accs[i], args)
    return [u.result(a) for u, a in zip(udafs, accs, strict=True)], accs
