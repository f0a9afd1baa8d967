"""Protobuf compatibility by Confluent's documented rules, between two ``FileDescriptorProto``s.

A reader (the newer schema for BACKWARD) reads what a writer wrote when: the package is the same
(PACKAGE_CHANGED); every writer message still exists (MESSAGE_REMOVED); a field number keeps a
wire-compatible type (FIELD_SCALAR_KIND_CHANGED; the interchangeable groups are int32, uint32,
int64, uint64, bool; sint32, sint64; fixed32, sfixed32; fixed64, sfixed64; string, bytes) and the
same message or enum type (FIELD_NAMED_TYPE_CHANGED), the same cardinality (FIELD_LABEL_CHANGED);
no required field is added or removed (REQUIRED_FIELD_ADDED / REQUIRED_FIELD_REMOVED, proto2);
no field leaves its oneof or several fields move into one (ONEOF_FIELD_REMOVED,
MULTIPLE_FIELDS_MOVED_TO_ONEOF). Adding or removing an optional field, a message or an enum
constant is compatible.
"""

from __future__ import annotations

from collections.abc import Iterator

from google.protobuf import descriptor_pb2

F = descriptor_pb2.FieldDescriptorProto

_WIRE_GROUPS = [
    {F.TYPE_INT32, F.TYPE_UINT32, F.TYPE_INT64, F.TYPE_UINT64, F.TYPE_BOOL},
    {F.TYPE_SINT32, F.TYPE_SINT64},
    {F.TYPE_FIXED32, F.TYPE_SFIXED32},
    {F.TYPE_FIXED64, F.TYPE_SFIXED64},
    {F.TYPE_STRING, F.TYPE_BYTES},
]


def _messages(prefix: str, messages: object) -> Iterator[tuple[str, descriptor_pb2.DescriptorProto]]:
    for message in messages:  # type: ignore[attr-defined]
        name = f"{prefix}{message.name}"
        yield name, message
        yield from _messages(f"{name}.", message.nested_type)


def _compatible_scalars(a: int, b: int) -> bool:
    return a == b or any(a in group and b in group for group in _WIRE_GROUPS)


def _type_label(field: descriptor_pb2.FieldDescriptorProto) -> str:
    return field.type_name.lstrip(".") if field.type_name else F.Type.Name(field.type)


def protobuf_incompatibilities(reader: descriptor_pb2.FileDescriptorProto,
                               writer: descriptor_pb2.FileDescriptorProto) -> list[str]:
    """Why ``reader`` cannot read data written with ``writer``; empty when it can."""
    problems: list[str] = []
    if reader.package != writer.package:
        problems.append(f"{{errorType:'PACKAGE_CHANGED', description:'{writer.package!r} -> {reader.package!r}'}}")
    reader_messages = dict(_messages("", reader.message_type))
    for name, w_message in _messages("", writer.message_type):
        r_message = reader_messages.get(name)
        if r_message is None:
            problems.append(f"{{errorType:'MESSAGE_REMOVED', path:'#/{name}'}}")
            continue
        problems.extend(_message_problems(name, r_message, w_message))
    return problems


def _message_problems(name: str, reader: descriptor_pb2.DescriptorProto,
                      writer: descriptor_pb2.DescriptorProto) -> list[str]:
    problems: list[str] = []
    r_fields = {f.number: f for f in reader.field}
    w_fields = {f.number: f for f in writer.field}
    for number, w_field in w_fields.items():
        path = f"#/{name}/{number}"
        r_field = r_fields.get(number)
        if r_field is None:
            if w_field.label == F.LABEL_REQUIRED:
                problems.append(f"{{errorType:'REQUIRED_FIELD_REMOVED', path:'{path}'}}")
            if w_field.HasField("oneof_index"):
                problems.append(f"{{errorType:'ONEOF_FIELD_REMOVED', path:'{path}'}}")
            continue
        scalar = {F.TYPE_MESSAGE, F.TYPE_ENUM, F.TYPE_GROUP}
        if (r_field.type in scalar) != (w_field.type in scalar):
            problems.append(f"{{errorType:'FIELD_KIND_CHANGED', path:'{path}', description:'"
                            f"{_type_label(w_field)} -> {_type_label(r_field)}'}}")
        elif r_field.type in scalar:
            if r_field.type != w_field.type or r_field.type_name.lstrip(".").rsplit(".", 1)[-1] != \
                    w_field.type_name.lstrip(".").rsplit(".", 1)[-1]:
                problems.append(f"{{errorType:'FIELD_NAMED_TYPE_CHANGED', path:'{path}', description:'"
                                f"{_type_label(w_field)} -> {_type_label(r_field)}'}}")
        elif not _compatible_scalars(r_field.type, w_field.type):
            problems.append(f"{{errorType:'FIELD_SCALAR_KIND_CHANGED', path:'{path}', description:'"
                            f"{_type_label(w_field)} -> {_type_label(r_field)}'}}")
        if (r_field.label == F.LABEL_REPEATED) != (w_field.label == F.LABEL_REPEATED):
            problems.append(f"{{errorType:'FIELD_LABEL_CHANGED', path:'{path}'}}")
        if w_field.HasField("oneof_index") and not r_field.HasField("oneof_index"):
            problems.append(f"{{errorType:'ONEOF_FIELD_REMOVED', path:'{path}'}}")
    for number, r_field in r_fields.items():
        if number not in w_fields and r_field.label == F.LABEL_REQUIRED:
            problems.append(f"{{errorType:'REQUIRED_FIELD_ADDED', path:'#/{name}/{number}'}}")
    # Several existing fields moved into one oneof: a writer may have set more than one of them.
    moved: dict[int, int] = {}
    for number, r_field in r_fields.items():
        w_field = w_fields.get(number)
        if w_field is not None and r_field.HasField("oneof_index") and not w_field.HasField("oneof_index"):
            moved[r_field.oneof_index] = moved.get(r_field.oneof_index, 0) + 1
    for index, count in moved.items():
        if count > 1:
            problems.append(f"{{errorType:'MULTIPLE_FIELDS_MOVED_TO_ONEOF', path:'#/{name}/oneof/{index}'}}")
    return problems
