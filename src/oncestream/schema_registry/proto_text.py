"""A small ``.proto`` text parser: enough of proto2/proto3 for the schemas people register
(``syntax``, ``package``, ``import``, ``option``, messages with nested messages and enums,
fields with labels, ``map<K, V>``, ``oneof``, ``reserved``, enums) into the
``FileDescriptorProto`` the compatibility rules read. Options are parsed and dropped;
services and extensions are refused.
"""

from __future__ import annotations

import re
from typing import Any

from google.protobuf import descriptor_pb2

F = descriptor_pb2.FieldDescriptorProto

SCALARS = {
    "double": F.TYPE_DOUBLE, "float": F.TYPE_FLOAT, "int64": F.TYPE_INT64, "uint64": F.TYPE_UINT64,
    "int32": F.TYPE_INT32, "fixed64": F.TYPE_FIXED64, "fixed32": F.TYPE_FIXED32, "bool": F.TYPE_BOOL,
    "string": F.TYPE_STRING, "bytes": F.TYPE_BYTES, "uint32": F.TYPE_UINT32, "sfixed32": F.TYPE_SFIXED32,
    "sfixed64": F.TYPE_SFIXED64, "sint32": F.TYPE_SINT32, "sint64": F.TYPE_SINT64,
}
LABELS = {"optional": F.LABEL_OPTIONAL, "required": F.LABEL_REQUIRED, "repeated": F.LABEL_REPEATED}
_TOKEN = re.compile(r"\s+|//[^\n]*|/\*.*?\*/|(\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|[A-Za-z_][\w.]*|-?\d[\w.+-]*|\S)",
                    re.S)


class ProtoSyntaxError(ValueError):
    """The text is not a ``.proto`` file this parser understands."""


class _Tokens:
    def __init__(self, text: str) -> None:
        self.items = [m.group(1) for m in _TOKEN.finditer(text) if m.group(1) is not None]
        consumed = sum(len(m.group(0)) for m in _TOKEN.finditer(text))
        if consumed != len(text):
            raise ProtoSyntaxError("unreadable characters")
        self.pos = 0

    def peek(self) -> str | None:
        return self.items[self.pos] if self.pos < len(self.items) else None

    def next(self) -> str:
        if self.pos >= len(self.items):
            raise ProtoSyntaxError("unexpected end of file")
        self.pos += 1
        return self.items[self.pos - 1]

    def expect(self, token: str) -> None:
        got = self.next()
        if got != token:
            raise ProtoSyntaxError(f"expected {token!r}, got {got!r}")

    def skip_statement(self) -> None:
        """Skip to the end of an ``option ...;`` or ``reserved ...;`` (bracketed values included)."""
        depth = 0
        while True:
            token = self.next()
            if token in "{[(":
                depth += 1
            elif token in "}])":
                depth -= 1
            elif token == ";" and depth == 0:
                return


def parse_proto_text(text: str) -> descriptor_pb2.FileDescriptorProto:
    """The ``FileDescriptorProto`` of ``text`` (named ``schema.proto``)."""
    tokens = _Tokens(text)
    if not tokens.items:
        raise ProtoSyntaxError("empty")
    file_proto = descriptor_pb2.FileDescriptorProto(name="schema.proto")
    while (token := tokens.peek()) is not None:
        tokens.next()
        if token == "syntax":
            tokens.expect("=")
            file_proto.syntax = tokens.next().strip("\"'")
            tokens.expect(";")
        elif token == "package":
            file_proto.package = tokens.next()
            tokens.expect(";")
        elif token == "import":
            path = tokens.next()
            if path in ("public", "weak"):
                path = tokens.next()
            file_proto.dependency.append(path.strip("\"'"))
            tokens.expect(";")
        elif token == "option":
            tokens.skip_statement()
        elif token == "message":
            _message(tokens, file_proto.message_type.add())
        elif token == "enum":
            _enum(tokens, file_proto.enum_type.add())
        elif token == ";":
            continue
        else:
            raise ProtoSyntaxError(f"unexpected {token!r} at the top level")
    if not file_proto.syntax:
        file_proto.syntax = "proto2"
    _resolve_enums(file_proto)
    _proto3_optional(file_proto.message_type, file_proto.syntax == "proto3")
    return file_proto


def _proto3_optional(messages: Any, proto3: bool) -> None:
    """A proto3 ``optional`` field gets its synthetic oneof ``_<name>``, after the declared
    oneofs (as protoc builds it); in proto2 ``optional`` is only the label."""
    for message in messages:
        for fld in message.field:
            if not fld.proto3_optional:
                continue
            if proto3:
                fld.oneof_index = len(message.oneof_decl)
                message.oneof_decl.add(name=f"_{fld.name}")
            else:
                fld.ClearField("proto3_optional")
        _proto3_optional(message.nested_type, proto3)


def _message(tokens: _Tokens, message: descriptor_pb2.DescriptorProto) -> None:
    message.name = _identifier(tokens.next())
    tokens.expect("{")
    _message_body(tokens, message, oneof_index=None)


def _message_body(tokens: _Tokens, message: descriptor_pb2.DescriptorProto, oneof_index: int | None) -> None:
    while True:
        token = tokens.next()
        if token == "}":
            return
        if token == ";":
            continue
        if token in ("option", "reserved", "extensions"):
            tokens.skip_statement()
        elif token == "message" and oneof_index is None:
            _message(tokens, message.nested_type.add())
        elif token == "enum" and oneof_index is None:
            _enum(tokens, message.enum_type.add())
        elif token == "oneof" and oneof_index is None:
            message.oneof_decl.add().name = _identifier(tokens.next())
            tokens.expect("{")
            _message_body(tokens, message, oneof_index=len(message.oneof_decl) - 1)
        elif token == "map":
            _map_field(tokens, message)
        elif token in ("service", "extend", "group"):
            raise ProtoSyntaxError(f"{token!r} is not supported")
        else:
            label = LABELS.get(token)
            type_name = tokens.next() if label is not None else token
            fld = _field(tokens, message, type_name, label if label is not None else F.LABEL_OPTIONAL, oneof_index)
            # an explicit `optional` is proto3's field presence (``_proto3_optional`` completes it)
            if token == "optional" and oneof_index is None:
                fld.proto3_optional = True


def _field(tokens: _Tokens, message: descriptor_pb2.DescriptorProto, type_name: str, label: int,
           oneof_index: int | None) -> descriptor_pb2.FieldDescriptorProto:
    fld = message.field.add(name=_identifier(tokens.next()), label=label)
    tokens.expect("=")
    fld.number = _number(tokens.next())
    if type_name in SCALARS:
        fld.type = SCALARS[type_name]
    else:
        fld.type = F.TYPE_MESSAGE  # an enum's fields are set to TYPE_ENUM by _resolve_enums
        fld.type_name = type_name
    if oneof_index is not None:
        fld.oneof_index = oneof_index
    if tokens.peek() == "[":
        tokens.skip_statement()
    else:
        tokens.expect(";")
    return fld


def _map_field(tokens: _Tokens, message: descriptor_pb2.DescriptorProto) -> None:
    tokens.expect("<")
    key_type = tokens.next()
    tokens.expect(",")
    value_type = tokens.next()
    tokens.expect(">")
    fld = _field(tokens, message, "", F.LABEL_REPEATED, None)
    entry_name = "".join(part[:1].upper() + part[1:] for part in fld.name.split("_")) + "Entry"
    entry = message.nested_type.add(name=entry_name)
    entry.options.map_entry = True
    for name, number, kind in (("key", 1, key_type), ("value", 2, value_type)):
        part = entry.field.add(name=name, number=number, label=F.LABEL_OPTIONAL)
        if kind in SCALARS:
            part.type = SCALARS[kind]
        else:
            part.type, part.type_name = F.TYPE_MESSAGE, kind
    fld.type, fld.type_name = F.TYPE_MESSAGE, entry_name


def _enum(tokens: _Tokens, enum: descriptor_pb2.EnumDescriptorProto) -> None:
    enum.name = _identifier(tokens.next())
    tokens.expect("{")
    while True:
        token = tokens.next()
        if token == "}":
            return
        if token == ";":
            continue
        if token in ("option", "reserved"):
            tokens.skip_statement()
            continue
        value = enum.value.add(name=_identifier(token))
        tokens.expect("=")
        value.number = _number(tokens.next())
        if tokens.peek() == "[":
            tokens.skip_statement()
        else:
            tokens.expect(";")


def _resolve_enums(file_proto: descriptor_pb2.FileDescriptorProto) -> None:
    """Fields naming an enum of this file (by its simple or dotted name) are TYPE_ENUM."""
    enums: set[str] = set()

    def collect(prefix: str, messages: object, enum_list: object) -> None:
        for e in enum_list:  # type: ignore[attr-defined]
            enums.add(f"{prefix}{e.name}")
            enums.add(e.name)
        for m in messages:  # type: ignore[attr-defined]
            collect(f"{prefix}{m.name}.", m.nested_type, m.enum_type)

    collect("", file_proto.message_type, file_proto.enum_type)

    def mark(messages: object) -> None:
        for m in messages:  # type: ignore[attr-defined]
            for fld in m.field:
                if fld.type == F.TYPE_MESSAGE and fld.type_name.lstrip(".") in enums:
                    fld.type = F.TYPE_ENUM
            mark(m.nested_type)

    mark(file_proto.message_type)


def _identifier(token: str) -> str:
    if not re.fullmatch(r"[A-Za-z_]\w*", token):
        raise ProtoSyntaxError(f"{token!r} is not an identifier")
    return token


def _number(token: str) -> int:
    try:
        return int(token, 0)
    except ValueError:
        raise ProtoSyntaxError(f"{token!r} is not a number") from None


_SCALAR_NAMES = {number: name for name, number in SCALARS.items()}


def print_proto_text(file_proto: descriptor_pb2.FileDescriptorProto) -> str:
    """``.proto`` text of ``file_proto`` (what the registry answers for a PROTOBUF schema without
    ``format=serialized``): syntax, package, imports, messages with nested types, maps and oneofs,
    enums. Options other than map entries are not written."""
    syntax = file_proto.syntax or "proto2"
    lines = [f'syntax = "{syntax}";']
    if file_proto.package:
        lines.append(f"package {file_proto.package};")
    lines += [f'import "{dependency}";' for dependency in file_proto.dependency]
    for message in file_proto.message_type:
        lines += _print_message(message, syntax, "")
    for enum in file_proto.enum_type:
        lines += _print_enum(enum, "")
    return "\n".join(lines) + "\n"


def _print_enum(enum: descriptor_pb2.EnumDescriptorProto, indent: str) -> list[str]:
    return [f"{indent}enum {enum.name} {{", *(f"{indent}  {v.name} = {v.number};" for v in enum.value), f"{indent}}}"]


def _type_text(fld: descriptor_pb2.FieldDescriptorProto) -> str:
    return fld.type_name if fld.type_name else _SCALAR_NAMES.get(fld.type, "bytes")


def _print_message(message: descriptor_pb2.DescriptorProto, syntax: str, indent: str) -> list[str]:
    inner = indent + "  "
    entries = {n.name: n for n in message.nested_type if n.options.map_entry}
    lines = [f"{indent}message {message.name} {{"]
    for nested in message.nested_type:
        if nested.name not in entries:
            lines += _print_message(nested, syntax, inner)
    for enum in message.enum_type:
        lines += _print_enum(enum, inner)
    oneofs: dict[int, list[str]] = {}
    for fld in message.field:
        entry = entries.get(fld.type_name.rsplit(".", 1)[-1]) if fld.label == F.LABEL_REPEATED else None
        if entry is not None:
            key, value = entry.field[0], entry.field[1]
            text = f"map<{_type_text(key)}, {_type_text(value)}> {fld.name} = {fld.number};"
        else:
            label = ""
            if fld.label == F.LABEL_REPEATED:
                label = "repeated "
            elif fld.label == F.LABEL_REQUIRED:
                label = "required "
            elif syntax == "proto2" and not fld.HasField("oneof_index"):
                label = "optional "
            elif fld.proto3_optional:
                label = "optional "
            text = f"{label}{_type_text(fld)} {fld.name} = {fld.number};"
        if fld.HasField("oneof_index") and not fld.proto3_optional:
            oneofs.setdefault(fld.oneof_index, []).append(text)
        else:
            lines.append(inner + text)
    for index, texts in oneofs.items():
        lines += [f"{inner}oneof {message.oneof_decl[index].name} {{", *(f"{inner}  {t}" for t in texts), f"{inner}}}"]
    lines.append(f"{indent}}}")
    return lines
