"""logging_setup: the three formats, the context filter and the log.* settings."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator

import pytest

from oncestream.logging_setup import (
    JsonFormatter,
    LogConfigError,
    LogfmtFormatter,
    LogSettings,
    TextFormatter,
    configure_logging,
    event_fields,
)


def _record(msg: str = "closing %s", args: tuple[object, ...] = ("peer",), **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("oncestream.broker", logging.WARNING, __file__, 1, msg, args, None)
    for key, value in extra.items():
        setattr(record, key, value)
    return record


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    touched = ["oncestream.broker.sasl", "oncestream.broker.request"]
    levels = {name: logging.getLogger(name).level for name in touched}
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    for name, old in levels.items():
        logging.getLogger(name).setLevel(old)


def test_json_line_has_the_standard_parts_and_the_event_fields():
    line = JsonFormatter().format(_record(client="10.0.0.1:5000", principal="User:alice", errors=["A", "B"],
                                          skipped=None))
    assert "\n" not in line
    out = json.loads(line)
    assert out["level"] == "WARNING"
    assert out["logger"] == "oncestream.broker"
    assert out["msg"] == "closing peer"
    assert out["client"] == "10.0.0.1:5000"
    assert out["principal"] == "User:alice"
    assert out["errors"] == ["A", "B"]
    assert "skipped" not in out
    assert out["ts"].endswith("Z")


def test_json_keeps_a_traceback_on_one_line():
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    line = JsonFormatter().format(record)
    assert "\n" not in line
    assert "ValueError: boom" in json.loads(line)["exc"]


def test_logfmt_quotes_and_escapes_what_needs_it():
    line = LogfmtFormatter().format(_record('bad "frame"\nhere', (), reason="a b", client="1.2.3.4:9", n=3,
                                            errors=["A", "B"]))
    assert "\n" not in line
    assert 'msg="bad \\"frame\\"\\nhere"' in line
    assert 'reason="a b"' in line
    assert " client=1.2.3.4:9" in line
    assert " n=3" in line
    assert " errors=A,B" in line
    assert line.startswith("ts=")


def test_text_keeps_the_human_format_and_appends_fields():
    line = TextFormatter().format(_record(principal="User:bob"))
    assert " WARNING oncestream.broker: closing peer principal=User:bob" in line
    assert event_fields(_record()) == {}


def test_settings_parse_format_root_and_per_logger_levels():
    settings = LogSettings.from_properties({"log.format": "JSON", "log.level": "warn",
                                            "log.level.oncestream.broker.sasl": "TRACE"}, "info")
    assert settings.format == "json"
    assert settings.root_level == logging.WARNING
    assert settings.levels["oncestream.broker.sasl"] == logging.DEBUG
    # The request logger is quiet unless named, as Kafka's kafka.request.logger.
    assert settings.levels["oncestream.broker.request"] == logging.WARNING
    assert LogSettings.from_properties({}, "debug").root_level == logging.DEBUG
    assert LogSettings.from_properties({}, "debug").format == "text"


@pytest.mark.parametrize(("props", "message"), [
    ({"log.format": "xml"}, "log.format"),
    ({"log.level": "loud"}, "log.level='loud'"),
    ({"log.level.oncestream": "nope"}, "log.level.oncestream"),
    ({"log.level.": "INFO"}, "name a logger"),
])
def test_bad_settings_are_refused_with_the_setting_named(props, message):
    with pytest.raises(LogConfigError, match=message):
        LogSettings.from_properties(props)


def test_configure_applies_levels_and_the_context(restore_logging):
    stream = io.StringIO()
    settings = LogSettings.from_properties({"log.format": "json", "log.level": "WARNING",
                                            "log.level.oncestream.broker.sasl": "DEBUG"})
    configure_logging(settings, context=lambda: {"client": "h:1", "principal": "User:ANONYMOUS"}, stream=stream)
    logging.getLogger("oncestream.broker.sasl.exchange").debug("child of a DEBUG logger", extra={"principal": "x"})
    logging.getLogger("oncestream.broker.other").info("below the root level")
    logging.getLogger("oncestream.broker.request").info("quiet by default")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["msg"] for line in lines] == ["child of a DEBUG logger"]
    # A second call replaces its own handler, not one it did not install.
    configure_logging(settings, stream=io.StringIO())
    assert sum(h.get_name() == "oncestream" for h in logging.getLogger().handlers) == 1
    assert lines[0]["client"] == "h:1"
    assert lines[0]["principal"] == "x"  # the call site's field wins over the context
