"""ksqlDB's partial timestamp strings compared with ROWTIME / WINDOWSTART / WINDOWEND
(language/partial_timestamp.py; PartialStringToTimestampParser)."""

from __future__ import annotations

import pytest

from oncestream.sql.language.partial_timestamp import partial_timestamp_millis


@pytest.mark.parametrize(("text", "millis"), [
    ("2018", 1514764800000), ("2018-05", 1525132800000), ("2018-05-11", 1525996800000),
    ("2018-01-01T00:00:00.001", 1514764800001), ("2018-01-01T10", 1514800800000),
    ("2020-02-10T08:31:44.001+0000", 1581323504001), ("2020-05-26T23:59:58.000+0200", 1590530398000),
    ("2020-05-26T23:59:58.000-05:30", 1590537598000 + 5 * 3_600_000 + 30 * 60_000 - 0),
    ("2020-05-26T23:59:58Z", 1590537598000), ("1969-12-31T23:59:59.999", -1),
])
def test_partial_strings_are_completed_as_ksqldb_does(text: str, millis: int) -> None:
    assert partial_timestamp_millis(text) == millis


@pytest.mark.parametrize("text", ["x", "2018-13-01", "2018-05T10:00", "2018-01-01T10:00:00.000+zz", ""])
def test_other_text_is_not_a_timestamp(text: str) -> None:
    assert partial_timestamp_millis(text) is None
