"""tests/support/junit_times.py: the per-module times of a JUnit report (what rebalances `make test`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.junit_times import main, module_of, read_report

REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="0" skipped="0" tests="5" time="40.5"
 timestamp="2026-11-29T06:28:26.036149+00:00" hostname="ci">
<testcase classname="tests.interop.test_a" name="test_first" time="12.0" />
<testcase classname="tests.interop.test_a" name="test_second" time="2.0" />
<testcase classname="tests.interop.test_a.TestGroup" name="test_third" time="4.0" />
<testcase classname="tests.unit.test_b" name="test_only" time="0.5" />
<testcase classname="tests.chaos.test_c" name="test_long" time="22.0" />
</testsuite></testsuites>
"""


@pytest.fixture
def report_file(tmp_path: Path) -> Path:
    path = tmp_path / ".test-report-main.xml"
    path.write_text(REPORT)
    return path


def test_a_test_class_belongs_to_its_module() -> None:
    assert module_of("tests.interop.test_a.TestGroup") == "tests.interop.test_a"
    assert module_of("tests.interop.sql.test_sql_security") == "tests.interop.sql.test_sql_security"


def test_modules_totals_and_the_first_tests_excess(report_file: Path) -> None:
    report = read_report(report_file)
    assert (report.tests, report.wall_s) == (5, 40.5)
    assert f"{report.started:%H:%M:%S} {report.ended:%H:%M:%S}" == "06:28:26 06:29:06"
    assert list(report.modules) == ["tests.interop.test_a", "tests.unit.test_b", "tests.chaos.test_c"]
    module = report.modules["tests.interop.test_a"]
    assert module.durations_s == [12.0, 2.0, 4.0]
    assert module.total_s == 18.0
    assert module.first_test_excess_s == 9.0  # 12 s against the others' median of 3 s
    assert report.modules["tests.chaos.test_c"].first_test_excess_s == 0.0  # one test: nothing to compare


def test_the_summary_lists_the_slowest_modules_first(report_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main([str(report_file), "--top", "2"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{report_file}: 5 tests, 40 s wall, 06:28:26 -> 06:29:06")
    assert [line.split()[-1] for line in lines[1:]] == ["tests.chaos.test_c", "tests.interop.test_a"]
