"""ksqlDB's mapping between SQL columns and a Protobuf schema (PROTOBUF, PROTOBUF_NOSR), pure.

Columns to a schema (what a CSAS/CTAS sink registers, and PROTOBUF_NOSR's schema), as ksqlDB's
``ProtobufSchemaTranslator`` (Confluent's ``ProtobufData`` with ksqlDB's defaults) writes it:
``syntax = "proto3"``, one message ``ConnectDefault1`` with one field per column, numbered from
1 in column order, named as the column. INTEGER ``int32``, BIGINT ``int64``, DOUBLE ``double``,
BOOLEAN ``bool``, STRING ``string``, BYTES ``bytes``, DECIMAL ``confluent.type.Decimal`` (its
precision and scale in the field's ``confluent.field_meta`` params), TIMESTAMP
``google.protobuf.Timestamp``, DATE ``google.type.Date``, TIME ``google.type.TimeOfDay``, ARRAY
``repeated``, MAP ``map<string, V>``, STRUCT a nested message ``ConnectDefault2``, ``3``... in
the order met. Keys are never unwrapped (ksqlDB's PROTOBUF has no ``UNWRAP_SINGLES``): one key
column is a message of one field. An ARRAY or MAP directly inside an ARRAY or MAP has no proto3
form and is refused.

Nulls: ksqlDB's default (``unwrapPrimitives`` off, no ``nullableRepresentation``) writes plain
proto3 scalars, which have no null: a null scalar is not written and reads back as its proto3
default (0, false, ""). A null STRUCT/TIMESTAMP/DATE/TIME/DECIMAL (a message) stays null.
``*_PROTOBUF_NULLABLE_REPRESENTATION='OPTIONAL'`` makes every field that is not repeated a proto3
``optional`` one (presence: an unset field reads null, a 0 stays 0); ``'WRAPPER'`` writes every
scalar, array elements and map values included, as its ``google.protobuf`` wrapper message
(``Int32Value``, ``Int64Value``, ``DoubleValue``, ``BoolValue``, ``StringValue``, ``BytesValue``).

A schema to columns (CREATE without columns): the first message of the file (message index 0,
as ksqlDB without ``VALUE_SCHEMA_FULL_NAME``), each field a column: int32/sint32/sfixed32
INTEGER; int64/sint64/sfixed64/uint32/fixed32/uint64/fixed64 BIGINT (Connect's widening); float
and double DOUBLE; enum STRING; the well-known messages above and the wrappers
(``google.protobuf.Int32Value``...: their type, nullable); map entries MAP; other messages
STRUCT. The registry answers the descriptor itself (``format=serialized``); a decimal's
precision and scale are its ``confluent.field_meta`` params, from the descriptor's field options
(a schema registered serialized keeps them) or else the ``.proto`` text (the registry's text
parser drops options); without them DECIMAL(64, 0).
"""

from __future__ import annotations

import base64
import re
from typing import Any

from oncestream.sql.errors import StatementError
from oncestream.sql.language.types import BaseType, SqlType, StructField

ROOT_MESSAGE = "ConnectDefault1"
TIMESTAMP = "google.protobuf.Timestamp"
DATE = "google.type.Date"
TIME_OF_DAY = "google.type.TimeOfDay"
DECIMAL = "confluent.type.Decimal"
WRAPPERS = {
    "google.protobuf.DoubleValue": BaseType.DOUBLE, "google.protobuf.FloatValue": BaseType.DOUBLE,
    "google.protobuf.Int64Value": BaseType.BIGINT, "google.protobuf.UInt64Value": BaseType.BIGINT,
    "google.protobuf.Int32Value": BaseType.INTEGER, "google.protobuf.UInt32Value": BaseType.BIGINT,
    "google.protobuf.BoolValue": BaseType.BOOLEAN, "google.protobuf.StringValue": BaseType.STRING,
    "google.protobuf.BytesValue": BaseType.BYTES,
}
NULLABLE_OPTIONAL, NULLABLE_WRAPPER = "OPTIONAL", "WRAPPER"
_WRAPPERS_IMPORT = "google/protobuf/wrappers.proto"
_WRAPPER_OF = {BaseType.INTEGER: "google.protobuf.Int32Value", BaseType.BIGINT: "google.protobuf.Int64Value",
               BaseType.DOUBLE: "google.protobuf.DoubleValue", BaseType.BOOLEAN: "google.protobuf.BoolValue",
               BaseType.STRING: "google.protobuf.StringValue", BaseType.BYTES: "google.protobuf.BytesValue"}
_IMPORTS = {TIMESTAMP: "google/protobuf/timestamp.proto", DATE: "google/type/date.proto",
            TIME_OF_DAY: "google/type/timeofday.proto", DECIMAL: "confluent/type/decimal.proto"}
_LOGICAL = {BaseType.TIMESTAMP: TIMESTAMP, BaseType.DATE: DATE, BaseType.TIME: TIME_OF_DAY}
_SCALAR = {BaseType.INTEGER: "int32", BaseType.BIGINT: "int64", BaseType.DOUBLE: "double", BaseType.BOOLEAN: "bool",
           BaseType.STRING: "string", BaseType.BYTES: "bytes"}
# FieldDescriptorProto's type and label numbers (descriptor.proto; fixed by the format)
_TYPE_BOOL, _TYPE_STRING, _TYPE_BYTES, _TYPE_ENUM, _TYPE_MESSAGE = 8, 9, 12, 14, 11
_LABEL_OPTIONAL, _LABEL_REPEATED = 1, 3
_SCALAR_TYPE = {BaseType.INTEGER: 5, BaseType.BIGINT: 3, BaseType.DOUBLE: 1, BaseType.BOOLEAN: _TYPE_BOOL,
                BaseType.STRING: _TYPE_STRING, BaseType.BYTES: _TYPE_BYTES}


# -- columns -> .proto text -----------------------------------------------------------------------


class _Writer:
    """Prints one message per STRUCT, numbering nested messages as ProtobufData does, and builds
    the same schema as a ``FileDescriptorProto`` (what PROTOBUF_NOSR and the writer encode with)."""

    def __init__(self, nullable: str | None = None) -> None:
        from google.protobuf import descriptor_pb2

        self.pb = descriptor_pb2
        self.next_message = 2
        self.imports: set[str] = set()
        self.nullable = nullable

    def message(self, name: str, fields: tuple[StructField, ...], indent: str, proto: Any, scope: str) -> list[str]:
        proto.name = name
        full = f"{scope}.{name}"
        lines = [f"{indent}message {name} {{"]
        nested: list[str] = []
        for number, f in enumerate(fields, start=1):
            fld = proto.field.add(name=f.name, number=number, label=_LABEL_OPTIONAL)
            type_text, options = self.field_type(f.type, nested, indent + "  ", proto, full, fld)
            if self.nullable == NULLABLE_OPTIONAL and fld.label != _LABEL_REPEATED:
                # proto3 `optional`: the field has presence, through a synthetic oneof `_<name>`
                # (what protoc builds, and ProtobufData with optionalForNullables)
                fld.proto3_optional = True
                fld.oneof_index = len(proto.oneof_decl)
                proto.oneof_decl.add(name=f"_{f.name}")
                type_text = f"optional {type_text}"
            lines.append(f"{indent}  {type_text} {f.name} = {number}{options};")
        lines += nested
        lines.append(f"{indent}}}")
        return lines

    def field_type(self, t: SqlType, nested: list[str], indent: str, parent: Any, scope: str, fld: Any, *,
                   inner: bool = False) -> tuple[str, str]:
        b = t.base
        if b in _SCALAR and self.nullable == NULLABLE_WRAPPER:
            # every ksqlDB column is nullable: each scalar, array elements and map values too,
            # becomes its google.protobuf wrapper (ProtobufData with wrapperForNullables)
            self.imports.add(_WRAPPERS_IMPORT)
            fld.type, fld.type_name = _TYPE_MESSAGE, f".{_WRAPPER_OF[b]}"
            return _WRAPPER_OF[b], ""
        if b in _SCALAR:
            fld.type = _SCALAR_TYPE[b]
            return _SCALAR[b], ""
        if b in _LOGICAL:
            self.imports.add(_IMPORTS[_LOGICAL[b]])
            fld.type, fld.type_name = _TYPE_MESSAGE, f".{_LOGICAL[b]}"
            return _LOGICAL[b], ""
        if b is BaseType.DECIMAL:
            self.imports.update((_IMPORTS[DECIMAL], "confluent/meta.proto"))
            fld.type, fld.type_name = _TYPE_MESSAGE, f".{DECIMAL}"
            params = (f' [(confluent.field_meta) = {{ params: [{{ key: "precision", value: "{t.precision or 10}" }}, '
                      f'{{ key: "scale", value: "{t.scale or 0}" }}] }}]')
            return DECIMAL, params
        if b in (BaseType.ARRAY, BaseType.MAP) and t.element is not None:
            if inner or t.element.base in (BaseType.ARRAY, BaseType.MAP):
                raise StatementError(f"The 'PROTOBUF' format does not support type '{t.ksql_name}': an ARRAY or MAP "
                                     "inside an ARRAY or MAP has no proto3 form")
            fld.label = _LABEL_REPEATED
            if b is BaseType.ARRAY:
                element, options = self.field_type(t.element, nested, indent, parent, scope, fld, inner=True)
                return f"repeated {element}", options
            entry = parent.nested_type.add(name=map_entry_name(fld.name))
            entry.options.map_entry = True
            entry.field.add(name="key", number=1, label=_LABEL_OPTIONAL, type=_TYPE_STRING)
            value = entry.field.add(name="value", number=2, label=_LABEL_OPTIONAL)
            element, options = self.field_type(t.element, nested, indent, parent, scope, value, inner=True)
            fld.type, fld.type_name = _TYPE_MESSAGE, f"{scope}.{entry.name}"
            return f"map<string, {element}>", options
        if b is BaseType.STRUCT:
            name = f"ConnectDefault{self.next_message}"
            self.next_message += 1
            nested.extend(["", *self.message(name, t.fields, indent, parent.nested_type.add(), scope)])
            fld.type, fld.type_name = _TYPE_MESSAGE, f"{scope}.{name}"
            return name, ""
        raise StatementError(f"The 'PROTOBUF' format does not support type '{b.value}'")


def map_entry_name(field_name: str) -> str:
    """protoc's name of a map field's entry message (``my_map`` -> ``MyMapEntry``)."""
    return "".join(part[:1].upper() + part[1:] for part in field_name.split("_")) + "Entry"


def protobuf_schema(columns: list[tuple[str, SqlType]], *, full_name: str | None = None,
                    nullable: str | None = None) -> tuple[str, Any]:
    """(``.proto`` text, ``FileDescriptorProto``) of the schema ksqlDB registers (and
    PROTOBUF_NOSR reads) for these key or value columns: one message whose fields are the
    columns (keys and values alike), named ``full_name`` (``*_SCHEMA_FULL_NAME``: a dotted name
    is a package and a message) or ``ConnectDefault1``. ``nullable``: the
    ``*_PROTOBUF_NULLABLE_REPRESENTATION``, None (plain proto3 fields), ``OPTIONAL`` or ``WRAPPER``."""
    writer = _Writer(nullable)
    package, _, name = (full_name or ROOT_MESSAGE).rpartition(".")
    file_proto = writer.pb.FileDescriptorProto(name="schema.proto", syntax="proto3")
    if package:
        file_proto.package = package
    body = writer.message(name, tuple(StructField(n, t) for n, t in columns), "",
                          file_proto.message_type.add(), f".{package}" if package else "")
    head = ['syntax = "proto3";', ""]
    if package:
        head += [f"package {package};", ""]
    if writer.imports:
        head += [f'import "{path}";' for path in sorted(writer.imports)] + [""]
        file_proto.dependency.extend(sorted(writer.imports))
    return "\n".join(head + body) + "\n", file_proto


def protobuf_schema_of(columns: list[tuple[str, SqlType]], *, key: bool, full_name: str | None = None,
                       nullable: str | None = None) -> str:
    """The ``.proto`` text of ``protobuf_schema`` (``key`` changes nothing: never unwrapped)."""
    del key
    return protobuf_schema(columns, full_name=full_name, nullable=nullable)[0]


# -- descriptor -> columns ------------------------------------------------------------------------

_INTEGER_TYPES = {5, 17, 15}           # TYPE_INT32, TYPE_SINT32, TYPE_SFIXED32
_BIGINT_TYPES = {3, 18, 16, 13, 7, 4, 6}  # INT64, SINT64, SFIXED64, UINT32, FIXED32, UINT64, FIXED64
_DOUBLE_TYPES = {1, 2}                 # DOUBLE, FLOAT


def _decimal_params(text: str | None) -> dict[str, tuple[int, int]]:
    """Field name -> (precision, scale) of the ``confluent.type.Decimal`` fields in ``.proto`` text."""
    found: dict[str, tuple[int, int]] = {}
    if not text:
        return found
    for m in re.finditer(r"(?:\.|\b)Decimal\s+(\w+)\s*=\s*\d+\s*\[(.*?)\]\s*;", text, re.S):
        options = m.group(2)
        precision = re.search(r'key:\s*"precision",\s*value:\s*"(\d+)"|value:\s*"(\d+)",\s*key:\s*"precision"', options)
        scale = re.search(r'key:\s*"scale",\s*value:\s*"(\d+)"|value:\s*"(\d+)",\s*key:\s*"scale"', options)
        if precision and scale:
            found[m.group(1)] = (int(precision.group(1) or precision.group(2)), int(scale.group(1) or scale.group(2)))
    return found


_FIELD_META = 1036   # confluent/meta.proto: extend google.protobuf.FieldOptions { Meta field_meta = 1036; }


def _fields_of(data: bytes) -> list[tuple[int, bytes]]:
    """(number, bytes) of the length-delimited fields of a serialized message."""
    from google.protobuf import empty_pb2
    from google.protobuf.unknown_fields import UnknownFieldSet

    holder = empty_pb2.Empty()
    holder.MergeFromString(data)
    return [(f.field_number, f.data) for f in UnknownFieldSet(holder) if f.wire_type == 2]


def _option_params(field_proto: Any) -> dict[str, str]:
    """The ``confluent.field_meta`` params a descriptor's field options carry (a descriptor
    registered serialized keeps them, as unknown fields of FieldOptions here)."""
    from google.protobuf.unknown_fields import UnknownFieldSet

    if not field_proto.HasField("options"):
        return {}
    params: dict[str, str] = {}
    for option in UnknownFieldSet(field_proto.options):
        if option.field_number != _FIELD_META or option.wire_type != 2:
            continue
        for number, entry in _fields_of(option.data):
            if number == 2:   # Meta.params, map<string, string>: entries {1: key, 2: value}
                parts = dict(_fields_of(entry))
                params[parts.get(1, b"").decode()] = parts.get(2, b"").decode()
    return params


WELL_KNOWN_IMPORTS = frozenset({*_IMPORTS.values(), "google/protobuf/wrappers.proto", "confluent/meta.proto"})


def needs_references(file_proto: Any) -> bool:
    """Whether ``file_proto`` imports a file other than the well-known ones (a schema reference)."""
    return any(name not in WELL_KNOWN_IMPORTS for name in file_proto.dependency)


def dependency_files(dependencies: Any) -> tuple[Any, ...]:
    """The ``FileDescriptorProto`` of each (import name, base64 descriptor) pair (what
    ``RegistryClient.dependencies`` answers), named as the import names it."""
    files = []
    for name, descriptor_b64 in dependencies or ():
        file_proto = file_descriptor(str(descriptor_b64))
        file_proto.name = str(name)
        files.append(file_proto)
    return tuple(files)


class _Reader:
    """Maps the messages of one FileDescriptorProto (by full name) to SQL types; the messages
    of the files it imports through schema references (``dependencies``) resolve too."""

    def __init__(self, file_proto: Any, text: str | None, dependencies: tuple[Any, ...] = ()) -> None:
        self.messages: dict[str, Any] = {}
        self.enums: set[str] = set()
        self.decimals = _decimal_params(text)
        for each in (*dependencies, file_proto):
            package = f".{each.package}" if each.package else ""
            for message in each.message_type:
                self._collect(message, package)
            for enum in each.enum_type:
                self.enums.add(f"{package}.{enum.name}")

    def _collect(self, message: Any, scope: str) -> None:
        name = f"{scope}.{message.name}"
        self.messages[name] = message
        for nested in message.nested_type:
            self._collect(nested, name)
        for enum in message.enum_type:
            self.enums.add(f"{name}.{enum.name}")

    def resolve(self, type_name: str, scope: str) -> str:
        """The full name (leading dot) of ``type_name`` seen from message ``scope``."""
        if type_name.startswith("."):
            return type_name
        parts = scope.split(".")
        while parts:
            candidate = ".".join([*parts, type_name])
            if candidate in self.messages or candidate in self.enums:
                return candidate
            parts.pop()
        return f".{type_name}"

    def struct(self, full_name: str, seen: tuple[str, ...]) -> SqlType:
        if full_name in seen:
            raise StatementError(f"The Protobuf message {full_name.lstrip('.')} is recursive: it has no SQL type")
        message = self.messages[full_name]
        fields = tuple(StructField(f.name, self.field(f, full_name, (*seen, full_name))) for f in message.field)
        return SqlType(BaseType.STRUCT, fields=fields)

    def field(self, f: Any, scope: str, seen: tuple[str, ...]) -> SqlType:
        if f.type == _TYPE_MESSAGE:
            full = self.resolve(f.type_name, scope)
            entry = self.messages.get(full)
            if f.label == _LABEL_REPEATED and entry is not None and entry.options.map_entry:
                value = next(x for x in entry.field if x.name == "value")
                return SqlType(BaseType.MAP, key=SqlType(BaseType.STRING), element=self.field(value, full, seen))
            element = self._message_type(f, full, seen)
        else:
            element = self._scalar(f, scope)
        return SqlType(BaseType.ARRAY, element=element) if f.label == _LABEL_REPEATED else element

    def _message_type(self, f: Any, full: str, seen: tuple[str, ...]) -> SqlType:
        name = full.lstrip(".")
        if name == TIMESTAMP:
            return SqlType(BaseType.TIMESTAMP)
        if name == DATE:
            return SqlType(BaseType.DATE)
        if name == TIME_OF_DAY:
            return SqlType(BaseType.TIME)
        if name == DECIMAL:
            params = _option_params(f)
            if "precision" in params and "scale" in params:
                precision, scale = int(params["precision"]), int(params["scale"])
            else:
                precision, scale = self.decimals.get(f.name, (64, 0))
            return SqlType(BaseType.DECIMAL, precision=precision, scale=scale)
        if name in WRAPPERS:
            return SqlType(WRAPPERS[name])
        if full not in self.messages:
            raise StatementError(f"The Protobuf type {name} is neither in the schema nor a type ksqlDB maps")
        return self.struct(full, seen)

    def _scalar(self, f: Any, scope: str) -> SqlType:
        if f.type in _INTEGER_TYPES:
            return SqlType(BaseType.INTEGER)
        if f.type in _BIGINT_TYPES:
            return SqlType(BaseType.BIGINT)
        if f.type in _DOUBLE_TYPES:
            return SqlType(BaseType.DOUBLE)
        if f.type == _TYPE_BOOL:
            return SqlType(BaseType.BOOLEAN)
        if f.type in (_TYPE_STRING, _TYPE_ENUM):
            return SqlType(BaseType.STRING)
        if f.type == _TYPE_BYTES:
            return SqlType(BaseType.BYTES)
        raise StatementError(f"The Protobuf field {f.name} of {scope.lstrip('.')} has no SQL type")


def file_descriptor(descriptor_b64: str) -> Any:
    """The ``FileDescriptorProto`` of a registry's ``format=serialized`` answer (base64)."""
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    file_proto = descriptor_pb2.FileDescriptorProto()
    try:
        file_proto.ParseFromString(base64.b64decode(descriptor_b64, validate=True))
    except (ValueError, DecodeError) as e:
        raise StatementError(f"The registry's Protobuf descriptor does not parse: {e}") from None
    return file_proto


def message_names(file_proto: Any) -> list[str]:
    """The full names of a file's top-level messages, in order (their message indexes)."""
    package = f"{file_proto.package}." if file_proto.package else ""
    return [package + m.name for m in file_proto.message_type]


def message_index(file_proto: Any, full_name: str | None) -> int:
    """The index of the top-level message ``full_name`` names (its full name, or its bare name
    in a file with a package); 0 without a name. Raises ``StatementError`` if there is none."""
    if full_name is None:
        return 0
    names = message_names(file_proto)
    for i, name in enumerate(names):
        if full_name in (name, name.rpartition(".")[2]):
            return i
    raise StatementError(f"Schema does not contain the message {full_name}: its messages are {', '.join(names)}")


def columns_of_protobuf(file_proto: Any, text: str | None = None, *, key: bool = False,
                        full_name: str | None = None, dependencies: tuple[Any, ...] = ()) -> list[tuple[str, SqlType]]:
    """The columns ksqlDB infers from a Protobuf schema: the fields of the message ``full_name``
    names (``*_SCHEMA_FULL_NAME``), else of its only top-level message (several without a name
    are refused, as ksqlDB's ``DefaultSchemaInjector`` does); ``dependencies``: the files it
    imports through schema references (``dependency_files``)."""
    if not file_proto.message_type:
        raise StatementError("The Protobuf schema has no message")
    names = message_names(file_proto)
    if full_name is None and len(names) > 1:
        side, prop = ("Key", "KEY_SCHEMA_FULL_NAME") if key else ("Value", "VALUE_SCHEMA_FULL_NAME")
        listed = "\n".join(f"- {n}" for n in names)
        raise StatementError(f"{side} schema has multiple schema definitions. \n\n{listed}\n\nPlease specify a schema "
                             f"full name in the WITH clause using {prop}")
    reader = _Reader(file_proto, text, dependencies)
    root = reader.struct("." + names[message_index(file_proto, full_name)], ())
    return [(f.name, f.type) for f in root.fields]
