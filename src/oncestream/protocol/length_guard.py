"""Array-length guard run before kio's native decoder sees a body.

Why this exists: kio's native reader (0.6.5) reserves room for a whole array as soon as it reads
the array's length (``Vec::with_capacity(n)``), before checking that the buffer holds ``n``
elements. A few bytes claiming an array of 2**31 elements make it ask for hundreds of GB, and a
failed allocation in Rust aborts the process: one malformed request would take the whole broker
down (SIGABRT, "memory allocation of ... bytes failed"), and one bad response would take a client
down. No setting of kio turns that off, so this module walks the body over the same schema (the
dataclasses kio generates, classified with kio's own ``kio.serial._introspect`` helpers, which
its native schema compiler calls too) without building anything, and refuses a body in which an
array claims more elements than the bytes left could hold.

Only that one condition is reported. Anything else the walk cannot make sense of (a short
buffer, an unknown tag, a bad varint) is left for kio to reject with its own error: the guard
never turns a body kio would accept into a failure, except one whose arrays cannot fit.

Cost: one pass over the fields (records stay unread byte strings), a few microseconds for a
Produce or Fetch request; the plans are compiled once per class.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import fields, is_dataclass
from typing import Any, NamedTuple

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")

# Fixed-width primitives: wire size in bytes (kafka_type names as kio's schemas spell them).
_FIXED_SIZE_BYTES = {
    "int8": 1, "uint8": 1, "bool": 1,
    "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
    "uuid": 16,
}
_VARIABLE = ("string", "bytes", "records")


class ArrayLengthError(ValueError):
    """An array claims more elements than the rest of the buffer can hold."""


class _Unparseable(Exception):
    """The walk lost its way (short buffer, bad varint, unknown tag): kio decides."""


# A plan is a tuple of steps, one per field.


class _Fixed(NamedTuple):
    """A fixed-width primitive."""

    size_bytes: int


class _Variable(NamedTuple):
    """A string, bytes or records field: a length (compact or not), then that many bytes."""

    kafka_type: str
    compact: bool


class _Entity(NamedTuple):
    """A nested struct."""

    plan: EntityPlan
    nullable: bool


class _Array(NamedTuple):
    """An array of ``item`` elements, each at least ``min_element_bytes`` long."""

    item: _Step
    compact: bool
    min_element_bytes: int


_Step = _Fixed | _Variable | _Entity | _Array


class EntityPlan:
    """How to walk one kio entity class: its untagged fields in order, and its tagged ones."""

    __slots__ = ("flexible", "min_size_bytes", "steps", "tagged")

    def __init__(self) -> None:
        self.flexible = False
        self.steps: tuple[_Step, ...] = ()
        self.tagged: dict[int, _Step] = {}
        self.min_size_bytes = 0


def _min_size(step: _Step) -> int:
    """Fewest bytes one value of ``step`` can take on the wire (bounds array lengths)."""
    if isinstance(step, _Fixed):
        return step.size_bytes
    if isinstance(step, _Variable):
        if step.compact:
            return 1  # a compact length
        return 2 if step.kafka_type == "string" else 4  # an int16 or int32 length
    if isinstance(step, _Entity):
        return 1 if step.nullable else step.plan.min_size_bytes
    return 1 if step.compact else 4  # an array: its length


def _primitive_step(kafka_type: str, flexible: bool) -> _Step:
    if kafka_type in _FIXED_SIZE_BYTES:
        return _Fixed(_FIXED_SIZE_BYTES[kafka_type])
    if kafka_type in _VARIABLE:
        return _Variable(kafka_type, flexible)
    raise TypeError(f"unknown kafka_type {kafka_type!r}")


def _field_step(field: Any, flexible: bool) -> _Step:
    classified = classify_field(field)
    step: _Step
    if isinstance(classified, (PrimitiveField, PrimitiveTupleField)):
        step = _primitive_step(get_schema_field_type(field), flexible)
    elif isinstance(classified, EntityField):
        step = _Entity(entity_plan(classified.type_), bool(is_optional(field)))
    elif isinstance(classified, EntityTupleField):
        step = _Entity(entity_plan(classified.type_), False)
    else:  # pragma: no cover - kio has exactly these four classes
        raise TypeError(f"unclassifiable field {field.name}")
    if classified.is_array:
        return _Array(step, flexible, _min_size(step))
    return step


@functools.cache
def entity_plan(cls: type) -> EntityPlan:
    """The walk plan of a kio entity class (compiled once)."""
    if not is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a kio entity")
    plan = EntityPlan()
    plan.flexible = bool(cls.__flexible__)  # type: ignore[attr-defined]  # every kio entity has it
    steps: list[_Step] = []
    for field in fields(cls):
        tag = get_field_tag(field)
        step = _field_step(field, plan.flexible)
        if tag is None:
            steps.append(step)
        else:
            plan.tagged[int(tag)] = step
    plan.steps = tuple(steps)
    plan.min_size_bytes = sum(_min_size(s) for s in plan.steps) + (1 if plan.flexible else 0)
    return plan


def _uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    # Not codec.read_uvarint: that one gives up after 5 bytes, and a longer varint that kio's
    # reader still accepts as a length must be judged here, or it would reach the allocation.
    result = 0
    shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise _Unparseable
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _walk(step: _Step, buf: memoryview, pos: int) -> int:
    if isinstance(step, _Fixed):
        return pos + step.size_bytes
    if isinstance(step, _Variable):
        if step.compact:  # compact: uvarint length + 1, 0 is null
            length, pos = _uvarint(buf, pos)
            return pos + max(length - 1, 0)
        if step.kafka_type == "string":
            if pos + 2 > len(buf):
                raise _Unparseable
            (length,) = _INT16.unpack_from(buf, pos)
            return pos + 2 + max(int(length), 0)
        if pos + 4 > len(buf):
            raise _Unparseable
        (length,) = _INT32.unpack_from(buf, pos)
        return pos + 4 + max(int(length), 0)
    if isinstance(step, _Entity):
        if step.nullable:  # nullable struct: an int8 marker, -1 is null
            if pos >= len(buf):
                raise _Unparseable
            marker = buf[pos]
            pos += 1
            if marker == 0xFF:
                return pos
        return _walk_entity(step.plan, buf, pos)
    if step.compact:
        length, pos = _uvarint(buf, pos)
        count = length - 1  # 0 is null
    else:
        if pos + 4 > len(buf):
            raise _Unparseable
        (count,) = _INT32.unpack_from(buf, pos)
        pos += 4
    if count <= 0:
        return pos  # null, empty, or negative (kio refuses negative lengths itself)
    remaining = len(buf) - pos
    if count * max(step.min_element_bytes, 1) > remaining:
        raise ArrayLengthError(f"array of {count} elements in {remaining} remaining bytes")
    for _ in range(count):
        pos = _walk(step.item, buf, pos)
        if pos > len(buf):
            raise _Unparseable
    return pos


def _walk_entity(plan: EntityPlan, buf: memoryview, pos: int) -> int:
    for step in plan.steps:
        pos = _walk(step, buf, pos)
        if pos > len(buf):
            raise _Unparseable
    if plan.flexible:
        count, pos = _uvarint(buf, pos)
        for _ in range(count):
            tag, pos = _uvarint(buf, pos)
            _size, pos = _uvarint(buf, pos)
            tagged_step = plan.tagged.get(tag)
            if tagged_step is None:
                raise _Unparseable  # kio refuses unknown tags itself
            pos = _walk(tagged_step, buf, pos)  # as kio does: the field's own encoding, not ``size``
            if pos > len(buf):
                raise _Unparseable
    return pos


def check_array_lengths(cls: type, buf: bytes | memoryview, offset: int) -> int | None:
    """Raise ArrayLengthError if a body of ``cls`` at ``offset`` has an array that cannot fit.

    Returns the offset where the walk ended (the body's end, for a well-formed body), or None
    when the body is malformed in some other way, which kio's decoder reports itself."""
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    try:
        return _walk_entity(entity_plan(cls), view, offset)
    except (_Unparseable, struct.error):
        return None
