"""Request header parsing, request body decoding and response encoding on top of kio.

kio supplies one generated dataclass module per (API, version) plus a native reader and a writer.
This module adds the three things kio leaves to the embedder: reading the request header (we do it
by hand because the header version depends on whether the *body* version is flexible, which is
only known after reading api key and version), framing a response with the right header version
(ApiVersions always answers with header v0, KIP-511), and ``build`` — constructing a kio dataclass
from keyword arguments, so that one handler can answer every version it supports.

``build`` follows Kafka's generated message classes, which span versions: a field that another
version of the message has may be left out of this version's object only while it holds its
default (Kafka's ``write`` throws UnsupportedVersionException for a non-default value the version
cannot carry: ``UnsupportedFieldVersionError`` here, unless Kafka's schema marks the field
ignorable: protocol/ignorable_fields.py); a name no version of the message has is a
misspelling, always refused (``UnknownFieldError``), never silently dropped.
"""

from __future__ import annotations

import datetime
import functools
import importlib
import io
import struct
import uuid
from dataclasses import MISSING, Field, dataclass, fields
from typing import Any

from kio.schema.index import schema_name_map
from kio.serial import entity_reader, entity_writer

from oncestream.protocol.api_keys import API_VERSIONS, API_VERSIONS_KEY
from oncestream.protocol.ignorable_fields import IGNORABLE_FIELDS
from oncestream.protocol.length_guard import ArrayLengthError, check_array_lengths
from oncestream.protocol.schemas import request_class, response_class, response_module  # noqa: F401 (re-exported for handlers)
from oncestream.protocol.varint import MalformedVarintError, read_uvarint

_HEADER_FIXED = struct.Struct(">hhih")
_SIZE = struct.Struct(">i")


class MalformedRequestError(Exception):
    """The request frame cannot be parsed; the connection must be closed."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """The fields of a request header that the broker uses."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int


def parse_request_header(frame: bytes | memoryview) -> RequestHeader:
    """Parse header v1/v2 of a request frame (without the 4-byte size prefix)."""
    if len(frame) < _HEADER_FIXED.size:
        raise MalformedRequestError("request shorter than its header")
    api_key, api_version, correlation_id, client_id_len = _HEADER_FIXED.unpack_from(frame, 0)
    pos = _HEADER_FIXED.size
    client_id: str | None = None
    if client_id_len >= 0:
        end = pos + client_id_len
        if end > len(frame):
            raise MalformedRequestError("client id runs past the frame")
        client_id = bytes(frame[pos:end]).decode("utf-8", "replace")
        pos = end
    if is_flexible(api_key, api_version):
        # Header v2: tagged fields follow the client id (which stays a nullable int16 string).
        try:
            count, pos = read_uvarint(frame, pos)
            for _ in range(count):
                _tag, pos = read_uvarint(frame, pos)
                size, pos = read_uvarint(frame, pos)
                pos += size
                if pos > len(frame):
                    raise MalformedRequestError("tagged field runs past the frame")
        except MalformedVarintError as exc:
            raise MalformedRequestError(f"request header: {exc}") from exc
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


@functools.cache
def is_flexible(api_key: int, api_version: int) -> bool:
    """Whether this (key, version) uses flexible encoding; False for anything we do not support."""
    supported = API_VERSIONS.get(api_key)
    if supported is None or not supported[0] <= api_version <= supported[1]:
        return False
    return bool(request_class(api_key, api_version).__flexible__)


_READERS: dict[type[Any], Any] = {}
_WRITERS: dict[type[Any], Any] = {}


def reader_for(cls: type[Any]) -> Any:
    """kio's reader of one request/response class, built once (building one is slow)."""
    reader = _READERS.get(cls)
    if reader is None:
        reader = _READERS[cls] = entity_reader(cls)
    return reader


def writer_for(cls: type[Any]) -> Any:
    """kio's writer of one request/response class, built once."""
    writer = _WRITERS.get(cls)
    if writer is None:
        writer = _WRITERS[cls] = entity_writer(cls)
    return writer


def decode_request(header: RequestHeader, frame: bytes | memoryview) -> Any:
    """Decode the body of a supported request. Raises MalformedRequestError on bad input."""
    cls = request_class(header.api_key, header.api_version)
    try:
        # kio aborts the process on an array length it cannot allocate (see length_guard).
        check_array_lengths(cls, frame, header.body_offset)
        entity, _size = reader_for(cls)(frame, header.body_offset)
    except ArrayLengthError as exc:
        raise MalformedRequestError(f"cannot decode {cls.__name__}: {exc}") from exc
    except Exception as exc:  # kio raises ValueError/IndexError/etc. on malformed bodies
        raise MalformedRequestError(f"cannot decode {cls.__name__}: {exc}") from exc
    return entity


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


class UnknownFieldError(TypeError):
    """``build`` was given a field name that no version of the message has (a misspelling)."""

    def __init__(self, field_name: str, cls: type, version: int) -> None:
        super().__init__(f"{cls.__name__} has no field {field_name!r} in any version (building version {version})")
        self.field_name, self.message_class, self.version = field_name, cls, version


class UnsupportedFieldVersionError(ValueError):
    """``build`` was given a non-default value for a field that other versions of the message have
    but this one does not: answering would silently lose it (Kafka's UnsupportedVersionException)."""

    def __init__(self, field_name: str, cls: type, version: int, value: object) -> None:
        super().__init__(
            f"{cls.__name__} version {version} has no field {field_name!r}, "
            f"so it cannot carry the non-default value {value!r}"
        )
        self.field_name, self.message_class, self.version, self.value = field_name, cls, version, value


def _is_default(field: Field[Any], value: object) -> bool:
    """Whether ``value`` is what Kafka would write for this field when nothing was set: the
    field's declared default, else (Kafka's implicit defaults) null, zero, false or empty."""
    if value is None:
        return True  # a nullable field's absence
    if field.default is not MISSING:
        return bool(value == field.default)
    if field.default_factory is not MISSING:
        return bool(value == field.default_factory())
    if isinstance(value, uuid.UUID):
        return value.int == 0
    return isinstance(value, int | float | str | bytes | tuple | list | datetime.timedelta) and not value


def _api_of(cls: type) -> str:
    """kio's module name of the API a message class belongs to (``kio.schema.<api>.v<N>...``)."""
    return cls.__module__.split(".")[2]


@functools.cache
def _fields_of_other_versions(cls: type) -> dict[str, Field[Any]]:
    """The fields other versions of this message (the class of the same name in every version
    module of the same API) have and this version lacks, by name."""
    package, _, kind = cls.__module__.rpartition(".")  # kio.schema.<api>.v<N> . request|response
    api_package = package.rpartition(".")[0]
    own = _field_names(cls)
    found: dict[str, Field[Any]] = {}
    for version in sorted(schema_name_map.get(api_package.rpartition(".")[2], {})):
        try:
            module = importlib.import_module(f"{api_package}.v{version}.{kind}")
        except ImportError:
            continue
        other = getattr(module, cls.__name__, None)
        if other is None or other is cls:
            continue
        for f in fields(other):
            if f.name not in own:
                found.setdefault(f.name, f)
    return found


def build(cls: type, **values: Any) -> Any:
    """Construct a kio dataclass of one version from keyword arguments meant for every version.

    A field this version lacks is left out when another version has it and the value is its
    default; a non-default value raises UnsupportedFieldVersionError, a name no version has raises
    UnknownFieldError.
    """
    names = _field_names(cls)
    if names.issuperset(values):
        return cls(**values)  # the common case: nothing to drop
    others = _fields_of_other_versions(cls)
    kept: dict[str, Any] = {}
    for name, value in values.items():
        if name in names:
            kept[name] = value
            continue
        other = others.get(name)
        if other is None:
            raise UnknownFieldError(name, cls, cls.__version__)  # type: ignore[attr-defined]
        if not _is_default(other, value) and (_api_of(cls), cls.__name__, name) not in IGNORABLE_FIELDS:
            raise UnsupportedFieldVersionError(name, cls, cls.__version__, value)  # type: ignore[attr-defined]
    return cls(**kept)


def encode_response(api_key: int, api_version: int, correlation_id: int, response: Any) -> bytes:
    """Serialize a response with its size prefix and the right response header version."""
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    buf.write(_SIZE.pack(correlation_id))
    # Flexible responses use header v1 (an empty tagged-field section), except ApiVersions,
    # which always answers with header v0 so that any client can read it (KIP-511).
    if response.__flexible__ and api_key != API_VERSIONS_KEY:
        buf.write(b"\0")
    writer_for(type(response))(buf, response)
    out = buf.getbuffer()
    _SIZE.pack_into(out, 0, len(out) - 4)
    del out
    return buf.getvalue()


def has_field(cls: type, name: str) -> bool:
    """Whether this version's dataclass has a field (for version-dependent behaviour)."""
    return name in _field_names(cls)
