"""The conformance runner (issue 24 point 6) on Spark against a real broker: the cases of
fixtures/qtt/runner_cases.json (written for this test in ksqlDB's QTT format, not ksqlDB's own)
run through the SQL engine, inputs produced and outputs read read_committed with confluent-kafka.
Each outcome the runner reports is shown: PASS, FAIL with the difference in words (a deliberately
wrong expected value), an expected exception matched or not, and out of scope with its family."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncestream.sql.conformance.case_runner import Outcome
from oncestream.sql.conformance.command import case_environment, run_cases
from oncestream.sql.conformance.qtt_format import load_file
from oncestream.sql.conformance.report import text_report

pytestmark = [pytest.mark.spark]

FIXTURE = Path(__file__).parent / "fixtures" / "qtt" / "runner_cases.json"


def test_runner_reports_pass_fail_expected_errors_and_out_of_scope(sql_spark, eos_broker, tmp_path):
    env = case_environment(sql_spark, eos_broker.bootstrap, str(tmp_path / "checkpoints"))
    try:
        results, not_run = run_cases(load_file(FIXTURE), env, jobs=1)
    finally:
        env.close()
    assert not_run == []
    by_name = {r.name.removeprefix("runner_cases - "): r for r in results}
    report = text_report(results, verbose=True)

    def outcome(name: str) -> Outcome:
        return by_name[name].outcome

    assert outcome("filter and project passes") is Outcome.PASS, report
    assert outcome("count per key updates once per record") is Outcome.PASS, report
    wrong = by_name["wrong expected value fails"]
    assert wrong.outcome is Outcome.FAIL, report
    assert 'record 0: value differ: expected <7, {"F":211.0}> but was <7, {"F":212.0}>' in wrong.detail
    assert outcome("unknown source is refused as expected") is Outcome.PASS, report
    other = by_name["refused with another message fails"]
    assert other.outcome is Outcome.FAIL
    assert "NOWHERE does not exist" in other.detail
    accepted = by_name["accepted although an error was expected fails"]
    assert accepted.outcome is Outcome.FAIL
    assert "every statement was accepted" in accepted.detail
    families = {name: r.family.name for name, r in by_name.items() if r.family is not None}
    assert families["connector is out of scope"].startswith("connectors")
    assert families["test udf is out of scope"].startswith("UDF plugins")
    assert families["avro variants are out of scope for now - AVRO"].startswith("registry formats")
    assert families["documented unsupported statement is out of scope"] == "documented not supported: PRINT statement"
    assert "TOTAL: 3 pass, 3 fail, 5 out of scope (11 cases;" in report
