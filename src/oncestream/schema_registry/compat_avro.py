"""Avro compatibility: can a reader schema read data written with a writer schema?

The Avro specification's schema resolution ("Schema Resolution"): records match by (unqualified)
name or alias, reader fields missing from the writer need a default, writer fields the reader
lacks are skipped; enums need every writer symbol (or a reader default symbol); fixed sizes must
agree; arrays and maps resolve their items and values; a writer union resolves branch by branch,
a reader union needs a branch matching the writer; int -> long -> float -> double, and string <->
bytes are promotions. The answer is the list of problems in Confluent's wording style (empty:
compatible).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oncestream.schema_registry.schema_types import avro_full_name, collect_avro_names

PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
# writer type -> reader types it promotes to
PROMOTIONS: dict[str, tuple[str, ...]] = {
    "int": ("long", "float", "double"),
    "long": ("float", "double"),
    "float": ("double",),
    "string": ("bytes",),
    "bytes": ("string",),
}


class _Resolved:
    """A schema with named references replaced by their definitions: ``kind`` (a primitive name,
    record, enum, fixed, array, map, union), the definition, and the namespace it sits in."""

    __slots__ = ("definition", "full_name", "kind", "namespace")

    def __init__(self, kind: str, definition: Any, namespace: str, full_name: str = "") -> None:
        self.kind = kind
        self.definition = definition
        self.namespace = namespace
        self.full_name = full_name


class _Side:
    """One schema's named types (its own and its references')."""

    def __init__(self, schema: Any, named: Mapping[str, Any]) -> None:
        self.names: dict[str, Any] = dict(named)
        collect_avro_names(schema, "", self.names)

    def resolve(self, schema: Any, namespace: str) -> _Resolved:
        if isinstance(schema, list):
            return _Resolved("union", schema, namespace)
        if isinstance(schema, str):
            if schema in PRIMITIVES:
                return _Resolved(schema, schema, namespace)
            for candidate in (schema, f"{namespace}.{schema}" if namespace else schema):
                if candidate in self.names:
                    definition, own_ns = self.names[candidate]
                    return _Resolved(definition["type"] if definition["type"] != "error" else "record",
                                     definition, own_ns, candidate)
            return _Resolved("unknown", schema, namespace)
        if isinstance(schema, dict):
            kind = schema.get("type")
            if isinstance(kind, (list, dict)):
                return self.resolve(kind, namespace)
            if kind in ("record", "error", "enum", "fixed"):
                full, own_ns = avro_full_name(schema["name"], schema.get("namespace"), namespace)
                return _Resolved("record" if kind == "error" else str(kind), schema, own_ns, full)
            if kind in ("array", "map"):
                return _Resolved(str(kind), schema, namespace)
            if isinstance(kind, str):
                return self.resolve(kind, namespace)
        return _Resolved("unknown", schema, namespace)


def _short(full_name: str) -> str:
    return full_name.rsplit(".", 1)[-1]


def _describe(r: _Resolved) -> str:
    return r.full_name or r.kind


class _Checker:
    def __init__(self, reader: _Side, writer: _Side) -> None:
        self.reader = reader
        self.writer = writer
        self.problems: list[str] = []
        self._in_progress: set[tuple[str, str]] = set()

    def check(self, reader_schema: Any, reader_ns: str, writer_schema: Any, writer_ns: str, path: str) -> bool:
        r = self.reader.resolve(reader_schema, reader_ns)
        w = self.writer.resolve(writer_schema, writer_ns)
        return self._check(r, w, path)

    def _fail(self, error_type: str, path: str, description: str) -> bool:
        self.problems.append(f"{{errorType:'{error_type}', path:'{path or '/'}', description:'{description}'}}")
        return False

    def _quiet(self, r: _Resolved, w: _Resolved) -> bool:
        """Whether ``r`` reads ``w``, without recording problems (a reader union's branch search)."""
        saved = self.problems
        self.problems = []
        try:
            return self._check(r, w, "")
        finally:
            self.problems = saved

    def _check(self, r: _Resolved, w: _Resolved, path: str) -> bool:
        if w.kind == "union":
            ok = True
            for i, branch in enumerate(w.definition):
                ok = self._check(r, self.writer.resolve(branch, w.namespace), f"{path}/{i}") and ok
            return ok
        if r.kind == "union":
            for branch in r.definition:
                candidate = self.reader.resolve(branch, r.namespace)
                if self._quiet(candidate, w):
                    return True
            return self._fail("MISSING_UNION_BRANCH", path,
                              f"The new schema's union at '{path or '/'}' has no branch reading the old "
                              f"schema's {_describe(w)}")
        if r.kind in PRIMITIVES or w.kind in PRIMITIVES:
            if r.kind == w.kind or r.kind in PROMOTIONS.get(w.kind, ()):
                return True
            return self._fail("TYPE_MISMATCH", path, f"reader type: {_describe(r)} not compatible with writer type: "
                                                     f"{_describe(w)}")
        if r.kind != w.kind:
            return self._fail("TYPE_MISMATCH", path, f"reader type: {_describe(r)} not compatible with writer type: "
                                                     f"{_describe(w)}")
        if r.kind == "array":
            return self.check(r.definition.get("items"), r.namespace, w.definition.get("items"), w.namespace,
                              f"{path}/items")
        if r.kind == "map":
            return self.check(r.definition.get("values"), r.namespace, w.definition.get("values"), w.namespace,
                              f"{path}/values")
        if not self._names_match(r, w):
            return self._fail("NAME_MISMATCH", path, f"expected: {w.full_name}, found: {r.full_name}")
        if r.kind == "fixed":
            if r.definition.get("size") != w.definition.get("size"):
                return self._fail("FIXED_SIZE_MISMATCH", f"{path}/size",
                                  f"expected: {w.definition.get('size')}, found: {r.definition.get('size')}")
            return True
        if r.kind == "enum":
            return self._check_enum(r, w, path)
        if r.kind == "record":
            key = (r.full_name, w.full_name)
            if key in self._in_progress:
                return True  # a recursive type: assumed compatible while its outer check runs
            self._in_progress.add(key)
            try:
                return self._check_record(r, w, path)
            finally:
                self._in_progress.discard(key)
        return self._fail("TYPE_MISMATCH", path, f"unknown type {_describe(r)} or {_describe(w)}")

    @staticmethod
    def _names_match(r: _Resolved, w: _Resolved) -> bool:
        if _short(r.full_name) == _short(w.full_name):
            return True
        aliases = r.definition.get("aliases") or []
        return any(a == w.full_name or _short(a) == _short(w.full_name) for a in aliases)

    def _check_enum(self, r: _Resolved, w: _Resolved, path: str) -> bool:
        if r.definition.get("default") is not None:
            return True
        missing = [s for s in w.definition.get("symbols", []) if s not in set(r.definition.get("symbols", []))]
        if missing:
            return self._fail("MISSING_ENUM_SYMBOLS", f"{path}/symbols",
                              f"The new schema is missing enum symbols '{missing}' at path '{path or '/'}' in the "
                              "old schema")
        return True

    def _check_record(self, r: _Resolved, w: _Resolved, path: str) -> bool:
        writer_fields = {f["name"]: f for f in w.definition.get("fields", [])}
        ok = True
        for i, field in enumerate(r.definition.get("fields", [])):
            names = [field["name"], *(field.get("aliases") or [])]
            match = next((writer_fields[n] for n in names if n in writer_fields), None)
            field_path = f"{path}/fields/{i}"
            if match is None:
                if "default" not in field:
                    ok = self._fail("READER_FIELD_MISSING_DEFAULT_VALUE", field_path,
                                    f"The field '{field['name']}' at path '{field_path}' in the new schema has no "
                                    "default value and is missing in the old schema")
                continue
            ok = self.check(field.get("type"), r.namespace, match.get("type"), w.namespace,
                            f"{field_path}/type") and ok
        return ok


def avro_incompatibilities(reader: Any, writer: Any, reader_named: Mapping[str, Any] | None = None,
                           writer_named: Mapping[str, Any] | None = None) -> list[str]:
    """Why ``reader`` cannot read data written with ``writer`` (both Avro schemas as JSON,
    ``*_named``: the named types their references define); empty when it can."""
    checker = _Checker(_Side(reader, reader_named or {}), _Side(writer, writer_named or {}))
    checker.check(reader, "", writer, "", "")
    return checker.problems
