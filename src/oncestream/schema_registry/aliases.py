"""Subject aliases as Confluent's registry follows them (sans-io; its ``AliasFilter``).

A subject whose own config (``PUT /config/{subject}``) has ``"alias": "target"`` stands for
``target`` in every request that names it as a subject: the path segment after ``subjects``
(``/subjects/{s}/versions``, ``/compatibility/subjects/{s}/...``, ``POST``/``DELETE /subjects/{s}``)
and the ``subject`` query parameter of ``/schemas/ids/...``. An unqualified alias is in the
aliasing subject's context (``qualifySubjectWithParent``). Only the subject's own config counts
(not its context's or the global one), the alias is followed one step (an alias of an alias is
not followed further), and ``/config`` and ``/mode`` paths are left alone, so the alias itself
can be read, changed and deleted.
"""

from __future__ import annotations

from collections.abc import Callable

from oncestream.schema_registry.contexts import reference_subject

ALIAS_FIELD = "alias"


def follow(segments: list[str], query: dict[str, list[str]],
           alias_of: Callable[[str], str | None]) -> tuple[list[str], dict[str, list[str]]]:
    """The request's path segments and query with every aliased subject replaced by its target.
    ``alias_of(subject)``: the ``alias`` of the subject's own config, if any."""

    def resolve(subject: str) -> str:
        alias = alias_of(subject) if subject else None
        return reference_subject(subject, alias) if alias else subject

    out: list[str] = []
    subject_next = False
    for segment in segments:
        out.append(resolve(segment) if subject_next else segment)
        subject_next = not subject_next and segment == "subjects"
    if out[:2] == ["schemas", "ids"] and query.get("subject"):
        query = {**query, "subject": [resolve(query["subject"][-1])]}
    return out, query
