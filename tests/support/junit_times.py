"""Where a `make test` run spends its time, from the JUnit reports it writes (.test-report-*.xml).

``python -m tests.support.junit_times .test-report-main.xml .test-report-spark.xml ...`` prints,
per report, when it started and ended, its tests and seconds, and its slowest modules with their
first test's excess (``first_test_excess_s``: how much longer the module's first test took than
the median of the others). A module fixture (a broker, a SparkSession) starts in the first test
that uses it and its set-up is counted in that test's time, so the excess points at costly
set-ups; it also counts a first test that is simply the module's longest. The Makefile's layout
of the runs (which suites go beside the rest) is balanced with these numbers.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class ModuleTimes:
    """The tests of one module, in the order they ran, with their durations in seconds."""

    name: str
    durations_s: list[float] = field(default_factory=list)

    @property
    def total_s(self) -> float:
        return sum(self.durations_s)

    @property
    def first_test_excess_s(self) -> float:
        """How much longer the first test took than the median of the others (0 for one test)."""
        if len(self.durations_s) < 2:
            return 0.0
        return max(0.0, self.durations_s[0] - statistics.median(self.durations_s[1:]))


@dataclass
class Report:
    """One JUnit report: its start, its wall time and its modules in the order they ran."""

    path: Path
    started: datetime.datetime
    wall_s: float
    tests: int
    modules: dict[str, ModuleTimes]

    @property
    def ended(self) -> datetime.datetime:
        return self.started + datetime.timedelta(seconds=self.wall_s)


def module_of(classname: str) -> str:
    """``tests.interop.test_tls.TestX`` -> ``tests.interop.test_tls`` (a test class's name dropped)."""
    return ".".join(part for part in classname.split(".") if not part[:1].isupper())


def read_report(path: Path) -> Report:
    """Parse one pytest JUnit report (pytest's ``testsuites`` root or a bare ``testsuite``)."""
    root = ET.parse(path).getroot()
    suite = root.find("testsuite") if root.tag == "testsuites" else root
    if suite is None:
        raise ValueError(f"{path}: no <testsuite> element")
    modules: dict[str, ModuleTimes] = {}
    for case in suite.iter("testcase"):
        name = module_of(case.get("classname", ""))
        modules.setdefault(name, ModuleTimes(name)).durations_s.append(float(case.get("time", "0")))
    return Report(path, datetime.datetime.fromisoformat(suite.get("timestamp", "1970-01-01T00:00:00+00:00")),
                  float(suite.get("time", "0")), int(suite.get("tests", "0")), modules)


def summary(report: Report, top: int) -> list[str]:
    """The lines printed for one report."""
    lines = [f"{report.path}: {report.tests} tests, {report.wall_s:.0f} s wall, "
             f"{report.started:%H:%M:%S} -> {report.ended:%H:%M:%S}, "
             f"first tests' excess {sum(m.first_test_excess_s for m in report.modules.values()):.0f} s "
             f"over {len(report.modules)} modules"]
    for module in sorted(report.modules.values(), key=lambda m: m.total_s, reverse=True)[:top]:
        lines.append(f"  {module.total_s:7.1f} s  {len(module.durations_s):4d} tests  "
                     f"first test +{module.first_test_excess_s:5.1f} s  {module.name}")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--top", type=int, default=15, help="modules listed per report")
    args = parser.parse_args(argv)
    for path in args.reports:
        print("\n".join(summary(read_report(path), args.top)))


if __name__ == "__main__":
    main()
