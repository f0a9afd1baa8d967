"""The registry's in-memory state, rebuilt by applying the schemas topic's records in order.

Sans-io: ``apply(record)`` is the only way in; readers ask through the methods below. Each
context (``contexts``: ``:.staging:orders-value`` is in ``.staging``) has its own ids; within one,
ids are never handed out twice: ``next_id`` is one above the highest id ever seen there (in any
SCHEMA record or the context's ID_WATERMARK record), hard deletes included.
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
from oncestream.schema_registry.contexts import DEFAULT_CONTEXT, context_of, qualify, reference_subject
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
    """A schema as registered: id (in ``context``), type, text, references and its data contract
    (``contract_of``)."""

    schema_id: int
    schema_type: str
    schema: str
    references: tuple[Reference, ...]
    contract: str = ""
    context: str = DEFAULT_CONTEXT

    def contract_json(self) -> dict[str, Any]:
        """``{"metadata": ..., "ruleSet": ...}`` (the fields it has)."""
        return dict(json.loads(self.contract)) if self.contract else {}

    @property
    def guid(self) -> str:
        """A stable UUID for this id in its context (Confluent's ``guid``)."""
        name = str(self.schema_id) if self.context == DEFAULT_CONTEXT else f"{self.context}:{self.schema_id}"
        return str(uuid.uuid5(_GUID_NAMESPACE, name))

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

    @property
    def context(self) -> str:
        """The context of the subject, whose id space ``schema_id`` is in."""
        return context_of(self.subject)


def content_key(schema_type: str, canonical: str, references: tuple[Reference, ...], contract: str = "",
                context: str = DEFAULT_CONTEXT) -> tuple[Any, ...]:
    """Two schemas with equal content keys are the same schema (one id in their context)."""
    return context, schema_type, canonical, references, contract

SchemaKey = tuple[str, int]   # (context, id)


class RegistryState:
    """Subjects, versions, schemas by id, configs and modes (thread-safe: the topic reader
    applies records while HTTP handlers read)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._schemas: dict[SchemaKey, StoredSchema] = {}
        self._subjects: dict[str, dict[int, Version]] = {}
        self._configs: dict[str | None, dict[str, Any]] = {}   # whole config documents (config_contracts)
        self._modes: dict[str | None, str] = {}
        self._max_id: dict[str, int] = {}   # per context
        self._parsed: dict[SchemaKey, ParsedSchema] = {}
        self._by_content: dict[tuple[Any, ...], int] = {}
        self._contexts: set[str] = set()   # the CONTEXT records (contexts other than the default one)

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
            elif kind == records.CONTEXT:
                context = str(record.key.get("context") or DEFAULT_CONTEXT)
                if record.value is None:
                    self._contexts.discard(context)
                else:
                    self._contexts.add(context)
            elif kind == records.ID_WATERMARK and record.value is not None:
                context = str(record.key.get("context") or DEFAULT_CONTEXT)
                self._max_id[context] = max(self._max_id.get(context, 0), int(record.value.get("id", 0)))
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
                self._forget_if_unused(gone.context, gone.schema_id)
            return
        value = record.value
        schema_id = int(value["id"])
        context = context_of(subject)
        refs = tuple(Reference(str(r["name"]), str(r["subject"]), int(r["version"])) for r in value.get("references") or [])
        stored = StoredSchema(schema_id, str(value.get("schemaType") or AVRO), str(value["schema"]), refs,
                              contract_of(value), context)
        self._schemas.setdefault((context, schema_id), stored)
        versions[version] = Version(subject, version, schema_id, bool(value.get("deleted", False)))
        self._max_id[context] = max(self._max_id.get(context, 0), schema_id)

    def _forget_if_unused(self, context: str, schema_id: int) -> None:
        if any(v.schema_id == schema_id and v.context == context for vs in self._subjects.values() for v in vs.values()):
            return
        self._schemas.pop((context, schema_id), None)
        self._parsed.pop((context, schema_id), None)
        for key in [k for k, v in self._by_content.items() if v == schema_id and k[0] == context]:
            del self._by_content[key]

    # --- reading ------------------------------------------------------------------------------

    def next_id(self, context: str = DEFAULT_CONTEXT) -> int:
        """The id the next new schema of ``context`` gets."""
        with self.lock:
            return self._max_id.get(context, 0) + 1

    def max_id(self, context: str = DEFAULT_CONTEXT) -> int:
        with self.lock:
            return self._max_id.get(context, 0)

    def contexts(self) -> list[str]:
        """The default context, every context with a CONTEXT record and every one holding a
        subject (soft-deleted ones included; a topic written before CONTEXT records has no others)."""
        with self.lock:
            return sorted({DEFAULT_CONTEXT, *self._contexts, *(context_of(s) for s in self._subjects)})

    def has_context_record(self, context: str) -> bool:
        with self.lock:
            return context in self._contexts

    def schema(self, schema_id: int, context: str = DEFAULT_CONTEXT) -> StoredSchema | None:
        with self.lock:
            return self._schemas.get((context, schema_id))

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

    def usages(self, schema_id: int, *, deleted: bool = False, context: str = DEFAULT_CONTEXT) -> list[Version]:
        """Every (subject, version) of ``context`` registered with ``schema_id``."""
        with self.lock:
            return sorted((v for vs in self._subjects.values() for v in vs.values()
                           if v.schema_id == schema_id and v.context == context and (deleted or not v.deleted)),
                          key=lambda v: (v.subject, v.version))

    def referenced_by(self, subject: str, version: int) -> list[int]:
        """Ids of the live schemas that reference ``subject`` ``version`` (a reference is read in
        its referrer's context)."""
        with self.lock:
            live = {(v.context, v.schema_id, v.subject) for vs in self._subjects.values() for v in vs.values()
                    if not v.deleted}
            return sorted({i for ctx, i, owner in live
                           if any(reference_subject(owner, r.subject) == subject and r.version == version
                                  for r in self._schemas[(ctx, i)].references)})

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

    def parsed(self, schema_id: int, context: str = DEFAULT_CONTEXT) -> ParsedSchema:
        """The stored schema ``schema_id`` of ``context`` parsed (with its references), cached."""
        with self.lock:
            cached = self._parsed.get((context, schema_id))
            if cached is not None:
                return cached
            stored = self._schemas.get((context, schema_id))
            if stored is None:
                raise schema_not_found(f"Schema {schema_id} not found")
            referenced = self.resolve_references(stored.references, context=context)
            parsed = parse_schema(stored.schema_type, stored.schema, stored.references, referenced)
            self._parsed[(context, schema_id)] = parsed
            return parsed

    def resolve_references(self, references: tuple[Reference, ...], depth: int = 0, *,
                           context: str = DEFAULT_CONTEXT) -> list[ParsedSchema]:
        """The parsed schemas ``references`` name, read in ``context`` (42201 when one does not exist)."""
        if depth > 32:
            raise invalid_schema("references nest deeper than 32 levels")
        out = []
        with self.lock:
            for ref in references:
                subject = qualify(context, ref.subject)
                version = self._subjects.get(subject, {}).get(ref.version)
                if version is None:
                    raise invalid_schema(f"reference {ref.name!r} names subject {ref.subject!r} version "
                                         f"{ref.version}, which does not exist")
                try:
                    out.append(self.parsed(version.schema_id, version.context))
                except RegistryError as exc:
                    raise invalid_schema(f"reference {ref.name!r}: {exc.message}") from exc
        return out

    def id_for_content(self, parsed: ParsedSchema, contract: str = "", context: str = DEFAULT_CONTEXT) -> int | None:
        """The id an identical schema (with the same data contract) already has in ``context``
        (any subject there), if any."""
        key = content_key(parsed.schema_type, parsed.canonical, parsed.references, contract, context)
        with self.lock:
            found = self._by_content.get(key)
            if found is not None and (context, found) in self._schemas:
                return found
            indexed = {(k[0], v) for k, v in self._by_content.items()}
            for ctx, schema_id in [k for k in self._schemas if k not in indexed]:
                try:
                    p = self.parsed(schema_id, ctx)
                except RegistryError:
                    continue
                other = content_key(p.schema_type, p.canonical, p.references, self._schemas[(ctx, schema_id)].contract,
                                    ctx)
                self._by_content.setdefault(other, schema_id)
                if other == key:
                    return schema_id
            return None
