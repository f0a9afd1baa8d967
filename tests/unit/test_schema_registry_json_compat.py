"""JSON Schema compatibility: open and closed content models as Confluent documents them."""

from __future__ import annotations

from typing import Any

from oncestream.schema_registry.compat_json import json_incompatibilities


def obj(props: dict[str, Any], *, closed: bool = False, required: list[str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props}
    if closed:
        out["additionalProperties"] = False
    if required:
        out["required"] = required
    return out


def kinds(problems: list[str]) -> list[str]:
    return [p.split("'")[1] for p in problems]


def test_identical_is_compatible() -> None:
    schema = obj({"a": {"type": "string"}}, required=["a"])
    assert json_incompatibilities(schema, schema) == []


def test_property_added_to_open_model_is_incompatible() -> None:
    assert kinds(json_incompatibilities(obj({"a": {"type": "string"}, "b": {"type": "integer"}}),
                                        obj({"a": {"type": "string"}}))) == ["PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"]


def test_property_added_to_closed_model_is_compatible() -> None:
    assert json_incompatibilities(obj({"a": {"type": "string"}, "b": {"type": "integer"}}, closed=True),
                                  obj({"a": {"type": "string"}}, closed=True)) == []


def test_property_removed_from_closed_model_is_incompatible() -> None:
    assert kinds(json_incompatibilities(obj({"a": {"type": "string"}}, closed=True),
                                        obj({"a": {"type": "string"}, "b": {"type": "integer"}}, closed=True))) \
        == ["PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"]


def test_property_removed_from_open_model_is_compatible() -> None:
    assert json_incompatibilities(obj({"a": {"type": "string"}}), obj({"a": {"type": "string"}, "b": {}})) == []


def test_closing_the_model_is_incompatible() -> None:
    assert "ADDITIONAL_PROPERTIES_REMOVED" in kinds(json_incompatibilities(obj({}, closed=True), obj({})))


def test_required_property_added() -> None:
    old = obj({"a": {"type": "string"}, "b": {"type": "string"}}, closed=True)
    assert kinds(json_incompatibilities(obj({"a": {"type": "string"}, "b": {"type": "string"}}, closed=True,
                                            required=["b"]), old)) == ["REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL"]
    with_default = obj({"a": {"type": "string"}, "b": {"type": "string", "default": ""}}, closed=True, required=["b"])
    assert json_incompatibilities(with_default, old) == []


def test_type_narrowing_and_widening() -> None:
    assert kinds(json_incompatibilities({"type": "integer"}, {"type": "number"})) == ["TYPE_NARROWED"]
    assert json_incompatibilities({"type": "number"}, {"type": "integer"}) == []
    assert json_incompatibilities({"type": ["string", "null"]}, {"type": "string"}) == []


def test_bounds() -> None:
    assert kinds(json_incompatibilities({"type": "string", "maxLength": 5}, {"type": "string", "maxLength": 10})) \
        == ["MAX_LENGTH_DECREASED"]
    assert json_incompatibilities({"type": "string", "maxLength": 10}, {"type": "string", "maxLength": 5}) == []
    assert kinds(json_incompatibilities({"type": "integer", "minimum": 1}, {"type": "integer"})) == ["MINIMUM_ADDED"]


def test_enum_narrowed_and_extended() -> None:
    assert json_incompatibilities({"enum": ["a", "b", "c"]}, {"enum": ["a", "b"]}) == []
    assert kinds(json_incompatibilities({"enum": ["a"]}, {"enum": ["a", "b"]})) == ["ENUM_ARRAY_NARROWED"]


def test_local_refs_resolve() -> None:
    old = {"definitions": {"x": {"type": "integer"}}, "type": "object", "properties": {"v": {"$ref": "#/definitions/x"}}}
    new = {"definitions": {"x": {"type": "number"}}, "type": "object", "properties": {"v": {"$ref": "#/definitions/x"}}}
    assert json_incompatibilities(new, old) == []
    assert kinds(json_incompatibilities(old, new)) == ["TYPE_NARROWED"]


def test_one_of_branches() -> None:
    assert json_incompatibilities({"oneOf": [{"type": "string"}, {"type": "integer"}]},
                                  {"oneOf": [{"type": "string"}]}) == []
    assert "COMBINED_TYPE_SUBSCHEMAS_CHANGED" in kinds(json_incompatibilities({"oneOf": [{"type": "string"}]},
                                                                                {"oneOf": [{"type": "integer"}]}))
