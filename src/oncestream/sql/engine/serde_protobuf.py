"""Protobuf records of the PROTOBUF / PROTOBUF_NOSR formats: dynamic messages built from a
``FileDescriptorProto`` (the ``protobuf`` package's descriptor pool and message factory), Confluent's
message-index framing, and the conversion between a message and the Python values of columns.

A PROTOBUF record is Confluent's framing (magic byte 0, 4-byte schema id) then the message
indexes (the path of the record's message in the file: a zigzag varint count then zigzag varint
indexes; the first message, ``[0]``, is the single byte 0) then the protobuf binary. A
PROTOBUF_NOSR record is the protobuf binary alone.

Values (see ``oncestream.sql.language.protobuf_schema`` for the schema side):
``google.protobuf.Timestamp`` <-> epoch ms, ``google.type.Date`` <-> epoch days,
``google.type.TimeOfDay`` <-> ms of the day, ``confluent.type.Decimal`` (big-endian two's
complement unscaled value, precision, scale) <-> Decimal, the wrappers <-> their value or null,
an enum -> its name, a map -> dict, repeated -> list, another message -> dict (null when unset).
Proto3 scalars have no null: an unset one reads as its default, a null one is not written; a
field with presence (a message, a proto3 ``optional`` scalar) reads null when unset.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from oncestream.sql.errors import KsqlError
from oncestream.sql.language.protobuf_schema import DATE, DECIMAL, TIME_OF_DAY, TIMESTAMP, WRAPPERS
from oncestream.sql.language.types import BaseType, SqlType

_TYPE_MESSAGE, _TYPE_ENUM = 11, 14


class ProtobufError(KsqlError):
    """A Protobuf schema or record this format cannot use (unknown import, bad message index)."""


# -- the well-known files a ksqlDB schema imports -------------------------------------------------


def _message_file(name: str, package: str, messages: dict[str, list[tuple[str, int]]]) -> Any:
    """A FileDescriptorProto of messages whose fields are scalars (``(name, type)`` in order)."""
    from google.protobuf import descriptor_pb2

    file_proto = descriptor_pb2.FileDescriptorProto(name=name, package=package, syntax="proto3")
    for message_name, fields in messages.items():
        message = file_proto.message_type.add(name=message_name)
        for number, (field_name, kind) in enumerate(fields, start=1):
            message.field.add(name=field_name, number=number, type=kind, label=1)
    return file_proto


def _well_known() -> dict[str, Any]:
    from google.protobuf import descriptor_pb2, timestamp_pb2, wrappers_pb2

    def of(module: Any) -> Any:
        return descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)

    int32, uint32, bytes_ = 5, 13, 12
    return {
        "google/protobuf/timestamp.proto": of(timestamp_pb2),
        "google/protobuf/wrappers.proto": of(wrappers_pb2),
        "google/type/date.proto": _message_file("google/type/date.proto", "google.type", {
            "Date": [("year", int32), ("month", int32), ("day", int32)]}),
        "google/type/timeofday.proto": _message_file("google/type/timeofday.proto", "google.type", {
            "TimeOfDay": [("hours", int32), ("minutes", int32), ("seconds", int32), ("nanos", int32)]}),
        "confluent/type/decimal.proto": _message_file("confluent/type/decimal.proto", "confluent.type", {
            "Decimal": [("value", bytes_), ("precision", uint32), ("scale", int32)]}),
        # Only the field options use it, and descriptors carry no options here: an empty file.
        "confluent/meta.proto": _message_file("confluent/meta.proto", "confluent", {}),
    }


def message_class(file_proto: Any, indexes: tuple[int, ...] = (0,), dependencies: Sequence[Any] = ()) -> Any:
    """The message class of the message at ``indexes`` in ``file_proto`` (imports: the files
    above, and ``dependencies``, the ``FileDescriptorProto`` of each schema reference, named as
    the import names it; any other import is refused)."""
    from google.protobuf import descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    known = {**_well_known(), **{d.name: d for d in dependencies}}
    added: set[str] = set()

    def add(name: str) -> None:
        if name in added:
            return
        dependency = known.get(name)
        if dependency is None:
            raise ProtobufError(f"the Protobuf schema imports {name!r}, which no schema reference names")
        for inner in dependency.dependency:
            add(inner)
        pool.Add(dependency)
        added.add(name)

    for name in file_proto.dependency:
        add(name)
    try:
        file_descriptor = pool.Add(file_proto)
    except (TypeError, ValueError) as e:
        raise ProtobufError(f"the Protobuf schema does not build: {e}") from None
    if not indexes or indexes[0] >= len(file_descriptor.message_types_by_name):
        raise ProtobufError(f"message index {list(indexes)} is not in the schema")
    descriptor = file_proto_message(file_descriptor, indexes)
    return message_factory.GetMessageClass(descriptor)


def wrapper_class(t: SqlType) -> Any:
    """The ``google.protobuf`` wrapper message class of a primitive SQL type (PROTOBUF_NOSR's root
    message for one bare primitive column, as ProtobufData builds it)."""
    from google.protobuf import wrappers_pb2

    names = {BaseType.INTEGER: "Int32Value", BaseType.BIGINT: "Int64Value", BaseType.DOUBLE: "DoubleValue",
             BaseType.BOOLEAN: "BoolValue", BaseType.STRING: "StringValue", BaseType.BYTES: "BytesValue"}
    name = names.get(t.base)
    if name is None:
        raise ProtobufError(f"Unsupported root schema of type {t.ksql_name}: a bare PROTOBUF_NOSR value is a "
                            "STRUCT or a primitive (INTEGER, BIGINT, DOUBLE, BOOLEAN, STRING, BYTES)")
    return getattr(wrappers_pb2, name)


def file_proto_message(file_descriptor: Any, indexes: tuple[int, ...]) -> Any:
    """The message descriptor at the index path ``indexes`` (top-level, then nested)."""
    messages = list(file_descriptor.message_types_by_name.values())
    descriptor = None
    for depth, index in enumerate(indexes):
        if index < 0 or index >= len(messages):
            raise ProtobufError(f"message index {list(indexes)} is not in the schema (level {depth})")
        descriptor = messages[index]
        messages = list(descriptor.nested_types)
    return descriptor


# -- Confluent's message indexes ------------------------------------------------------------------


def _zigzag_varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        bits = z & 0x7F
        z >>= 7
        if z:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _read_zigzag(data: bytes, pos: int) -> tuple[int, int]:
    shift = z = 0
    while True:
        if pos >= len(data):
            raise ProtobufError("the message indexes run past the end of the record")
        byte = data[pos]
        pos += 1
        z |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (z >> 1) ^ -(z & 1), pos
        shift += 7
        if shift > 63:
            raise ProtobufError("a message index is not a varint")


def encode_indexes(indexes: tuple[int, ...]) -> bytes:
    """Confluent's message-index prefix: ``[0]`` is the single byte 0."""
    if indexes == (0,):
        return b"\x00"
    return _zigzag_varint(len(indexes)) + b"".join(_zigzag_varint(i) for i in indexes)


def decode_indexes(body: bytes) -> tuple[tuple[int, ...], bytes]:
    """(message indexes, protobuf binary) of a framed record's body."""
    count, pos = _read_zigzag(body, 0)
    if count == 0:
        return (0,), body[pos:]
    if count < 0 or count > 64:
        raise ProtobufError(f"{count} message indexes: not a Protobuf record")
    indexes = []
    for _ in range(count):
        index, pos = _read_zigzag(body, pos)
        indexes.append(index)
    return tuple(indexes), body[pos:]


# -- message <-> Python values --------------------------------------------------------------------

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _message_value(message: Any) -> Any:
    name = message.DESCRIPTOR.full_name
    if name == TIMESTAMP:
        return message.seconds * 1000 + message.nanos // 1_000_000
    if name == DATE:
        if message.year == 0:
            raise ProtobufError("a google.type.Date without a year has no DATE value")
        return (dt.date(message.year, message.month, message.day) - _EPOCH.date()).days
    if name == TIME_OF_DAY:
        return ((message.hours * 60 + message.minutes) * 60 + message.seconds) * 1000 + message.nanos // 1_000_000
    if name == DECIMAL:
        unscaled = int.from_bytes(message.value, "big", signed=True) if message.value else 0
        return Decimal(unscaled).scaleb(-message.scale)
    if name in WRAPPERS:
        return message.value
    return to_dict(message)


def _field_value(fd: Any, value: Any) -> Any:
    if fd.type == _TYPE_MESSAGE:
        return _message_value(value)
    if fd.type == _TYPE_ENUM:
        found = fd.enum_type.values_by_number.get(value)
        return found.name if found is not None else str(value)
    return value


def to_dict(message: Any) -> dict[str, Any]:
    """A message's fields by name as column values (an unset message field: None)."""
    out: dict[str, Any] = {}
    for fd in message.DESCRIPTOR.fields:
        value = getattr(message, fd.name)
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            value_fd = fd.message_type.fields_by_name["value"]
            out[fd.name] = {str(k): _field_value(value_fd, v) for k, v in value.items()}
        elif fd.is_repeated:
            out[fd.name] = [_field_value(fd, v) for v in value]
        elif fd.has_presence and not message.HasField(fd.name):
            out[fd.name] = None   # an unset message, or an unset proto3 `optional` scalar: null
        else:
            out[fd.name] = _field_value(fd, value)
    return out


def _fill_special(message: Any, value: Any) -> bool:
    """Set a well-known message from a column value; False for other messages."""
    name = message.DESCRIPTOR.full_name
    if name == TIMESTAMP:
        ms = int(value)
        message.seconds, message.nanos = ms // 1000, (ms % 1000) * 1_000_000
    elif name == DATE:
        day = _EPOCH.date() + dt.timedelta(days=int(value))
        message.year, message.month, message.day = day.year, day.month, day.day
    elif name == TIME_OF_DAY:
        ms = int(value)
        message.hours, message.minutes = ms // 3_600_000, ms // 60_000 % 60
        message.seconds, message.nanos = ms // 1000 % 60, ms % 1000 * 1_000_000
    elif name == DECIMAL:
        sign, digits, exponent = Decimal(value).as_tuple()
        unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
        scale = -int(exponent)
        message.value = unscaled.to_bytes(max(1, (unscaled.bit_length() + 8) // 8), "big", signed=True)
        message.precision, message.scale = max(len(digits), scale, 1), scale
    elif name in WRAPPERS:
        message.value = value
    else:
        return False
    return True


def _scalar(fd: Any, value: Any) -> Any:
    if fd.type == _TYPE_ENUM:
        found = fd.enum_type.values_by_name.get(str(value))
        if found is None:
            raise ProtobufError(f"{value!r} is not a value of the enum {fd.enum_type.full_name}")
        return found.number
    return value


def _fill(message: Any, value: Any) -> None:
    if _fill_special(message, value):
        return
    if not isinstance(value, Mapping):
        raise ProtobufError(f"a value for message {message.DESCRIPTOR.full_name} must be a struct")
    by_upper = {str(k).upper(): v for k, v in value.items()}
    for fd in message.DESCRIPTOR.fields:
        v = value[fd.name] if fd.name in value else by_upper.get(fd.name.upper())
        if v is None:
            continue   # proto3: a null is not written (a message stays unset)
        target = getattr(message, fd.name)
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            value_fd = fd.message_type.fields_by_name["value"]
            for k, item in v.items():
                if item is None:
                    continue
                if value_fd.type == _TYPE_MESSAGE:
                    _fill(target[str(k)], item)
                else:
                    target[str(k)] = _scalar(value_fd, item)
        elif fd.is_repeated:
            for item in v:
                if fd.type == _TYPE_MESSAGE and item is None and fd.message_type.full_name in WRAPPERS:
                    target.add()   # a null element has no proto3 form: the empty wrapper (its default)
                elif fd.type == _TYPE_MESSAGE:
                    _fill(target.add(), item if item is not None else {})
                elif item is not None:
                    target.append(_scalar(fd, item))
                else:
                    raise ProtobufError(f"a null element in the repeated field {fd.name} has no proto3 form")
        elif fd.type == _TYPE_MESSAGE:
            target.SetInParent()   # present even when every field inside is null
            _fill(target, v)
        else:
            setattr(message, fd.name, _scalar(fd, v))


def from_dict(cls: Any, value: Any) -> Any:
    """A message of ``cls`` holding ``value`` (fields matched by name, case-insensitively; the
    bare value of a well-known message: a wrapper's primitive, a Timestamp's epoch ms...)."""
    message = cls()
    _fill(message, value)
    return message
