"""The records of the schemas topic, in the reference implementation's JSON shapes.

Keys (JSON objects, ``magic`` first written by Confluent as 0 or 1):

- ``{"keytype": "SCHEMA", "subject": S, "version": V, "magic": 1}`` -> ``{"subject": S, "version": V,
  "id": ID, "schemaType": T (absent for AVRO), "references": [...], "metadata": {...}, "ruleSet":
  {...} (both absent when the schema has none: Confluent's data contracts), "schema": TEXT,
  "deleted": BOOL}``;
  a null value (tombstone) is a hard delete of that version;
- ``{"keytype": "CONFIG", "subject": S or null, "magic": 0}`` -> ``{"compatibilityLevel": LEVEL}``
  (null subject: the global level; a tombstone removes a subject's level);
- ``{"keytype": "MODE", "subject": S or null, "magic": 0}`` -> ``{"mode": MODE}``;
- ``{"keytype": "NOOP", "magic": 0}`` -> null: written by a new primary and read back, to know it
  has read everything written before it;
- ``{"keytype": "ID_WATERMARK", "magic": 0}`` -> ``{"id": N}`` (oncestream's own): the highest id
  ever handed out, written with every hard delete, so ids stay unused after compaction removed
  the hard-deleted schemas' records; a context other than the default one has its own
  (``"context": ".staging"`` in the key), as it has its own ids;
- ``{"keytype": "CONTEXT", "tenant": "default", "context": C, "magic": 0}`` -> ``{"tenant":
  "default", "context": C}``: a context other than the default one exists (written with its first
  schema, as Confluent's ``ContextKey``; it outlives its subjects' hard deletes); a tombstone is
  ``DELETE /contexts/{context}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SCHEMA = "SCHEMA"
CONFIG = "CONFIG"
MODE = "MODE"
NOOP = "NOOP"
DELETE_SUBJECT = "DELETE_SUBJECT"
CLEAR_SUBJECT = "CLEAR_SUBJECT"
ID_WATERMARK = "ID_WATERMARK"
CONTEXT = "CONTEXT"
DEFAULT_TENANT = "default"


class RecordFormatError(ValueError):
    """A record of the schemas topic this version cannot read."""


@dataclass(frozen=True)
class Record:
    """One decoded record: ``key`` and ``value`` as JSON objects (``value`` None: a tombstone)."""

    key: dict[str, Any]
    value: dict[str, Any] | None

    @property
    def keytype(self) -> str:
        return str(self.key.get("keytype"))

    def encode(self) -> tuple[bytes, bytes | None]:
        key = json.dumps(self.key, separators=(",", ":")).encode()
        value = None if self.value is None else json.dumps(self.value, separators=(",", ":")).encode()
        return key, value


def decode(key: bytes | None, value: bytes | None) -> Record:
    """A record read from the topic."""
    if key is None:
        raise RecordFormatError("a record without a key")
    try:
        key_doc = json.loads(key)
        value_doc = None if value is None or value == b"" else json.loads(value)
    except ValueError as exc:
        raise RecordFormatError(f"not JSON: {exc}") from exc
    if not isinstance(key_doc, dict) or not isinstance(key_doc.get("keytype"), str):
        raise RecordFormatError(f"a key without a keytype: {key!r}")
    if value_doc is not None and not isinstance(value_doc, dict):
        raise RecordFormatError(f"a value that is not a JSON object: {value!r}")
    return Record(key_doc, value_doc)


def schema_key(subject: str, version: int) -> dict[str, Any]:
    return {"keytype": SCHEMA, "subject": subject, "version": version, "magic": 1}


def schema_value(subject: str, version: int, schema_id: int, schema_type: str, references: list[dict[str, Any]],
                 schema: str, deleted: bool, contract: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A SCHEMA record's value (``contract``: the schema's ``metadata`` and ``ruleSet``, if any)."""
    value: dict[str, Any] = {"subject": subject, "version": version, "id": schema_id}
    if schema_type != "AVRO":
        value["schemaType"] = schema_type
    if references:
        value["references"] = references
    value.update(contract or {})
    value["schema"] = schema
    value["deleted"] = deleted
    return value


def config_key(subject: str | None) -> dict[str, Any]:
    return {"keytype": CONFIG, "subject": subject, "magic": 0}


def mode_key(subject: str | None) -> dict[str, Any]:
    return {"keytype": MODE, "subject": subject, "magic": 0}


def noop_key() -> dict[str, Any]:
    return {"keytype": NOOP, "magic": 0}


def context_key(context: str) -> dict[str, Any]:
    """The key of a context's CONTEXT record."""
    return {"keytype": CONTEXT, "tenant": DEFAULT_TENANT, "context": context, "magic": 0}


def context_value(context: str) -> dict[str, Any]:
    return {"tenant": DEFAULT_TENANT, "context": context}


def watermark_key(context: str = ".") -> dict[str, Any]:
    """The key of a context's ID_WATERMARK record (the default context's has no ``context``)."""
    if context == ".":
        return {"keytype": ID_WATERMARK, "magic": 0}
    return {"keytype": ID_WATERMARK, "context": context, "magic": 0}
