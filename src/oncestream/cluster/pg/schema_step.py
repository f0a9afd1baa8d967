"""``SchemaStep``: one named DDL script of the cluster schema (its own module so the areas' schema
modules import it without importing schema.py, which imports them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SchemaStep:
    """One named, never-edited DDL script (several statements separated by ``;``)."""

    name: str
    sql: str
