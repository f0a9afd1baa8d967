"""Counting and printing conformance results (sans-io): per file and in total, PASS / FAIL /
OUT_OF_SCOPE, the out-of-scope families, the most frequent failure causes, and issue 24's goal
ratio (passes over the cases outside the excluded families)."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oncestream.durable_files import write_file_atomically
from oncestream.sql.conformance.case_runner import CaseResult, Outcome
from oncestream.sql.conformance.scope import Family


@dataclass
class Tally:
    """Counts of one file or of the whole run."""

    passed: int = 0
    failed: int = 0
    out_of_scope: int = 0
    out_of_scope_counted: int = 0   # out of scope, but in the goal's denominator (runner gaps)
    not_run: int = 0                # the machine kept them from running (outside the totals)
    families: Counter[str] = field(default_factory=Counter)

    def add(self, result: CaseResult) -> None:
        if result.outcome is Outcome.PASS:
            self.passed += 1
        elif result.outcome is Outcome.FAIL:
            self.failed += 1
        elif result.outcome is Outcome.NOT_RUN:
            self.not_run += 1
        else:
            self.out_of_scope += 1
            if result.family is not None:
                self.families[result.family.name] += 1
                if result.family.counts_toward_goal:
                    self.out_of_scope_counted += 1

    @property
    def total(self) -> int:
        return self.passed + self.failed + self.out_of_scope

    @property
    def goal_denominator(self) -> int:
        """Cases the goal counts: run ones plus out-of-scope families that are runner gaps."""
        return self.passed + self.failed + self.out_of_scope_counted

    @property
    def goal_ratio(self) -> float:
        return self.passed / self.goal_denominator if self.goal_denominator else 0.0

    def line(self) -> str:
        not_run = f", {self.not_run} not run (machine)" if self.not_run else ""
        return (f"{self.passed} pass, {self.failed} fail, {self.out_of_scope} out of scope "
                f"({self.total} cases; pass rate in scope {100 * self.goal_ratio:.1f}%){not_run}")


_NUMBERS = re.compile(r"\b\d+\b")
_QUOTED = re.compile(r"'[^']*'|`[^`]*`|\"[^\"]*\"")


def failure_cause(detail: str) -> str:
    """A FAIL's detail reduced to its cause (names, numbers and quoted text blurred), so failures
    of one kind count together."""
    head = detail.split(": expected ")[0] if detail.startswith("topic ") and ", record " in detail else detail
    head = head.split("; first ")[0]
    head = re.sub(r"^topic [^\s,:]+", "topic T", head)
    head = re.sub(r"query \S+ failed", "query failed", head)
    head = _QUOTED.sub("'…'", head)
    head = _NUMBERS.sub("N", head)
    return head[:160]


def tally(results: Iterable[CaseResult]) -> tuple[dict[str, Tally], Tally]:
    """Per-file tallies (by file name) and the total."""
    per_file: dict[str, Tally] = {}
    total = Tally()
    for result in results:
        per_file.setdefault(result.file, Tally()).add(result)
        total.add(result)
    return per_file, total


def tally_by_format(results: Iterable[CaseResult]) -> dict[str, Tally]:
    """Tallies of the cases using each registry format (a case using two counts in both)."""
    out: dict[str, Tally] = {}
    for result in results:
        for fmt in result.formats:
            out.setdefault(fmt, Tally()).add(result)
    return out


def text_report(results: Sequence[CaseResult], *, top_causes: int = 25, verbose: bool = False) -> str:
    """The report the command prints: each file's counts, then the total, the out-of-scope
    families and the most frequent failure causes (``verbose``: every FAIL with its difference)."""
    per_file, total = tally(results)
    lines = []
    for name in sorted(per_file):
        lines.append(f"{name}: {per_file[name].line()}")
    if verbose:
        lines.append("")
        for result in results:
            if result.outcome is Outcome.FAIL:
                lines.append(f"FAIL {result.name}: {result.detail}")
    lines += ["", f"TOTAL: {total.line()}"]
    by_format = tally_by_format(results)
    if by_format:
        lines += ["", "Registry formats (cases using each):"]
        lines += [f"  {fmt}: {t.line()}" for fmt, t in sorted(by_format.items())]
    lines += ["", "Out of scope, by family:"]
    for family, count in total.families.most_common():
        lines.append(f"  {count:5d}  {family}")
    causes = Counter(failure_cause(r.detail) for r in results if r.outcome is Outcome.FAIL)
    lines += ["", f"Top failure causes ({len(causes)} distinct):"]
    for cause, count in causes.most_common(top_causes):
        lines.append(f"  {count:5d}  {cause}")
    return "\n".join(lines)


def json_report(results: Sequence[CaseResult]) -> dict[str, Any]:
    """Every result and the tallies, for ``--json``."""
    per_file, total = tally(results)

    def counts(t: Tally) -> dict[str, Any]:
        return {"pass": t.passed, "fail": t.failed, "outOfScope": t.out_of_scope, "total": t.total, "notRun": t.not_run,
                "goalDenominator": t.goal_denominator, "goalRatio": round(t.goal_ratio, 4),
                "families": dict(t.families)}

    return {
        "total": counts(total),
        "files": {name: counts(t) for name, t in sorted(per_file.items())},
        "registryFormats": {fmt: counts(t) for fmt, t in sorted(tally_by_format(results).items())},
        "engines": sorted({r.engine for r in results if r.engine}),
        "cases": [{"file": r.file, "name": r.name, "outcome": r.outcome.value, "detail": r.detail,
                   "family": r.family.name if r.family else None,
                   "familyCountsTowardGoal": bool(r.family and r.family.counts_toward_goal),
                   "seconds": round(r.seconds, 2), "formats": list(r.formats), "engine": r.engine}
                  for r in results],
    }


def write_json(path: str, results: Sequence[CaseResult]) -> None:
    """``json_report`` written to ``path`` whole or not at all (``durable_files``: a temporary
    file renamed over it), so a run interrupted while saving keeps the previous save."""
    write_file_atomically(Path(path), json.dumps(json_report(results), indent=1).encode())


def read_json(path: str) -> list[CaseResult]:
    """The results a ``write_json`` file holds (``--resume``). A file of an older runner without
    ``familyCountsTowardGoal`` or ``engine`` reads as excluded families and an unknown engine."""
    with open(path, encoding="utf-8") as f:
        raw = json.load(f)
    out = []
    for case in raw.get("cases", []):
        family = None
        if case.get("family"):
            family = Family(case["family"], bool(case.get("familyCountsTowardGoal", False)))
        out.append(CaseResult(case["file"], case["name"], Outcome(case["outcome"]), case.get("detail") or "", family,
                              float(case.get("seconds") or 0.0), tuple(case.get("formats") or ()),
                              case.get("engine") or ""))
    return out
