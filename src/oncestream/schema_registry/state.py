"""The registry's in-memory state, rebuilt by applying the schemas topic's records in order.

Sans-io: ``apply(record)`` is the only way in; readers ask through the methods below. Ids are
never handed out twice: ``next_id`` is one above the highest id ever seen (in any SCHEMA record
or the ID_WATERMARK record), hard deletes included.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from oncestream.schema_registry import records
from oncestream.schema_registry.errors import RegistryError, invalid_schema, schema_not_found
from oncestream.schema_registry.schema_types import AVRO, ParsedSchema, Reference, parse_schema

log = logging.getLogger(__name__)

_GUID_NAMESPACE = uuid.UUID("9f1c3f56-8a3c-4a51-9a0b-6a3f1f2d8c11")


# A schema's data contract, as newer Confluent clients send it: stored and answered as given.
CONTRACT_FIELDS = ("metadata", "ruleSet")


def contract_of(doc: Mapping[str, Any]) -> str:
    """The ``metadata`` and ``ruleSet`` of a request or record as canonical JSON ("" when it has
    neither): part of a schema's identity, as in Confluent's registry (other metadata, other id)."""
    contract = {f: doc[f] for f in CONTRACT_FIELDS if doc.get(f) is not None}
    return json.dumps(contract, sort_keys=True, separators=(",", ":")) if contract else ""


@dataclass(frozen=True)
class StoredSchema:
    """A schema as registered: id, type, text, references and its data contract (``contract_of``)."""

    schema_id: int
    schema_type: str
    schema: str
    references: tuple[Reference, ...]
    contract: str = ""

    def contract_json(self) -> dict[str, Any]:
        """``{"metadata": ..., "ruleSet": ...}`` (the fields it has)."""
        return dict(json.loads(self.contract)) if self.contract else {}

    @property
    def guid(self) -> str:
        """A stable UUID for this id (Confluent's ``guid``)."""
        return str(uuid.uuid5(_GUID_NAMESPACE, str(self.schema_id)))

    def to_json(self, *, schema_text: str | None = None) -> dict[str, Any]:
        """``schemaType`` (absent for AVRO), ``references`` (when any) and ``schema``, as Confluent answers."""
        out: dict[str, Any] = {}
        if self.schema_type != AVRO:
            out["schemaType"] = self.schema_type
        if self.references:
            out["references"] = [r.to_json() for r in self.references]
        out.update(self.contract_json())
        out["schema"] = self.schema if schema_text is None else schema_text
        return out


@dataclass(frozen=True)
class Version:
    """One version of a subject: its schema id and whether it is soft-deleted."""

    subject: str
    version: int
    schema_id: int
    deleted: bool


def content_key(schema_type: str, canonical: str, references: tuple[Reference, ...], contract: str = "") -> tuple[Any, ...]:
    """Two schemas with equal content keys are the same schema (one id)."""
    return schema_type, canonical, references, contract


class RegistryState:
    """Subjects, versions, schemas by id, configs and modes (thread-safe: the topic reader
    applies records while HTTP handlers read)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._schemas: dict[int, StoredSchema] = {}
        self._subjects: dict[str, dict[int, Version]] = {}
        self._configs: dict[str | None, dict[str, Any]] = {}   # whole config documents (config_contracts)
        self._modes: dict[str | None, str] = {}
        self._max_id = 0
        self._parsed: dict[int, ParsedSchema] = {}
        self._by_content: dict[tuple[Any, ...], int] = {}

    # --- applying records ---------------------------------------------------------------------

    def apply(self, record: records.Record) -> None:
        """Apply one record of the topic (unknown key types are skipped, as newer writers' are)."""
        with self.lock:
            kind = record.keytype
            if kind == records.SCHEMA:
                self._apply_schema(record)
            elif kind == records.CONFIG:
                self._apply_config(record)
            elif kind == records.MODE:
                self._apply_setting(self._modes, record, "mode")
            elif kind == records.ID_WATERMARK and record.value is not None:
                self._max_id = max(self._max_id, int(record.value.get("id", 0)))
            elif kind not in (records.NOOP, records.DELETE_SUBJECT, records.CLEAR_SUBJECT):
                log.warning("schema registry: skipping a record of unknown keytype %r", kind)

    def _apply_setting(self, table: dict[str | None, str], record: records.Record, field: str) -> None:
        subject = record.key.get("subject")
        if record.value is None:
            table.pop(subject, None)
        elif isinstance(record.value.get(field), str):
            table[subject] = record.value[field]

    def _apply_config(self, record: records.Record) -> None:
        subject = record.key.get("subject")
        if record.value is None:
            self._configs.pop(subject, None)
        else:
            self._configs[subject] = {k: v for k, v in record.value.items() if k != "subject" and v is not None}

    def _apply_schema(self, record: records.Record) -> None:
        subject = str(record.key["subject"])
        version = int(record.key["version"])
        versions = self._subjects.setdefault(subject, {})
        if record.value is None:
            gone = versions.pop(version, None)
            if not versions:
                self._subjects.pop(subject, None)
            if gone is not None:
                self._forget_if_unused(gone.schema_id)
            return
        value = record.value
        schema_id = int(value["id"])
        refs = tuple(Reference(str(r["name"]), str(r["subject"]), int(r["version"])) for r in value.get("references") or [])
        stored = StoredSchema(schema_id, str(value.get("schemaType") or AVRO), str(value["schema"]), refs,
                              contract_of(value))
        self._schemas.setdefault(schema_id, stored)
        versions[version] = Version(subject, version, schema_id, bool(value.get("deleted", False)))
        self._max_id = max(self._max_id, schema_id)

    def _forget_if_unused(self, schema_id: int) -> None:
        if any(v.schema_id == schema_id for vs in self._subjects.values() for v in vs.values()):
            return
        self._schemas.pop(schema_id, None)
        self._parsed.pop(schema_id, None)
        for key in [k for k, v in self._by_content.items() if v == schema_id]:
            del self._by_content[key]

    # --- reading ------------------------------------------------------------------------------

    @property
    def next_id(self) -> int:
        with self.lock:
            return self._max_id + 1

    @property
    def max_id(self) -> int:
        with self.lock:
            return self._max_id

    def schema(self, schema_id: int) -> StoredSchema | None:
        with self.lock:
            return self._schemas.get(schema_id)

    def schema_by_guid(self, guid: str) -> StoredSchema | None:
        with self.lock:
            return next((s for s in self._schemas.values() if s.guid == guid), None)

    def subjects(self, *, deleted: bool = False) -> list[str]:
        with self.lock:
            return sorted(s for s, vs in self._subjects.items() if deleted or any(not v.deleted for v in vs.values()))

    def versions(self, subject: str, *, deleted: bool = False) -> list[Version]:
        """The subject's versions, oldest first (soft-deleted ones with ``deleted``)."""
        with self.lock:
            return [v for _, v in sorted(self._subjects.get(subject, {}).items()) if deleted or not v.deleted]

    def has_subject(self, subject: str) -> bool:
        with self.lock:
            return subject in self._subjects

    def usages(self, schema_id: int, *, deleted: bool = False) -> list[Version]:
        """Every (subject, version) registered with ``schema_id``."""
        with self.lock:
            return sorted((v for vs in self._subjects.values() for v in vs.values()
                           if v.schema_id == schema_id and (deleted or not v.deleted)),
                          key=lambda v: (v.subject, v.version))

    def referenced_by(self, subject: str, version: int) -> list[int]:
        """Ids of the live schemas that reference ``subject`` ``version``."""
        with self.lock:
            live_ids = {v.schema_id for vs in self._subjects.values() for v in vs.values() if not v.deleted}
            return sorted(i for i in live_ids if any(r.subject == subject and r.version == version
                                                       for r in self._schemas[i].references))

    def config(self, subject: str | None) -> str | None:
        """The compatibility level set for ``subject`` (None: the global one), if any."""
        with self.lock:
            level = (self._configs.get(subject) or {}).get("compatibilityLevel")
            return level if isinstance(level, str) else None

    def config_doc(self, subject: str | None) -> dict[str, Any] | None:
        """The whole config document set for ``subject`` (None: the global one), if any."""
        with self.lock:
            doc = self._configs.get(subject)
            return None if doc is None else dict(doc)

    def mode(self, subject: str | None) -> str | None:
        with self.lock:
            return self._modes.get(subject)

    def parsed(self, schema_id: int) -> ParsedSchema:
        """The stored schema ``schema_id`` parsed (with its references), cached."""
        with self.lock:
            cached = self._parsed.get(schema_id)
            if cached is not None:
                return cached
            stored = self._schemas.get(schema_id)
            if stored is None:
                raise schema_not_found(f"Schema {schema_id} not found")
            referenced = self.resolve_references(stored.references)
            parsed = parse_schema(stored.schema_type, stored.schema, stored.references, referenced)
            self._parsed[schema_id] = parsed
            return parsed

    def resolve_references(self, references: tuple[Reference, ...], depth: int = 0) -> list[ParsedSchema]:
        """The parsed schemas ``references`` name (42201 when one does not exist)."""
        if depth > 32:
            raise invalid_schema("references nest deeper than 32 levels")
        out = []
        with self.lock:
            for ref in references:
                version = self._subjects.get(ref.subject, {}).get(ref.version)
                if version is None:
                    raise invalid_schema(f"reference {ref.name!r} names subject {ref.subject!r} version "
                                         f"{ref.version}, which does not exist")
                try:
                    out.append(self.parsed(version.schema_id))
                except RegistryError as exc:
                    raise invalid_schema(f"reference {ref.name!r}: {exc.message}") from exc
        return out

    def id_for_content(self, parsed: ParsedSchema, contract: str = "") -> int | None:
        """The id an identical schema (with the same data contract) already has (any subject), if any."""
        key = content_key(parsed.schema_type, parsed.canonical, parsed.references, contract)
        with self.lock:
            found = self._by_content.get(key)
            if found is not None and found in self._schemas:
                return found
            indexed = set(self._by_content.values())
            for schema_id in [i for i in self._schemas if i not in indexed]:
                try:
                    p = self.parsed(schema_id)
                except RegistryError:
                    continue
                other = content_key(p.schema_type, p.canonical, p.references, self._schemas[schema_id].contract)
                self._by_content.setdefault(other, schema_id)
                if other == key:
                    return schema_id
            return None
