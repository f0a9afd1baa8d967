"""Avro compatibility by the specification's schema resolution rules (reader vs writer)."""

from __future__ import annotations

from typing import Any

import pytest

from oncestream.schema_registry.compat_avro import avro_incompatibilities


def record(*fields: dict[str, Any], name: str = "R", **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def f(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


@pytest.mark.parametrize(("writer", "reader"), [
    ("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"), ("long", "double"),
    ("float", "double"), ("string", "bytes"), ("bytes", "string"), ("null", "null"),
])
def test_promotions_are_readable(writer: str, reader: str) -> None:
    assert avro_incompatibilities(reader, writer) == []


@pytest.mark.parametrize(("writer", "reader"), [
    ("long", "int"), ("double", "float"), ("float", "long"), ("string", "int"), ("boolean", "int"),
])
def test_narrowing_is_not(writer: str, reader: str) -> None:
    problems = avro_incompatibilities(reader, writer)
    assert len(problems) == 1
    assert "TYPE_MISMATCH" in problems[0]


def test_added_field_needs_a_default() -> None:
    old = record(f("a", "int"))
    assert avro_incompatibilities(record(f("a", "int"), f("b", "string", default="x")), old) == []
    problems = avro_incompatibilities(record(f("a", "int"), f("b", "string")), old)
    assert len(problems) == 1
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in problems[0]
    assert "'b'" in problems[0]


def test_removed_field_is_skipped_by_the_reader() -> None:
    assert avro_incompatibilities(record(f("a", "int")), record(f("a", "int"), f("b", "string"))) == []


def test_field_found_through_a_reader_alias() -> None:
    writer = record(f("old_name", "int"))
    assert avro_incompatibilities(record(f("new_name", "int", aliases=["old_name"])), writer) == []


def test_record_names_must_match_or_alias() -> None:
    assert "NAME_MISMATCH" in avro_incompatibilities(record(name="A"), record(name="B"))[0]
    assert avro_incompatibilities(record(name="A", aliases=["B"]), record(name="B")) == []
    # Namespaces do not matter, the unqualified name does.
    assert avro_incompatibilities(record(name="A", namespace="x"), record(name="A", namespace="y")) == []


def test_enum_symbols() -> None:
    def enum(*symbols: str, **extra: Any) -> dict[str, Any]:
        return {"type": "enum", "name": "E", "symbols": list(symbols), **extra}

    assert avro_incompatibilities(enum("A", "B", "C"), enum("A", "B")) == []
    assert "MISSING_ENUM_SYMBOLS" in avro_incompatibilities(enum("A"), enum("A", "B"))[0]
    assert avro_incompatibilities(enum("A", "U", default="U"), enum("A", "B")) == []


def test_fixed_size() -> None:
    assert avro_incompatibilities({"type": "fixed", "name": "F", "size": 4}, {"type": "fixed", "name": "F", "size": 4}) == []
    assert "FIXED_SIZE_MISMATCH" in avro_incompatibilities({"type": "fixed", "name": "F", "size": 8},
                                                           {"type": "fixed", "name": "F", "size": 4})[0]


def test_unions() -> None:
    # A writer non-union read by a reader union with a matching (or promotable) branch.
    assert avro_incompatibilities(["null", "long"], "int") == []
    assert "MISSING_UNION_BRANCH" in avro_incompatibilities(["null", "string"], "int")[0]
    # A writer union: every branch must be readable.
    assert avro_incompatibilities(["null", "string", "int"], ["null", "string"]) == []
    assert avro_incompatibilities(["null", "string"], ["null", "string", "int"]) != []
    assert avro_incompatibilities("long", ["int", "long"]) == []
    assert avro_incompatibilities("int", ["int", "long"]) != []


def test_arrays_and_maps_resolve_their_items() -> None:
    assert avro_incompatibilities({"type": "array", "items": "long"}, {"type": "array", "items": "int"}) == []
    assert avro_incompatibilities({"type": "map", "values": "int"}, {"type": "map", "values": "long"}) != []
    assert "TYPE_MISMATCH" in avro_incompatibilities({"type": "array", "items": "int"}, {"type": "map", "values": "int"})[0]


def test_nested_records_and_named_references() -> None:
    inner_old = record(f("x", "int"), name="Inner")
    inner_new = record(f("x", "int"), f("y", "int"), name="Inner")
    old = record(f("in", inner_old), f("again", "Inner"))
    new = record(f("in", inner_new), f("again", "Inner"))
    problems = avro_incompatibilities(new, old)
    # Both uses of Inner (inline and by name) lack y's default.
    assert len(problems) == 2
    assert all("'y'" in p for p in problems)
    new_ok = record(f("in", record(f("x", "long"), f("y", "int", default=0), name="Inner")), f("again", "Inner"))
    assert avro_incompatibilities(new_ok, old) == []


def test_recursive_types_terminate() -> None:
    linked = record(f("value", "int"), f("next", ["null", "Node"], default=None), name="Node")
    linked_wider = record(f("value", "long"), f("next", ["null", "Node"], default=None), name="Node")
    assert avro_incompatibilities(linked_wider, linked) == []
    assert avro_incompatibilities(linked, linked_wider) != []


def test_referenced_named_types() -> None:
    named = {"com.x.Address": (record(f("street", "string"), name="Address", namespace="com.x"), "com.x")}
    reader = record(f("home", "com.x.Address"))
    writer = record(f("home", record(f("street", "string"), name="Address", namespace="com.x")))
    assert avro_incompatibilities(reader, writer, reader_named=named) == []


def test_forward_direction_is_the_swap() -> None:
    old = record(f("a", "int"))
    new = record(f("a", "int"), f("b", "string"))  # added without default
    assert avro_incompatibilities(new, old) != []   # BACKWARD fails
    assert avro_incompatibilities(old, new) == []   # FORWARD holds: the old reader skips b
