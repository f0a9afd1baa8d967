"""The schema ids ksqlDB's test harness gives a case's schemas, so that a statement naming one
(``KEY_SCHEMA_ID=2``, ``VALUE_SCHEMA_ID=3``) can be pointed at the same schema in the shared
registry the runner uses.

ksqlDB's runner (``TestExecutorUtil``) starts each case with a fresh mock registry and registers,
before the statements, the schemas of every topic ``TestCaseBuilderUtil.getAllTopics`` finds:
the case's ``topics`` entries, then the topics of its CREATE STREAM/TABLE statements (a
statement's columns are the schema of a side in a registry format when ``topics`` gives none),
then the topics its input and output records name. They are kept in a ``java.util.HashMap``
keyed by topic name, so they are registered in that map's iteration order (key before value of
each topic), and the mock registry numbers new schemas 1, 2, ... in that order. This module
reproduces the order: Java's ``String.hashCode``, the spread ``h ^ (h >>> 16)``, the table size
(16, doubled while more than three quarters full) and, within a bucket, insertion order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_JAVA_DEFAULT_CAPACITY = 16


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units) as an unsigned 32-bit value."""
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
    return h


def java_hash_map_order(keys: Sequence[str]) -> list[str]:
    """The iteration order of a ``java.util.HashMap`` whose distinct String ``keys`` were put in
    the given order (no removals)."""
    capacity = _JAVA_DEFAULT_CAPACITY
    while len(keys) > capacity * 3 // 4:
        capacity *= 2

    def bucket(key: str) -> int:
        h = java_string_hash(key)
        return (h ^ (h >> 16)) & (capacity - 1)

    position = {k: i for i, k in enumerate(keys)}
    return sorted(keys, key=lambda k: (bucket(k), position[k]))


@dataclass(frozen=True)
class SchemaSide:
    """One side of a topic that has a schema in ksqlDB's harness."""

    topic: str
    key: bool


def harness_schema_order(topics_section: Iterable[SchemaSide], declared: Iterable[SchemaSide],
                         topic_names: Iterable[str]) -> list[SchemaSide]:
    """The sides ksqlDB's harness registers, in order: ``topics_section`` (the case's ``topics``
    schemas, in their order), ``declared`` (sides a CREATE statement's columns give, in statement
    order; a side ``topics`` gives wins) and ``topic_names`` (every topic name the case uses, in
    ksqlDB's insertion order: ``topics``, statements, records)."""
    sides: dict[str, dict[bool, SchemaSide]] = {}
    names: list[str] = []

    def add_name(name: str) -> None:
        if name not in sides:
            sides[name] = {}
            names.append(name)

    for side in topics_section:
        add_name(side.topic)
        sides[side.topic][side.key] = side
    for side in declared:
        add_name(side.topic)
        sides[side.topic].setdefault(side.key, side)
    for name in topic_names:
        add_name(name)
    return [sides[name][key] for name in java_hash_map_order(names) for key in (True, False) if key in sides[name]]
