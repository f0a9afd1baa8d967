"""``protocol.codec.build``: one set of keyword arguments answers every version, as Kafka's
generated message classes do. A field another version has is left out of a version without it
only while it holds its default (Kafka's ``write`` throws UnsupportedVersionException otherwise,
unless the schema marks the field ignorable, protocol/ignorable_fields.py); a name no version has
is a misspelling, refused."""

from __future__ import annotations

import ast
import dataclasses
import datetime
import importlib
import pathlib
from typing import Any

import pytest
from kio.schema.index import schema_name_map

import oncestream
from oncestream.protocol.api_keys import FIND_COORDINATOR, LIST_OFFSETS, PRODUCE
from oncestream.protocol.codec import UnknownFieldError, UnsupportedFieldVersionError, build
from oncestream.protocol.ignorable_fields import IGNORABLE_FIELDS
from oncestream.protocol.schemas import request_module, response_module


def _partition(version: int, **values: object) -> Any:  # one of several versions' kio classes, as build() returns
    m = response_module(PRODUCE, version)
    return build(m.PartitionProduceResponse, index=0, error_code=0, base_offset=7, **values)


def test_a_misspelled_field_is_an_error_naming_field_class_and_version() -> None:
    with pytest.raises(UnknownFieldError) as caught:
        _partition(11, base_offest=7)
    error = caught.value
    assert error.field_name == "base_offest"
    assert error.version == 11
    assert error.message_class.__name__ == "PartitionProduceResponse"
    assert "base_offest" in str(error)
    assert "PartitionProduceResponse" in str(error)
    assert "11" in str(error)


def test_a_misspelled_field_is_an_error_even_where_nothing_else_is_dropped() -> None:
    m = response_module(LIST_OFFSETS, 7)
    with pytest.raises(UnknownFieldError):
        build(m.ListOffsetsResponse, throttle_time=datetime.timedelta(0), topics=(), topic=())


def test_a_field_of_later_versions_holding_its_default_is_left_out() -> None:
    # log_start_offset exists from Produce v5; v3 answers without it when it is the default -1.
    built = _partition(3, log_start_offset=-1, log_append_time=None)
    assert not hasattr(built, "log_start_offset")
    assert built.base_offset == 7


def test_a_non_default_value_for_a_field_this_version_lacks_is_refused_like_kafka() -> None:
    # Kafka's FindCoordinatorRequestData.write at version 4 throws UnsupportedVersionException for
    # a non-empty Key (versions 0-3, not ignorable): the key would silently vanish otherwise.
    m = request_module(FIND_COORDINATOR, 4)
    with pytest.raises(UnsupportedFieldVersionError) as caught:
        build(m.FindCoordinatorRequest, key="orders", key_type=0, coordinator_keys=("orders",))
    error = caught.value
    assert error.field_name == "key"
    assert error.version == 4
    assert error.value == "orders"
    assert "key" in str(error)
    assert "'orders'" in str(error)
    assert "FindCoordinatorRequest" in str(error)
    # KeyType (v1+, not ignorable): version 0 can only carry the group key type, 0.
    v0 = request_module(FIND_COORDINATOR, 0)
    assert build(v0.FindCoordinatorRequest, key="orders", key_type=0).key == "orders"
    with pytest.raises(UnsupportedFieldVersionError):
        build(v0.FindCoordinatorRequest, key="txn", key_type=1)


def test_the_default_of_a_field_this_version_lacks_is_left_out() -> None:
    m = request_module(FIND_COORDINATOR, 4)
    built = build(m.FindCoordinatorRequest, key="", key_type=0, coordinator_keys=("orders",))
    assert built.coordinator_keys == ("orders",)
    assert not hasattr(built, "key")


def test_an_ignorable_field_is_dropped_whatever_its_value() -> None:
    # ProduceResponse's ErrorMessage (v8+) and LogStartOffset (v5+) are "ignorable": true in
    # Kafka's schema: a version without them answers without them.
    built = _partition(4, error_message="not durable", log_start_offset=42)
    assert not hasattr(built, "error_message")
    assert not hasattr(built, "log_start_offset")
    assert _partition(8, error_message="not durable", record_errors=()).error_message == "not durable"


def test_every_field_of_the_version_passes_through() -> None:
    m = response_module(LIST_OFFSETS, 1)
    built = build(m.ListOffsetsPartitionResponse, partition_index=3, error_code=0, timestamp=5, offset=9)
    assert (built.partition_index, built.timestamp, built.offset) == (3, 5, 9)


def _kio_fields_by_class_name() -> dict[str, set[str]]:
    """Every field of every kio message class, by class name, over all APIs and versions."""
    by_name: dict[str, set[str]] = {}
    for api, versions in schema_name_map.items():
        for version in versions:
            for kind in ("request", "response"):
                try:
                    module = importlib.import_module(f"kio.schema.{api}.v{version}.{kind}")
                except ImportError:
                    continue
                for cls in vars(module).values():
                    if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == module.__name__:
                        by_name.setdefault(cls.__name__, set()).update(f.name for f in dataclasses.fields(cls))
    return by_name


def test_every_build_call_in_the_source_names_fields_kio_has() -> None:
    """A static sweep over ``build(m.<Class>, name=...)`` calls in src: every keyword is a field
    of some kio class of that name. (It found DescribeConfigs' ``is_default``, a field of v0 only,
    a version neither we nor kio have, passed on every answer and dropped without a word.)"""
    known = _kio_fields_by_class_name()
    unknown = []
    for path in sorted(pathlib.Path(oncestream.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "build"):
                continue
            if not node.args or not isinstance(node.args[0], ast.Attribute):
                continue
            class_name = node.args[0].attr
            if class_name not in known:
                unknown.append(f"{path.name}:{node.lineno}: no kio class {class_name}")
                continue
            unknown.extend(
                f"{path.name}:{node.lineno}: {class_name} has no field {kw.arg}"
                for kw in node.keywords
                if kw.arg is not None and kw.arg not in known[class_name]
            )
    assert unknown == [], "\n".join(unknown)


def test_every_ignorable_entry_names_a_kio_field_of_its_api() -> None:
    """protocol/ignorable_fields.py is keyed by kio names: a typo there would silently never match."""
    missing = []
    for api, class_name, field_name in sorted(IGNORABLE_FIELDS):
        names: set[str] = set()
        for version in schema_name_map[api]:
            for kind in ("request", "response"):
                cls = getattr(importlib.import_module(f"kio.schema.{api}.v{version}.{kind}"), class_name, None)
                if cls is not None:
                    names.update(f.name for f in dataclasses.fields(cls))
        if field_name not in names:
            missing.append((api, class_name, field_name))
    assert missing == []
