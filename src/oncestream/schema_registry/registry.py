"""The registry's operations, over a ``RegistryState`` and a ``SchemaLog`` that writes records.

Reads answer from the state. Writes (registering, deleting, configs, modes) run one at a time on
the primary: they compute the records from the state, hand them to ``SchemaLog.append`` (which
returns once the records were read back from the topic into the state) and then answer, so an
acknowledged write survives any restart.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any, Protocol

from oncestream.schema_registry import config_contracts, errors, records
from oncestream.schema_registry.compatibility import DEFAULT_LEVEL, incompatibilities, normalize_level
from oncestream.schema_registry.contexts import (
    DEFAULT_CONTEXT,
    WILDCARD,
    context_config_subject,
    context_of,
    normalize,
    qualify,
    split,
)
from oncestream.schema_registry.proto_text import print_proto_text
from oncestream.schema_registry.schema_types import (
    PROTOBUF,
    ParsedSchema,
    normalize_type,
    parse_references,
    parse_schema,
    protobuf_serialized,
)
from oncestream.schema_registry.state import CONTRACT_FIELDS, RegistryState, StoredSchema, Version, contract_of

MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
DEFAULT_MODE = "READWRITE"
MAX_VERSION = 2**31 - 1


def _contract(body: Mapping[str, Any]) -> str:
    """A request's ``metadata`` and ``ruleSet`` (JSON objects or null) as ``contract_of`` keeps them."""
    for name in CONTRACT_FIELDS:
        if body.get(name) is not None and not isinstance(body[name], dict):
            raise errors.unprocessable(f"Invalid {name}: a JSON object was expected")
    return contract_of(body)


class SchemaLog(Protocol):
    """Where writes go: ``append`` returns once the records are applied to the state."""

    def append(self, batch: list[records.Record]) -> None: ...


def parse_version(raw: str) -> int | str:
    """A version path segment: ``latest`` / ``-1`` or a version number in [1, 2^31-1] (42202 otherwise)."""
    if raw in ("latest", "-1"):
        return "latest"
    try:
        version = int(raw)
    except ValueError:
        raise errors.invalid_version(raw) from None
    if not 1 <= version <= MAX_VERSION:
        raise errors.invalid_version(raw)
    return version


class Registry:
    """Confluent Schema Registry's operations (``default_level``: the compatibility level when
    none is configured, Kafka-style ``schema.compatibility.level``)."""

    def __init__(self, state: RegistryState, log: SchemaLog, *, default_level: str = DEFAULT_LEVEL) -> None:
        self.state = state
        self.log = log
        self.default_level = normalize_level(default_level)
        self._write_lock = threading.Lock()

    # --- reads --------------------------------------------------------------------------------

    def subjects(self, *, deleted: bool = False, prefix: str = "") -> list[str]:
        """The subjects starting with ``prefix``; ``:*:rest``: in every context, those whose
        unqualified name starts with ``rest`` (Confluent's context wildcard)."""
        if prefix.startswith(WILDCARD):
            rest = prefix[len(WILDCARD):]
            return [s for s in self.state.subjects(deleted=deleted) if split(s)[1].startswith(rest)]
        return [s for s in self.state.subjects(deleted=deleted) if s.startswith(prefix)]

    def _versions_of(self, subject: str, *, deleted: bool = False) -> list[Version]:
        if not self.state.has_subject(subject):
            raise errors.subject_not_found(subject)
        versions = self.state.versions(subject, deleted=deleted)
        if not versions and not deleted:
            raise errors.subject_not_found(subject)
        return versions

    def versions(self, subject: str, *, deleted: bool = False) -> list[int]:
        return [v.version for v in self._versions_of(subject, deleted=deleted)]

    def version(self, subject: str, raw_version: str, *, deleted: bool = False) -> Version:
        """One version of ``subject`` (``latest``: the newest live one)."""
        wanted = parse_version(raw_version)
        versions = self._versions_of(subject, deleted=True)
        live = [v for v in versions if not v.deleted]
        if wanted == "latest":
            pool = versions if deleted else live
            if not pool:
                raise errors.subject_not_found(subject)
            return pool[-1]
        for v in versions:
            if v.version == wanted and (deleted or not v.deleted):
                return v
        raise errors.version_not_found(wanted)

    def schema(self, schema_id: int, context: str = DEFAULT_CONTEXT) -> StoredSchema:
        stored = self.state.schema(schema_id, context)
        if stored is None:
            raise errors.schema_not_found(f"Schema {schema_id} not found")
        return stored

    def schema_for_id(self, schema_id: int, subject: str | None) -> StoredSchema:
        """GET /schemas/ids/{id}?subject=S: the schema with ``schema_id`` in the context of ``S``
        (Confluent's ``getSchemaKeyUsingContexts``): a qualified ``S`` (or a bare context,
        ``:.staging:``) looks in its context; an unqualified one is looked for under that subject
        in the default context, then in every other context, then any subject of the default
        context has it."""
        context, bare = split(subject)
        if context != DEFAULT_CONTEXT or not bare:
            found = [v for v in self.state.usages(schema_id, deleted=True, context=context) if not bare or v.subject == subject]
            if not found:
                raise errors.schema_not_found(f"Schema {schema_id} not found")
            return self.schema(schema_id, context)
        if any(v.subject == bare for v in self.state.usages(schema_id, deleted=True)):
            return self.schema(schema_id)
        for other in self.state.contexts():
            qualified = qualify(other, bare)
            if other != DEFAULT_CONTEXT and any(v.subject == qualified for v in
                                                self.state.usages(schema_id, deleted=True, context=other)):
                return self.schema(schema_id, other)
        return self.schema(schema_id)

    def schema_by_guid(self, guid: str) -> StoredSchema:
        stored = self.state.schema_by_guid(guid)
        if stored is None:
            raise errors.schema_not_found(f"Schema {guid} not found")
        return stored

    def schema_json(self, stored: StoredSchema, fmt: str | None) -> dict[str, Any]:
        """``{schemaType, references, schema}`` of ``stored``. A PROTOBUF schema is answered as
        ``.proto`` text, or with ``fmt=serialized`` as its base64 descriptor, whichever form it
        was registered in."""
        return stored.to_json(schema_text=self.schema_text(stored, fmt))

    def schema_text(self, stored: StoredSchema, fmt: str | None) -> str:
        """The schema as answered (see ``schema_json``)."""
        if stored.schema_type != PROTOBUF:
            return stored.schema
        parsed = self.state.parsed(stored.schema_id, stored.context)
        if fmt == "serialized":
            return protobuf_serialized(parsed)
        # Registered as base64 (no ';' nor '{', which .proto text always has): print it as text.
        if ";" not in stored.schema and "{" not in stored.schema:
            return print_proto_text(parsed.parsed)
        return stored.schema

    def version_json(self, v: Version, fmt: str | None = None) -> dict[str, Any]:
        stored = self.schema(v.schema_id, v.context)
        return {"subject": v.subject, "version": v.version, "id": v.schema_id, "guid": stored.guid,
                **self.schema_json(stored, fmt)}

    def referenced_by(self, subject: str, raw_version: str) -> list[int]:
        v = self.version(subject, raw_version, deleted=True)
        return self.state.referenced_by(subject, v.version)

    def _scopes(self, subject: str | None) -> list[str | None]:
        """Where a subject's settings are looked for: its own, its context's, the global ones."""
        if subject is None:
            return [None]
        context_subject = context_config_subject(subject)
        return [subject, *([context_subject] if context_subject else []), None]

    def compatibility_level(self, subject: str | None) -> str:
        for scope in self._scopes(subject):
            if (level := self.state.config(scope)) is not None:
                return level
        return self.default_level

    def config_in_scope(self, subject: str | None) -> dict[str, Any]:
        """The config document that applies to ``subject`` (``config_contracts.in_scope``), its
        level always set (the default when none is configured)."""
        global_doc = self.state.config_doc(None)
        if subject is None:
            doc = global_doc or {}
        else:
            context_subject = context_config_subject(subject)
            outer = self.state.config_doc(context_subject) if context_subject else None
            doc = config_contracts.in_scope(self.state.config_doc(subject),
                                            config_contracts.in_scope(outer, global_doc) if outer else global_doc)
        return {**doc, config_contracts.LEVEL: self.compatibility_level(subject)}

    def config_answer(self, subject: str | None, *, default_to_global: bool) -> dict[str, Any]:
        """GET /config[/{subject}]: the config set (``default_to_global``: else the one in scope)."""
        if subject is None:
            return self.config_in_scope(None)
        doc = self.state.config_doc(subject)
        if doc is None:
            if not default_to_global:
                raise errors.subject_config_not_found(subject)
            return self.config_in_scope(subject)
        return doc

    def mode(self, subject: str | None) -> str:
        for scope in self._scopes(subject):
            if (mode := self.state.mode(scope)) is not None:
                return mode
        return DEFAULT_MODE

    def parse_request(self, body: Mapping[str, Any], context: str = DEFAULT_CONTEXT) -> ParsedSchema:
        """The schema of a request body (``schema``, ``schemaType``, ``references``: read in
        ``context``), checked."""
        schema_type = normalize_type(body.get("schemaType"))
        references = parse_references(body.get("references"))
        referenced = self.state.resolve_references(references, context=context)
        return parse_schema(schema_type, body.get("schema"), references, referenced)

    def lookup(self, subject: str, body: Mapping[str, Any], *, deleted: bool = False) -> dict[str, Any]:
        """POST /subjects/{subject}: the newest version of ``subject`` holding this schema (with
        the body's metadata and rule set when it has any; any of them when it has none)."""
        if not self.state.versions(subject, deleted=deleted):
            raise errors.subject_not_found(subject)  # absent, or only soft-deleted versions left
        context = context_of(subject)
        parsed = self.parse_request(body, context)
        contract = _contract(body)
        schema_id = self.state.id_for_content(parsed, contract, context)
        for v in reversed(self.state.versions(subject, deleted=deleted)):
            if v.schema_id == schema_id or (not contract and self._same_schema(v, parsed)):
                return self.version_json(v)
        raise errors.schema_not_found("Schema not found")

    def _same_schema(self, v: Version, parsed: ParsedSchema) -> bool:
        other = self.state.parsed(v.schema_id, v.context)
        return (other.schema_type, other.canonical, other.references) == (
            parsed.schema_type, parsed.canonical, parsed.references)

    def latest_with_metadata(self, subject: str, wanted: Mapping[str, str], *, deleted: bool = False) -> Version:
        """GET /subjects/{subject}/metadata?key=K&value=V...: the newest version whose metadata
        properties hold every ``wanted`` pair (40403 when none does)."""
        for v in reversed(self._versions_of(subject, deleted=deleted)):
            properties = self.schema(v.schema_id, v.context).contract_json().get("metadata", {}).get("properties") or {}
            if all(properties.get(k) == value for k, value in wanted.items()):
                return v
        raise errors.schema_not_found(f"Schema with metadata {dict(wanted)} not found in subject {subject}")

    def check_compatibility(self, subject: str, raw_version: str | None, body: Mapping[str, Any]) -> list[str]:
        """POST /compatibility/subjects/{subject}/versions[/{version}]: the problems (empty: compatible)."""
        parsed = self.parse_request(body, context_of(subject))
        level = self.compatibility_level(subject)
        if raw_version is None:
            existing = [self.state.parsed(v.schema_id, v.context) for v in self.state.versions(subject)]
        else:
            chosen = self.version(subject, raw_version)
            existing = [self.state.parsed(chosen.schema_id, chosen.context)]
            if level.endswith("_TRANSITIVE"):
                level = level.removesuffix("_TRANSITIVE")
        return incompatibilities(level, parsed, existing)

    # --- writes -------------------------------------------------------------------------------

    def _writable(self, subject: str | None) -> None:
        if self.mode(subject) in ("READONLY", "READONLY_OVERRIDE"):
            raise errors.operation_not_permitted(f"Subject {subject} is in read-only mode" if subject
                                                 else "The registry is in read-only mode")

    def register(self, subject: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST /subjects/{subject}/versions: the id (and version) of the schema in ``subject``,
        registering it as a new version when it is not there yet."""
        if not subject or len(subject) > 255 or any(ord(c) < 32 for c in subject):
            raise errors.unprocessable(f"Invalid subject {subject!r}")
        context = context_of(subject)
        with self._write_lock:
            parsed = self.parse_request(body, context)
            contract = _contract(body)
            live = self.state.versions(subject)
            mode = self.mode(subject)
            if mode != "IMPORT":
                # The config's metadata/rule-set defaults and overrides, merged as Confluent's
                # registry does (a request without them inherits the latest version's).
                previous = self.schema(live[-1].schema_id, context).contract_json() if live else None
                requested = json.loads(contract) if contract else {}
                contract = contract_of(config_contracts.contract_with_defaults(
                    self.config_in_scope(subject), requested, previous))
            existing_id = self.state.id_for_content(parsed, contract, context)
            for v in reversed(live):
                if v.schema_id == existing_id:
                    return self._register_answer(v, parsed, contract)
            self._writable(subject)
            wanted_id = body.get("id")
            wanted_version = body.get("version")
            if mode != "IMPORT":
                level = self.compatibility_level(subject)
                problems = incompatibilities(level, parsed, [self.state.parsed(v.schema_id, context) for v in live])
                if problems:
                    raise errors.incompatible(problems)
            schema_id = self._choose_id(existing_id, wanted_id if mode == "IMPORT" else None, context)
            all_versions = self.state.versions(subject, deleted=True)
            version = (all_versions[-1].version if all_versions else 0) + 1
            if mode == "IMPORT" and isinstance(wanted_version, int) and wanted_version > 0:
                version = wanted_version
            value = records.schema_value(subject, version, schema_id, parsed.schema_type,
                                         [r.to_json() for r in parsed.references], parsed.schema_str, False,
                                         json.loads(contract) if contract else None)
            batch = [records.Record(records.schema_key(subject, version), value)]
            if context != DEFAULT_CONTEXT and not self.state.has_context_record(context):
                batch.insert(0, records.Record(records.context_key(context), records.context_value(context)))
            self.log.append(batch)
            return self._register_answer(Version(subject, version, schema_id, False), parsed, contract)

    def _choose_id(self, existing_id: int | None, wanted_id: object, context: str) -> int:
        if isinstance(wanted_id, int) and wanted_id > 0:
            other = self.state.schema(wanted_id, context)
            if other is not None and wanted_id != existing_id:
                raise errors.operation_not_permitted(f"Overwrite new schema with id {wanted_id} is not permitted.")
            return wanted_id
        return existing_id if existing_id is not None else self.state.next_id(context)

    def _register_answer(self, v: Version, parsed: ParsedSchema, contract: str) -> dict[str, Any]:
        stored = StoredSchema(v.schema_id, parsed.schema_type, parsed.schema_str, parsed.references, contract, v.context)
        return {"id": v.schema_id, "version": v.version, "guid": stored.guid, **stored.to_json()}

    def delete_context(self, delimited: str) -> None:
        """DELETE /contexts/{context} (``:.staging:``, or ``.staging``): forget an empty context,
        as Confluent's registry (a context still holding a subject, soft-deleted ones included,
        is refused; an unknown one is deleted all the same)."""
        context = normalize(delimited)
        with self._write_lock:
            if any(context_of(s) == context for s in self.state.subjects(deleted=True)):
                raise errors.context_not_empty(delimited)
            if context != DEFAULT_CONTEXT:
                self.log.append([records.Record(records.context_key(context), None)])

    def delete_subject(self, subject: str, *, permanent: bool) -> list[int]:
        """DELETE /subjects/{subject}[?permanent=true]: the versions deleted."""
        with self._write_lock:
            self._writable(subject)
            all_versions = self.state.versions(subject, deleted=True)
            if not all_versions:
                raise errors.subject_not_found(subject)
            live = [v for v in all_versions if not v.deleted]
            if not permanent and not live:
                raise errors.subject_soft_deleted(subject)
            if permanent and live:
                raise errors.subject_not_soft_deleted(subject)
            for v in all_versions:
                self._refuse_if_referenced(v)
            if permanent:
                batch = [records.Record(records.schema_key(subject, v.version), None) for v in all_versions]
                batch += self._cleanup_settings(subject)
                batch.append(self._watermark(context_of(subject)))
                self.log.append(batch)
                return [v.version for v in all_versions]
            self.log.append([self._soft_delete_record(v) for v in live])
            return [v.version for v in live]

    def delete_version(self, subject: str, raw_version: str, *, permanent: bool) -> int:
        """DELETE /subjects/{subject}/versions/{version}[?permanent=true]: the version deleted."""
        with self._write_lock:
            self._writable(subject)
            v = self.version(subject, raw_version, deleted=permanent)
            self._refuse_if_referenced(v)
            if permanent:
                if not v.deleted:
                    raise errors.version_not_soft_deleted(subject, v.version)
                self.log.append([records.Record(records.schema_key(subject, v.version), None), self._watermark(v.context)])
            else:
                self.log.append([self._soft_delete_record(v)])
            return v.version

    def _refuse_if_referenced(self, v: Version) -> None:
        users = self.state.referenced_by(v.subject, v.version)
        if users:
            raise errors.reference_exists(f"One or more references exist to the schema {{subject={v.subject}, "
                                          f"version={v.version}}} (used by schema ids {users})")

    def _soft_delete_record(self, v: Version) -> records.Record:
        stored = self.schema(v.schema_id, v.context)
        value = records.schema_value(v.subject, v.version, v.schema_id, stored.schema_type,
                                     [r.to_json() for r in stored.references], stored.schema, True, stored.contract_json())
        return records.Record(records.schema_key(v.subject, v.version), value)

    def _cleanup_settings(self, subject: str) -> list[records.Record]:
        out = []
        if self.state.config(subject) is not None:
            out.append(records.Record(records.config_key(subject), None))
        if self.state.mode(subject) is not None:
            out.append(records.Record(records.mode_key(subject), None))
        return out

    def _watermark(self, context: str) -> records.Record:
        return records.Record(records.watermark_key(context), {"id": self.state.max_id(context)})

    def set_config(self, subject: str | None, body: Mapping[str, Any]) -> dict[str, Any]:
        """PUT /config[/{subject}] with ``{"compatibility": LEVEL, "defaultMetadata": ..., ...}``:
        the fields named change, the others stay (``config_contracts.update_config``); answers
        the config as Confluent's ConfigUpdateRequest."""
        with self._write_lock:
            doc = config_contracts.update_config(self.state.config_doc(subject), body)
            self.log.append([records.Record(records.config_key(subject), doc)])
        return config_contracts.update_answer(doc)

    def delete_config(self, subject: str | None) -> dict[str, Any]:
        """DELETE /config[/{subject}]: the config that was set (the global one returns to the default)."""
        with self._write_lock:
            previous = self.state.config_doc(subject)
            if subject is not None and previous is None:
                if not self.state.has_subject(subject):
                    raise errors.subject_not_found(subject)
                raise errors.subject_config_not_found(subject)
            self.log.append([records.Record(records.config_key(subject), None)])
        if not previous or config_contracts.LEVEL not in previous:
            return {**(previous or {}), config_contracts.LEVEL: self.default_level}
        return previous

    def set_mode(self, subject: str | None, body: Mapping[str, Any], *, force: bool) -> str:
        """PUT /mode[/{subject}] with ``{"mode": MODE}`` (IMPORT on a non-empty registry needs ``force``)."""
        mode = body.get("mode")
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise errors.invalid_mode(mode)
        mode = mode.upper()
        with self._write_lock:
            if mode == "IMPORT" and not force:
                has_schemas = bool(self.state.versions(subject, deleted=True)) if subject else \
                    bool(self.state.subjects(deleted=True))
                if has_schemas:
                    raise errors.operation_not_permitted("Cannot import since found existing subjects")
            self.log.append([records.Record(records.mode_key(subject), {"mode": mode})])
        return mode

    def delete_mode(self, subject: str) -> str:
        with self._write_lock:
            previous = self.state.mode(subject)
            if previous is None:
                raise errors.subject_mode_not_found(subject)
            self.log.append([records.Record(records.mode_key(subject), None)])
        return previous
