"""Log output of the broker and the SQL server: one line per event, levels per module.

Settings (``--config KEY=VALUE`` on ``oncestream broker`` and ``oncestream sql-server``):

- ``log.format``: ``text`` (the default: ``time LEVEL logger: message`` and then the event's
  fields as ``key=value``), ``logfmt`` (every part as ``key=value``, for Loki/Vector/grep), or
  ``json`` (one JSON object per line, for Elasticsearch/jq).
- ``log.level``: the root level (DEBUG, INFO, WARNING, ERROR, CRITICAL; Kafka's TRACE and WARN are
  taken as DEBUG and WARNING); ``--log-level`` gives it when this is not set.
- ``log.level.<logger>``: the level of one logger and its children, e.g.
  ``log.level.oncestream.broker.sasl=DEBUG`` (Kafka's ``log4j.logger.<name>=LEVEL``).

Event fields are the standard library's ``extra=``: every attribute a record carries beyond
those ``logging.LogRecord`` sets itself is a field, so a call site names its fields once
(``log.info("failed authentication", extra={"mechanism": "PLAIN", "error": reason})``). A
``context`` callable (the broker's connection context) adds fields every record of the current
task shares, such as the client address and principal; a field given by the call site wins.
Standard library only: a Formatter per format and one Filter, no dependency.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

FORMATS = ("text", "logfmt", "json")
_LEVELS = {"TRACE": logging.DEBUG, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
           "WARNING": logging.WARNING, "ERROR": logging.ERROR, "FATAL": logging.CRITICAL,
           "CRITICAL": logging.CRITICAL, "OFF": logging.CRITICAL + 10}
_LEVEL_PREFIX = "log.level."
# What every LogRecord carries by itself (plus what Formatter.format adds): not event fields.
_RECORD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}
# Loggers quiet unless asked for, as Kafka's log4j.properties ships its request logger at WARN:
# they log one line per request.
QUIET_LOGGERS = {"oncestream.broker.request": logging.WARNING}
_HANDLER_NAME = "oncestream"


class LogConfigError(ValueError):
    """A log.* setting that cannot be applied (unknown format or level)."""


def parse_level(value: str, setting: str) -> int:
    """A level name (Kafka's TRACE/WARN/FATAL/OFF included) as a ``logging`` level."""
    level = _LEVELS.get(value.strip().upper())
    if level is None:
        raise LogConfigError(f"{setting}={value!r}: expected one of {', '.join(sorted(_LEVELS))}")
    return level


@dataclass(frozen=True)
class LogSettings:
    """The parsed ``log.*`` settings."""

    format: str = "text"
    root_level: int = logging.INFO
    levels: Mapping[str, int] = field(default_factory=dict)  # logger name -> level

    @classmethod
    def from_properties(cls, props: Mapping[str, str], default_level: str = "info") -> LogSettings:
        """Read ``log.format``, ``log.level`` and ``log.level.<logger>`` from ``props``;
        ``default_level`` is the root level when ``log.level`` is absent."""
        fmt = props.get("log.format", "text").strip().lower()
        if fmt not in FORMATS:
            raise LogConfigError(f"log.format={fmt!r}: expected one of {', '.join(FORMATS)}")
        root = parse_level(props.get("log.level", default_level), "log.level")
        levels = dict(QUIET_LOGGERS)
        for key, value in props.items():
            if key.startswith(_LEVEL_PREFIX):
                name = key[len(_LEVEL_PREFIX):]
                if not name:
                    raise LogConfigError(f"{key}: name a logger after {_LEVEL_PREFIX}")
                levels[name] = parse_level(value, key)
        return cls(fmt, root, levels)


def event_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a record carries beyond the standard ones (``extra=`` and the context filter)."""
    return {k: v for k, v in vars(record).items() if k not in _RECORD_ATTRS and not k.startswith("_")}


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.datetime.fromtimestamp(record.created, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _logfmt_value(value: object) -> str:
    if isinstance(value, str):
        text = value
    elif isinstance(value, (list, tuple)):
        text = ",".join(str(item) for item in value)  # errors=A,B: still one token
    elif isinstance(value, dict):
        text = json.dumps(value, default=str)
    else:
        text = str(value)
    if text and not any(c in text for c in ' ="\\\n\t'):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


def _logfmt_pairs(fields: Mapping[str, Any]) -> str:
    return " ".join(f"{key}={_logfmt_value(value)}" for key, value in fields.items() if value is not None)


class TextFormatter(logging.Formatter):
    """``2026-11-28 20:44:23,101 INFO oncestream.broker: message key=value ...``: the human
    format the broker always had, with the event's fields after the message."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = _logfmt_pairs(event_fields(record))
        if not fields:
            return line
        head, newline, trace = line.partition("\n")  # fields stay on the first line
        return f"{head} {fields}{newline}{trace}"


class LogfmtFormatter(logging.Formatter):
    """``ts=... level=INFO logger=... msg="..." key=value ...`` on one line (a traceback is
    one escaped ``exc`` field)."""

    def format(self, record: logging.LogRecord) -> str:
        parts: dict[str, Any] = {"ts": _timestamp(record), "level": record.levelname, "logger": record.name,
                                 "msg": record.getMessage()}
        parts.update(event_fields(record))
        if record.exc_info:
            parts["exc"] = self.formatException(record.exc_info)
        return _logfmt_pairs(parts)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``msg``, the event's fields, and
    ``exc`` (the traceback) when there is one. Values JSON cannot hold are written as text."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"ts": _timestamp(record), "level": record.levelname, "logger": record.name,
                               "msg": record.getMessage()}
        for key, value in event_fields(record).items():
            if value is not None:
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


_FORMATTERS: dict[str, Callable[[], logging.Formatter]] = {
    "text": TextFormatter, "logfmt": LogfmtFormatter, "json": JsonFormatter}


class ContextFilter(logging.Filter):
    """Adds the fields ``context()`` gives (e.g. the current connection's client and principal)
    to every record passing the handler; fields the call site set are kept."""

    def __init__(self, context: Callable[[], Mapping[str, Any]]) -> None:
        super().__init__()
        self._context = context

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in self._context().items():
            if key not in record.__dict__:
                setattr(record, key, value)
        return True


def configure_logging(settings: LogSettings, *, context: Callable[[], Mapping[str, Any]] | None = None,
                      stream: TextIO | None = None) -> logging.Handler:
    """Install one stream handler (stderr by default) on the root logger with the settings'
    format and levels, replacing the one an earlier call installed (other handlers, such as a
    test runner's capture, stay); returns the handler."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(_FORMATTERS[settings.format]())
    handler.set_name(_HANDLER_NAME)
    if context is not None:
        handler.addFilter(ContextFilter(context))
    root = logging.getLogger()
    for old in list(root.handlers):
        if old.get_name() == _HANDLER_NAME:
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(settings.root_level)
    for name, level in settings.levels.items():
        logging.getLogger(name).setLevel(level)
    return handler
