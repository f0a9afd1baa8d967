"""Compatibility levels and the check a registration runs.

BACKWARD: the new schema reads data written with the latest version; FORWARD: the latest version
reads data written with the new schema; FULL: both. The ``_TRANSITIVE`` forms check against every
(not soft-deleted) version instead of the latest alone; NONE checks nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncestream.schema_registry.compat_avro import avro_incompatibilities
from oncestream.schema_registry.compat_json import json_incompatibilities
from oncestream.schema_registry.compat_protobuf import protobuf_incompatibilities
from oncestream.schema_registry.errors import invalid_compatibility_level
from oncestream.schema_registry.schema_types import AVRO, JSON, ParsedSchema

LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")
DEFAULT_LEVEL = "BACKWARD"


def normalize_level(level: object) -> str:
    """``level`` upper-cased, or 42203 when it is not one of ``LEVELS``."""
    if not isinstance(level, str) or level.upper() not in LEVELS:
        raise invalid_compatibility_level(level)
    return level.upper()


def reader_writer_problems(reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
    """Why ``reader`` cannot read what ``writer`` wrote (empty: it can)."""
    if reader.schema_type != writer.schema_type:
        return [f"{{errorType:'SCHEMA_TYPE_CHANGED', description:'{writer.schema_type} -> {reader.schema_type}'}}"]
    if reader.schema_type == AVRO:
        return avro_incompatibilities(reader.parsed, writer.parsed, reader.named, writer.named)
    if reader.schema_type == JSON:
        return json_incompatibilities(reader.parsed, writer.parsed)
    return protobuf_incompatibilities(reader.parsed, writer.parsed)


def incompatibilities(level: str, new: ParsedSchema, existing: Sequence[ParsedSchema]) -> list[str]:
    """Why ``new`` may not follow ``existing`` (oldest first) under ``level``; empty when it may."""
    if level == "NONE" or not existing:
        return []
    against = list(existing) if level.endswith("_TRANSITIVE") else [existing[-1]]
    base = level.removesuffix("_TRANSITIVE")
    problems: list[str] = []
    for old in reversed(against):
        if base in ("BACKWARD", "FULL"):
            problems += [f"{p} (the new schema reading data of an older one)" for p in reader_writer_problems(new, old)]
        if base in ("FORWARD", "FULL"):
            problems += [f"{p} (an older schema reading data of the new one)" for p in reader_writer_problems(old, new)]
        if problems:
            break
    return problems
