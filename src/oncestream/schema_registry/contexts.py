"""Schema contexts as Confluent's registry has them (sans-io; its ``QualifiedSubject`` and
``ContextFilter``, without tenants).

A subject ``:.staging:orders-value`` is ``orders-value`` in context ``.staging``; an unqualified
subject is in the default context ``.``. Each context has its own schema ids (id 1 in ``.staging``
is not id 1 in ``.``), its own config and mode (``:.staging:`` names the context itself, between
a subject's own and the global one), and a reference from a subject in a context to an
unqualified subject means that subject in the same context.

``rewrite`` turns the ``/contexts/{context}/...`` URL forms into the qualified ones, as
Confluent's ``ContextFilter`` does: the segment after ``subjects`` gets the context prefix, a
root ``config``/``mode`` without a subject addresses the context (``/config/:.staging:``),
``schemas/ids/...`` gets ``subject=:.staging:`` (the context's id space), and ``schemas`` /
``subjects`` listings get it as ``subjectPrefix``.
"""

from __future__ import annotations

DEFAULT_CONTEXT = "."
CONTEXT_PREFIX = ":."
WILDCARD = ":*:"


def split(subject: str | None) -> tuple[str, str]:
    """(context, unqualified subject) of a possibly qualified subject."""
    text = subject or ""
    if text.startswith(CONTEXT_PREFIX):
        end = text.find(":", len(CONTEXT_PREFIX))
        if end < 0:
            return text[1:], ""
        return text[1:end], text[end + 1:]
    return DEFAULT_CONTEXT, text


def context_of(subject: str | None) -> str:
    """The context a subject is in (``.`` for an unqualified one)."""
    return split(subject)[0]


def prefix(context: str) -> str:
    """The qualifier of ``context`` (``:.staging:``; empty for the default context)."""
    context = normalize(context)
    return "" if context == DEFAULT_CONTEXT else f":{context}:"


def normalize(context: str) -> str:
    """A context name as the path or a qualifier gives it (``staging``, ``.staging``,
    ``:.staging:``) as ``.staging``."""
    text = context.strip(":")
    if not text or text == DEFAULT_CONTEXT:
        return DEFAULT_CONTEXT
    return text if text.startswith(".") else "." + text


def qualify(context: str, subject: str) -> str:
    """``subject`` in ``context`` unless it is qualified already."""
    if subject.startswith(CONTEXT_PREFIX) or subject.startswith(WILDCARD):
        return subject
    return prefix(context) + subject


def reference_subject(parent: str, referenced: str) -> str:
    """The subject a reference names, read from ``parent``'s context (Confluent's
    ``qualifySubjectWithParent``)."""
    return qualify(context_of(parent), referenced)


def context_config_subject(subject: str) -> str | None:
    """The key of the config/mode of ``subject``'s context (``:.staging:``), or None for the
    default context (whose settings are the global ones)."""
    context = context_of(subject)
    if context == DEFAULT_CONTEXT or subject == prefix(context):
        return None
    return prefix(context)


def rewrite(segments: list[str], query: dict[str, list[str]]) -> tuple[list[str], dict[str, list[str]]]:
    """A ``/contexts/{context}/...`` request's path segments and query as the qualified request
    (module docstring); other requests unchanged."""
    if len(segments) < 3 or segments[0] != "contexts":
        return segments, query
    context = normalize(segments[1])
    rest = list(segments[2:])
    qualifier = prefix(context)
    out: list[str] = []
    subject_next = False
    root_setting = rest[0] in ("config", "mode")
    for i, segment in enumerate(rest):
        if subject_next:
            out.append(qualify(context, segment))
            subject_next = False
            continue
        if segment == "subjects" or (i == 0 and root_setting):
            subject_next = True
        out.append(segment)
    if subject_next and root_setting and qualifier:
        out.append(qualifier)   # /contexts/.x/config -> /config/:.x:
    query = {k: list(v) for k, v in query.items()}
    if out[:2] == ["schemas", "ids"]:
        subject = (query.get("subject") or [""])[-1]
        query["subject"] = [qualify(context, subject)]
    elif out in (["schemas"], ["subjects"]):
        prefixes = query.get("subjectPrefix") or [""]
        query["subjectPrefix"] = [qualify(context, p) for p in prefixes]
    return out, query
