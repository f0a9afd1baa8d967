"""JSON Schema compatibility as Confluent documents it: does every document the writer schema
accepts also pass the reader schema?

Content models: an object schema is *closed* when ``additionalProperties`` is ``false`` (or a
schema other than ``true``/absent), *open* otherwise. With an open writer, a document may carry
any property, so a property the reader adds constrains data the writer allowed
(PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL, incompatible); with a closed writer it cannot occur
(compatible). A property the reader drops is fine when the reader is open and incompatible when
it is closed (PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL). Narrowing a type, adding a required
property (without a default), tightening string/number/array bounds, a pattern, an enum or a
``const``, closing the content model (ADDITIONAL_PROPERTIES_REMOVED) are incompatible; widening
is compatible. ``$ref`` to ``#/...`` resolves within the document; other references compare by
name.
"""

from __future__ import annotations

from typing import Any

_MISSING = object()


def _types(schema: dict[str, Any]) -> set[str] | None:
    """The schema's ``type`` as a set (None: any type)."""
    kind = schema.get("type")
    if kind is None:
        return None
    out = set(kind) if isinstance(kind, list) else {kind}
    if "number" in out:
        out.add("integer")  # every integer is a number
    return out


class _Checker:
    def __init__(self, reader_root: Any, writer_root: Any) -> None:
        self.reader_root = reader_root
        self.writer_root = writer_root
        self.problems: list[str] = []
        self._in_progress: set[tuple[int, int]] = set()

    def fail(self, error_type: str, path: str, detail: str = "") -> None:
        self.problems.append(f"{{errorType:'{error_type}', path:'{path or '#/'}'"
                             + (f", description:'{detail}'" if detail else "") + "}")

    @staticmethod
    def _deref(schema: Any, root: Any) -> Any:
        for _ in range(32):
            if not (isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and schema["$ref"].startswith("#")):
                return schema
            target: Any = root
            for part in schema["$ref"].lstrip("#").strip("/").split("/"):
                if part == "":
                    continue
                part = part.replace("~1", "/").replace("~0", "~")
                if not isinstance(target, dict) or part not in target:
                    return schema
                target = target[part]
            schema = target
        return schema

    def check(self, reader: Any, writer: Any, path: str) -> None:
        reader = self._deref(reader, self.reader_root)
        writer = self._deref(writer, self.writer_root)
        if reader is True or reader == {}:
            return
        if writer is False:
            return
        if reader is False:
            self.fail("TYPE_NARROWED", path, "the new schema accepts nothing")
            return
        if writer is True:
            writer = {}
        if not isinstance(reader, dict) or not isinstance(writer, dict):
            return
        key = (id(reader), id(writer))
        if key in self._in_progress:
            return
        self._in_progress.add(key)
        try:
            self._check_dicts(reader, writer, path)
        finally:
            self._in_progress.discard(key)

    def _check_dicts(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> None:
        if "$ref" in reader or "$ref" in writer:
            if reader.get("$ref") != writer.get("$ref"):
                self.fail("REFERENCE_CHANGED", path, f"{writer.get('$ref')} -> {reader.get('$ref')}")
            return
        for combiner in ("oneOf", "anyOf"):
            if combiner in reader or combiner in writer:
                self._check_combined(reader, writer, combiner, path)
                return
        r_types, w_types = _types(reader), _types(writer)
        if r_types is not None and (w_types is None or not w_types <= r_types):
            self.fail("TYPE_NARROWED", f"{path}/type", f"{sorted(w_types or ['any'])} -> {sorted(r_types)}")
            return
        self._check_values(reader, writer, path)
        kinds = w_types if w_types is not None else (r_types or set())
        if "object" in kinds or "properties" in reader or "properties" in writer:
            self._check_object(reader, writer, path)
        if "array" in kinds or "items" in reader:
            self._check_array(reader, writer, path)
        self._check_bounds(reader, writer, path)

    def _check_values(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> None:
        if "enum" in reader:
            writer_values = writer.get("enum", [writer["const"]] if "const" in writer else None)
            if writer_values is None or any(v not in reader["enum"] for v in writer_values):
                self.fail("ENUM_ARRAY_NARROWED", f"{path}/enum")
        if "const" in reader and writer.get("const", _MISSING) != reader["const"]:
            self.fail("CONST_CHANGED", f"{path}/const")
        if "pattern" in reader and reader["pattern"] != writer.get("pattern"):
            self.fail("PATTERN_ADDED" if "pattern" not in writer else "PATTERN_CHANGED", f"{path}/pattern")
        if "multipleOf" in reader:
            w_multiple = writer.get("multipleOf")
            if not isinstance(w_multiple, (int, float)) or w_multiple % reader["multipleOf"] != 0:
                self.fail("MULTIPLE_OF_CHANGED", f"{path}/multipleOf")

    def _check_bounds(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> None:
        # (keyword, the reader is tighter when its value is ...)
        for keyword, tighter in (("maxLength", "lower"), ("minLength", "higher"), ("maximum", "lower"),
                                 ("minimum", "higher"), ("exclusiveMaximum", "lower"),
                                 ("exclusiveMinimum", "higher"), ("maxItems", "lower"), ("minItems", "higher"),
                                 ("maxProperties", "lower"), ("minProperties", "higher")):
            if keyword not in reader or isinstance(reader[keyword], bool):
                continue
            old = writer.get(keyword)
            if old is None or isinstance(old, bool):
                self.fail(f"{_snake(keyword)}_ADDED", f"{path}/{keyword}")
            elif (tighter == "lower" and reader[keyword] < old) or (tighter == "higher" and reader[keyword] > old):
                self.fail(f"{_snake(keyword)}_{'DECREASED' if tighter == 'lower' else 'INCREASED'}", f"{path}/{keyword}")
        if reader.get("uniqueItems") is True and writer.get("uniqueItems") is not True:
            self.fail("UNIQUE_ITEMS_ADDED", f"{path}/uniqueItems")

    def _check_object(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> None:
        r_props: dict[str, Any] = reader.get("properties") or {}
        w_props: dict[str, Any] = writer.get("properties") or {}
        r_additional = reader.get("additionalProperties", True)
        w_additional = writer.get("additionalProperties", True)
        r_open = r_additional is not False
        w_open = w_additional is not False
        if w_open and not r_open:
            self.fail("ADDITIONAL_PROPERTIES_REMOVED", f"{path}/additionalProperties")
        for name, w_schema in w_props.items():
            if name in r_props:
                self.check(r_props[name], w_schema, f"{path}/properties/{name}")
            elif not r_open:
                self.fail("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", f"{path}/properties/{name}")
            elif isinstance(r_additional, dict):
                self.check(r_additional, w_schema, f"{path}/properties/{name}")
        for name, r_schema in r_props.items():
            if name in w_props:
                continue
            if w_open and not _accepts_anything(r_schema):
                if isinstance(w_additional, dict):
                    self.check(r_schema, w_additional, f"{path}/properties/{name}")
                else:
                    self.fail("PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", f"{path}/properties/{name}")
        w_required = set(writer.get("required") or [])
        for name in reader.get("required") or []:
            if name in w_required:
                continue
            has_default = isinstance(r_props.get(name), dict) and "default" in r_props[name]
            if not has_default:
                self.fail("REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL" if not w_open else "REQUIRED_ATTRIBUTE_ADDED",
                          f"{path}/required/{name}")

    def _check_array(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> None:
        r_items, w_items = reader.get("items", True), writer.get("items", True)
        if isinstance(r_items, list) or isinstance(w_items, list):
            r_list = r_items if isinstance(r_items, list) else []
            w_list = w_items if isinstance(w_items, list) else []
            for i, w_item in enumerate(w_list):
                if i < len(r_list):
                    self.check(r_list[i], w_item, f"{path}/items/{i}")
            return
        self.check(r_items, w_items, f"{path}/items")

    def _check_combined(self, reader: dict[str, Any], writer: dict[str, Any], combiner: str, path: str) -> None:
        r_branches = reader.get(combiner, reader.get("oneOf", reader.get("anyOf")))
        w_branches = writer.get(combiner, writer.get("oneOf", writer.get("anyOf")))
        if r_branches is None:
            r_branches = [reader]
        if w_branches is None:
            w_branches = [writer]
        for i, w_branch in enumerate(w_branches):
            if not any(self._quiet(r, w_branch) for r in r_branches):
                self.fail("COMBINED_TYPE_SUBSCHEMAS_CHANGED", f"{path}/{combiner}/{i}")

    def _quiet(self, reader: Any, writer: Any) -> bool:
        saved = self.problems
        self.problems = []
        try:
            self.check(reader, writer, "")
            return not self.problems
        finally:
            self.problems = saved


def _accepts_anything(schema: Any) -> bool:
    return schema is True or schema == {}


def _snake(keyword: str) -> str:
    return "".join(f"_{c}" if c.isupper() else c.upper() for c in keyword)


def json_incompatibilities(reader: Any, writer: Any) -> list[str]:
    """Why documents valid under ``writer`` may fail ``reader`` (both JSON Schema documents)."""
    checker = _Checker(reader, writer)
    checker.check(reader, writer, "#")
    return checker.problems
