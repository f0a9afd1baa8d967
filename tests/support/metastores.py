"""A SQL node's metastore with sources already created, for tests of statement validation."""

from __future__ import annotations

from collections.abc import Mapping

from oncestream.sql.language.parser import parse
from oncestream.sql.server.metastore import Metastore


def metastore_with(ddl: str, topics: Mapping[str, int]) -> Metastore:
    """A metastore that validated and applied the statements of ``ddl`` in order (``topics``:
    the existing topics and their partition counts)."""
    m = Metastore()
    for offset, statement in enumerate(parse(ddl)):
        m.apply(m.validate(statement, {}, topics), offset)
    return m
