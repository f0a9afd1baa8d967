"""ksqlDB's partial timestamp strings: the text a string literal compared with ROWTIME,
WINDOWSTART or WINDOWEND stands for (ksqlDB's ``StatementRewriteForMagicPseudoTimestamp`` with
its ``PartialStringToTimestampParser``), as epoch milliseconds.

The form is ``yyyy-MM-dd'T'HH:mm:ss.SSS`` with an optional zone after the time (``+0200``,
``-05:30``, ``Z``; UTC without one). Without a ``T`` the text is a date, completed from its
left: ``2018`` is 2018-01-01, ``2018-05`` 2018-05-01, each at 00:00:00.000 UTC. With a ``T`` the
time is completed the same way (``2018-05-11T10`` is 10:00:00.000) but the date must be whole.
"""

from __future__ import annotations

import datetime as dt
import re

_TIME_PATTERN = "HH:mm:ss.SSS"
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_WHOLE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{3})$")
_OFFSET = re.compile(r"^([+-])(\d{2})(?::?(\d{2}))?(?::?(\d{2}))?$")


def _complete_date(date: str) -> str:
    parts = date.split("-")
    if len(parts) == 1:
        return date + "-01-01"
    if len(parts) == 2:
        return date + "-01"
    return date


def _complete_time(time: str) -> str:
    if len(time) >= len(_TIME_PATTERN):
        return time
    return time + re.sub(r"[a-zA-Z]", "0", _TIME_PATTERN[len(time):])


def _zone(text: str) -> dt.tzinfo | None:
    if not text.strip():
        return dt.UTC
    match = _OFFSET.match(text)
    if match is None:
        return None
    sign, hours, minutes, seconds = match.groups()
    offset = dt.timedelta(hours=int(hours), minutes=int(minutes or 0), seconds=int(seconds or 0))
    return dt.timezone(-offset if sign == "-" else offset)


def partial_timestamp_millis(text: str) -> int | None:
    """Epoch milliseconds of ``text`` read as ksqlDB reads it (module docstring); None when it is
    not such a timestamp (ksqlDB then fails the statement)."""
    if "T" in text:
        date, rest = text.split("T", 1)
        zone = rest[rest.index("+"):] if "+" in rest else rest[rest.index("-"):] if "-" in rest else ""
        time = _complete_time(re.sub(r"Z$", "", rest[:len(rest) - len(zone)]))
    else:
        date, time, zone = _complete_date(text), _complete_time(""), ""
    match = _WHOLE.match(f"{date}T{time}")
    tz = _zone(zone)
    if match is None or tz is None:
        return None
    year, month, day, hour, minute, second, milli = (int(g) for g in match.groups())
    try:
        at = dt.datetime(year, month, day, hour, minute, second, milli * 1000, tzinfo=tz)
    except ValueError:
        return None
    return (at - _EPOCH) // dt.timedelta(milliseconds=1)
