"""Zone letters of TIMESTAMPTOSTRING / FORMAT_TIMESTAMP with a named zone print that zone's name
and offset at the instant, as Java's DateTimeFormatter does (language/zone_text.py)."""

from __future__ import annotations

import pytest

from oncestream.sql.language import functions
from oncestream.sql.language.function_catalog import CallSite
from oncestream.sql.language.zone_text import (
    ZONE_PATTERN_UDF,
    has_zone_letters,
    needs_zone_pattern,
    string_literal,
    zone_pattern,
)

SUMMER_MS = 1526075913000   # 2018-05-11T21:58:33Z (timestamp-to-string.json)
WINTER_MS = 1516000000000   # 2018-01-15T07:06:40Z


@pytest.mark.parametrize(("pattern", "zone", "millis", "expected"), [
    ("yyyy-MM-dd HH:mm:ss zzz", "America/Los_Angeles", SUMMER_MS, "yyyy-MM-dd HH:mm:ss 'PDT'"),
    ("yyyy-MM-dd HH:mm:ss zzz", "America/Los_Angeles", WINTER_MS, "yyyy-MM-dd HH:mm:ss 'PST'"),
    ("yyyy-MM-dd HH:mm:ss zzz", "Europe/London", SUMMER_MS, "yyyy-MM-dd HH:mm:ss 'BST'"),
    ("HH:mm z", "Europe/London", WINTER_MS, "HH:mm 'GMT'"),
    ("HH:mmXXX", "America/Los_Angeles", SUMMER_MS, "HH:mm'-07:00'"),
    ("HH:mmXXX", "UTC", SUMMER_MS, "HH:mm'Z'"),
    ("HH:mmxxx", "UTC", SUMMER_MS, "HH:mm'+00:00'"),
    ("HH:mm X", "Asia/Kolkata", SUMMER_MS, "HH:mm '+0530'"),
    ("HH:mm Z", "Asia/Kolkata", SUMMER_MS, "HH:mm '+0530'"),
    ("HH:mm ZZZZ", "America/Los_Angeles", SUMMER_MS, "HH:mm 'GMT-07:00'"),
    ("HH:mm O", "America/Los_Angeles", SUMMER_MS, "HH:mm 'GMT-7'"),
    ("HH:mm 'zone' z", "America/Los_Angeles", SUMMER_MS, "HH:mm 'zone' 'PDT'"),   # quoted text stays
    # a quoted section next to the zone's text: one section (side by side they read as a quote)
    ("HH:mm'h'XXX", "Asia/Kolkata", SUMMER_MS, "HH:mm'h+05:30'"),
    ("HH''z", "UTC", SUMMER_MS, "HH'''UTC'"),
    ("[HH z]", "UTC", SUMMER_MS, "[HH 'UTC']"),
    ("HH:mm zzzz", "America/Los_Angeles", SUMMER_MS, "HH:mm zzzz"),               # long names: left to Spark
    ("HH:mm z", "No/Such_Zone", SUMMER_MS, "HH:mm z"),
])
def test_zone_letters_become_the_zones_text_at_the_instant(pattern, zone, millis, expected) -> None:
    assert zone_pattern(pattern, zone, millis) == expected


def test_null_in_null_out() -> None:
    assert zone_pattern(None, "UTC", 0) is None
    assert zone_pattern("z", None, 0) is None
    assert zone_pattern("z", "UTC", None) is None


def test_only_patterns_with_zone_letters_go_through_the_udf() -> None:
    assert string_literal("'yyyy \\'x\\' z'") == "yyyy 'x' z"
    assert string_literal("col") is None
    assert has_zone_letters("HH:mm z")
    assert not has_zone_letters("HH:mm 'z'")
    assert needs_zone_pattern("'HH z'")
    assert needs_zone_pattern("FMT")
    assert not needs_zone_pattern("'yyyy-MM-dd'")

    def spark(name: str, args: list[str]) -> str:
        fd = functions.lookup(name)
        assert fd is not None
        return fd.spark(CallSite(args=args))

    assert spark("TIMESTAMPTOSTRING", ["ts", "'HH z'", "'Europe/London'"]) == (
        "date_format(from_utc_timestamp(timestamp_millis(ts), 'Europe/London'), "
        f"{ZONE_PATTERN_UDF}('HH z', 'Europe/London', CAST(ts AS BIGINT)))")
    assert spark("FORMAT_TIMESTAMP", ["t", "'HH z'", "'UTC'"]) == (
        f"date_format(from_utc_timestamp(t, 'UTC'), {ZONE_PATTERN_UDF}('HH z', 'UTC', unix_millis(t)))")
    # without a zone, or without zone letters, Spark alone
    assert ZONE_PATTERN_UDF not in spark("TIMESTAMPTOSTRING", ["ts", "'HH z'"])
    assert ZONE_PATTERN_UDF not in spark("FORMAT_TIMESTAMP", ["t", "'yyyy'", "'UTC'"])
