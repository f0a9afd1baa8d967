"""Reading ksqlDB's query-validation test files (QTT), sans-io.

A file is JSON with ``//`` and ``/* */`` comments (ksqlDB reads it with Jackson's ALLOW_COMMENTS)
holding ``{"tests": [...]}``. Each test has a ``name``, ``statements``, ``inputs`` and ``outputs``
(records: ``topic``, ``key``, ``value``, optional ``timestamp``, ``window`` and ``headers``),
optional ``properties``, ``expectedException`` (``type`` / ``message``), ``topics`` (with
registry schemas), ``post`` conditions, ``enabled``, ``versions`` bounds, and two expansions that
make several cases of one test, as ksqlDB's ``TestCaseBuilder`` does:

- ``format``: one case per listed format, ``{FORMAT}`` in the statements replaced by it;
- ``config``: one case per listed value, put in the one property whose value is ``{CONFIG}``.

A case's full name is ksqlDB's: ``<file stem> - <test name>[ - <format>][ - <prop>=<value>]``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any


class QttFormatError(ValueError):
    """A test file or test that does not follow the QTT format (names the file and test)."""


@dataclass(frozen=True)
class Window:
    """A windowed record's window: ``type`` TIME or SESSION, bounds in epoch milliseconds."""

    start_ms: int
    end_ms: int
    type: str


@dataclass(frozen=True)
class QttRecord:
    """One input or expected output record. ``key``/``value`` are JSON values (numbers parsed
    as ``Decimal`` / ``int`` so ``1.10`` and ``1.1`` compare equal, as ksqlDB's comparator does);
    ``has_key`` is False when the record gives no key at all."""

    topic: str
    key: Any
    value: Any
    timestamp_ms: int | None = None
    window: Window | None = None
    headers: tuple[tuple[str, str | None], ...] | None = None
    has_key: bool = True


@dataclass(frozen=True)
class ExpectedException:
    """``expectedException``: a ksqlDB exception class name and/or a message it contains."""

    type: str | None
    message: str | None


@dataclass(frozen=True)
class SourceCondition:
    """One entry of ``post.sources``: a source that must exist after the statements ran."""

    name: str
    type: str | None
    schema: str | None


@dataclass(frozen=True)
class QttCase:
    """One runnable case (a test after the ``format`` and ``config`` expansions)."""

    file: str
    test_name: str
    statements: tuple[str, ...]
    inputs: tuple[QttRecord, ...] = ()
    outputs: tuple[QttRecord, ...] = ()
    properties: dict[str, Any] = field(default_factory=dict)
    expected_exception: ExpectedException | None = None
    topics: tuple[dict[str, Any], ...] = ()
    post_sources: tuple[SourceCondition, ...] = ()
    format: str | None = None
    config: str | None = None
    versions: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """ksqlDB's test name: ``<file stem> - <test>[ - <format>][ - <config>]``."""
        parts = [Path(self.file).stem, self.test_name]
        if self.format is not None:
            parts.append(self.format)
        if self.config is not None:
            parts.append(self.config)
        return " - ".join(parts)


def strip_comments(text: str) -> str:
    """``text`` without ``//`` line comments and ``/* */`` block comments outside strings (the
    comments ksqlDB's QTT files carry)."""
    out: list[str] = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_string = False
            i += 1
            continue
        if c == '"':
            in_string = True
            out.append(c)
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise QttFormatError("unterminated /* comment")
            i = end + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def parse_json(text: str) -> Any:
    """A QTT file's JSON, comments allowed, numbers with a fraction or exponent as ``Decimal``."""
    return json.loads(strip_comments(text), parse_float=Decimal)


def load_file(path: Path | str) -> list[QttCase]:
    """Every enabled case of one QTT file, expanded (see the module docstring)."""
    path = Path(path)
    try:
        document = parse_json(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, QttFormatError) as e:
        raise QttFormatError(f"{path.name}: not a QTT file: {e}") from None
    if not isinstance(document, dict) or not isinstance(document.get("tests"), list):
        raise QttFormatError(f"{path.name}: no \"tests\" list")
    cases: list[QttCase] = []
    for test in document["tests"]:
        cases.extend(cases_of_test(path.name, test))
    return cases


def cases_of_test(file: str, test: Mapping[str, Any]) -> list[QttCase]:
    """The cases one test expands to (none when ``"enabled": false``)."""
    name = test.get("name")
    if not isinstance(name, str) or not name:
        raise QttFormatError(f"{file}: a test without a name")
    if test.get("enabled", True) is False:
        return []
    statements = test.get("statements")
    if not isinstance(statements, list) or not all(isinstance(s, str) for s in statements):
        raise QttFormatError(f"{file}: {name}: \"statements\" must be a list of strings")
    properties = dict(test.get("properties") or {})
    formats: Sequence[str | None] = list(test.get("format") or []) or [None]
    configs: Sequence[str | None] = list(test.get("config") or []) or [None]
    config_key = None
    if configs != [None]:
        keys = [k for k, v in properties.items() if isinstance(v, str) and v.upper() == "{CONFIG}"]
        if len(keys) != 1:
            raise QttFormatError(f"{file}: {name}: \"config\" needs exactly one property set to {{CONFIG}}")
        config_key = keys[0]
    inputs = tuple(_record(file, name, r) for r in test.get("inputs") or [])
    outputs = tuple(_record(file, name, r) for r in test.get("outputs") or [])
    expected = _expected_exception(file, name, test.get("expectedException"))
    post = test.get("post") or {}
    post_sources = tuple(SourceCondition(str(s["name"]), s.get("type"), s.get("schema"))
                         for s in post.get("sources") or [])
    cases = []
    for fmt in formats:
        for cfg in configs:
            props = dict(properties)
            cfg_name = None
            if config_key is not None and cfg is not None:
                props[config_key] = cfg
                cfg_name = f"{config_key}={cfg}"
            stmts = tuple(s.replace("{FORMAT}", fmt) if fmt is not None else s for s in statements)
            cases.append(QttCase(file=file, test_name=name, statements=stmts, inputs=inputs, outputs=outputs,
                                 properties=props, expected_exception=expected,
                                 topics=tuple(test.get("topics") or []), post_sources=post_sources,
                                 format=fmt, config=cfg_name, versions=dict(test.get("versions") or {})))
    return cases


def _record(file: str, test: str, raw: Any) -> QttRecord:
    if not isinstance(raw, dict) or not isinstance(raw.get("topic"), str) or "value" not in raw:
        raise QttFormatError(f"{file}: {test}: a record needs \"topic\" and \"value\": {raw!r}")
    window = raw.get("window")
    headers = raw.get("headers")
    return QttRecord(
        topic=raw["topic"], key=raw.get("key"), value=raw["value"],
        timestamp_ms=None if raw.get("timestamp") is None else int(raw["timestamp"]),
        window=None if window is None else Window(int(window["start"]), int(window["end"]), str(window["type"]).upper()),
        headers=None if headers is None else tuple((str(h.get("KEY")), h.get("VALUE")) for h in headers),
        has_key="key" in raw)


def _expected_exception(file: str, test: str, raw: Any) -> ExpectedException | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or (raw.get("type") is None and raw.get("message") is None):
        raise QttFormatError(f"{file}: {test}: expectedException needs \"type\" or \"message\"")
    return ExpectedException(raw.get("type"), raw.get("message"))
