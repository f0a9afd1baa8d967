"""Zone names and offsets in the patterns of TIMESTAMPTOSTRING and FORMAT_TIMESTAMP given a zone.

ksqlDB formats with Java's ``DateTimeFormatter`` in the zone the call names, so ``zzz`` prints
that zone's short name at that instant (``PDT`` in summer, ``PST`` in winter) and ``XXX`` its
offset (``-07:00``). Spark's ``date_format`` formats in the session's zone (UTC here): the
functions shift the instant into the named zone's wall clock (``from_utc_timestamp``), which
gives the right digits but leaves the zone letters printing UTC's name and offset. So when a
zone is given and the pattern holds zone letters, the pattern is rewritten per row: each run of
zone letters outside quotes becomes a quoted literal of what Java prints for it
(``zone_pattern``, a Python UDF: Spark SQL has no function that names a zone at an instant).

Rewritten: ``z``/``zz``/``zzz`` (short name, from the tz database as Python's ``zoneinfo`` has
it), ``Z``/``ZZ``/``ZZZ`` (``+HHMM``), ``ZZZZ`` (``GMT+HH:MM``, ``GMT`` at zero), ``ZZZZZ`` and
``XXX`` (``+HH:MM``, ``Z`` at zero), ``X`` (``+HH``, ``+HHMM`` when minutes), ``XX``
(``+HHMM``), ``x``/``xx``/``xxx`` (as X but ``+00`` at zero), ``O`` (``GMT+H``) and ``OOOO``
(``GMT+HH:MM``). Other runs (``zzzz``'s long names, which Python's tz database lacks) are left to
Spark.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

ZONE_PATTERN_UDF = "oncestream_zone_pattern"

_SPARK_STRING = re.compile(r"^'((?:[^'\\]|\\.)*)'$", re.DOTALL)


def _hours_minutes(offset_s: int) -> tuple[str, int, int]:
    sign = "-" if offset_s < 0 else "+"
    minutes = abs(offset_s) // 60
    return sign, minutes // 60, minutes % 60


def _compact(offset_s: int, *, minutes_always: bool, colon: bool) -> str:
    sign, hours, minutes = _hours_minutes(offset_s)
    if not minutes_always and minutes == 0:
        return f"{sign}{hours:02d}"
    return f"{sign}{hours:02d}{':' if colon else ''}{minutes:02d}"


def _gmt(offset_s: int, *, full: bool) -> str:
    if offset_s == 0:
        return "GMT"
    sign, hours, minutes = _hours_minutes(offset_s)
    if full:
        return f"GMT{sign}{hours:02d}:{minutes:02d}"
    return f"GMT{sign}{hours}" + (f":{minutes:02d}" if minutes else "")


# letter, run length -> what Java prints, from the zone's short name and its offset in seconds
_RUNS: dict[tuple[str, int], Callable[[str, int], str]] = {
    ("z", 1): lambda name, _o: name,
    ("z", 2): lambda name, _o: name,
    ("z", 3): lambda name, _o: name,
    ("Z", 1): lambda _n, o: _compact(o, minutes_always=True, colon=False),
    ("Z", 2): lambda _n, o: _compact(o, minutes_always=True, colon=False),
    ("Z", 3): lambda _n, o: _compact(o, minutes_always=True, colon=False),
    ("Z", 4): lambda _n, o: _gmt(o, full=True),
    ("Z", 5): lambda _n, o: "Z" if o == 0 else _compact(o, minutes_always=True, colon=True),
    ("X", 1): lambda _n, o: "Z" if o == 0 else _compact(o, minutes_always=False, colon=False),
    ("X", 2): lambda _n, o: "Z" if o == 0 else _compact(o, minutes_always=True, colon=False),
    ("X", 3): lambda _n, o: "Z" if o == 0 else _compact(o, minutes_always=True, colon=True),
    ("x", 1): lambda _n, o: _compact(o, minutes_always=False, colon=False),
    ("x", 2): lambda _n, o: _compact(o, minutes_always=True, colon=False),
    ("x", 3): lambda _n, o: _compact(o, minutes_always=True, colon=True),
    ("O", 1): lambda _n, o: _gmt(o, full=False),
    ("O", 4): lambda _n, o: _gmt(o, full=True),
}


def _tokens(pattern: str) -> list[tuple[str, str]]:
    """``pattern`` as Java reads it: ("letters", a run of one pattern letter), ("text", literal
    text: a quoted section's content or an escaped quote ``''``) and ("raw", any other character
    outside quotes, kept as written: ``[`` ``]`` open and close optional sections)."""
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "'":
            if pattern.startswith("''", i):
                out.append(("text", "'"))
                i += 2
                continue
            text, i = [], i + 1
            while i < len(pattern):
                if pattern.startswith("''", i):
                    text.append("'")
                    i += 2
                elif pattern[i] == "'":
                    i += 1
                    break
                else:
                    text.append(pattern[i])
                    i += 1
            out.append(("text", "".join(text)))
        elif ch.isascii() and ch.isalpha():
            end = i
            while end < len(pattern) and pattern[end] == ch:
                end += 1
            out.append(("letters", pattern[i:end]))
            i = end
        else:
            out.append(("raw", ch))
            i += 1
    return out


def _pattern(tokens: list[tuple[str, str]]) -> str:
    """``tokens`` written back as a pattern, adjacent texts in one quoted section (two sections
    side by side would read as an escaped quote)."""
    out, text = [], []
    for kind, value in [*tokens, ("end", "")]:
        if kind == "text":
            text.append(value)
            continue
        if text:
            out.append("'" + "".join(text).replace("'", "''") + "'")
            text = []
        out.append(value)
    return "".join(out)


def has_zone_letters(pattern: str) -> bool:
    """Whether ``pattern`` holds a zone-letter run this module rewrites."""
    return any(kind == "letters" and (run[0], len(run)) in _RUNS for kind, run in _tokens(pattern))


@lru_cache(maxsize=256)
def _zone(zone: str) -> ZoneInfo | None:
    try:
        return ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def zone_pattern(pattern: str | None, zone: str | None, millis: int | None) -> str | None:
    """``pattern`` with its zone letters replaced by quoted literals of what Java prints for
    ``zone`` at the instant ``millis`` (module docstring); NULL in, NULL out. An unknown zone
    leaves the pattern as it is (``from_utc_timestamp`` then fails as it did before)."""
    if pattern is None or zone is None or millis is None:
        return None
    tz = _zone(zone)
    if tz is None:
        return pattern
    at = dt.datetime.fromtimestamp(millis / 1000, tz=dt.UTC).astimezone(tz)
    offset = at.utcoffset()
    offset_s = int(offset.total_seconds()) if offset is not None else 0
    name = at.tzname() or zone
    tokens = []
    for kind, value in _tokens(pattern):
        rule = _RUNS.get((value[0], len(value))) if kind == "letters" else None
        tokens.append((kind, value) if rule is None else ("text", rule(name, offset_s)))
    return _pattern(tokens)


def string_literal(sql: str) -> str | None:
    """The value of a Spark SQL string literal (``'...'`` with backslash escapes), else None."""
    match = _SPARK_STRING.match(sql.strip())
    if match is None:
        return None
    return re.sub(r"\\(.)", r"\1", match.group(1), flags=re.DOTALL)


def needs_zone_pattern(pattern_sql: str) -> bool:
    """Whether a call's pattern (its Spark SQL) must go through ``zone_pattern``: a literal with
    zone letters, or any pattern only known per row."""
    literal = string_literal(pattern_sql)
    return literal is None or has_zone_letters(literal)


def register_udfs(spark: Any) -> None:
    """Register ``zone_pattern`` on a SparkSession as ``ZONE_PATTERN_UDF`` (idempotent)."""
    from pyspark.sql import types as T

    spark.udf.register(ZONE_PATTERN_UDF, zone_pattern, T.StringType())
