"""The conformance runner (issue 24 point 6) on Spark against a real broker: the cases of
fixtures/qtt/runner_cases.json (written for this test in ksqlDB's QTT format, not ksqlDB's own)
run through the SQL engine, inputs produced and outputs read read_committed with confluent-kafka.
Each outcome the runner reports is shown: PASS, FAIL with the difference in words (a deliberately
wrong expected value), an expected exception matched or not, and out of scope with its family; the
registry formats' cases run against ``oncestream schema-registry`` (AVRO, PROTOBUF, JSON_SR
inputs framed from the declared columns' schema, and columns read from a schema the case's
``topics`` register under an id the statements name)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from oncestream.sql.conformance.case_runner import CaseResult, Outcome
from oncestream.sql.conformance.command import case_environment, run_cases
from oncestream.sql.conformance.qtt_format import load_file
from oncestream.sql.conformance.report import text_report

pytestmark = [pytest.mark.spark]

FIXTURE = Path(__file__).parent / "fixtures" / "qtt" / "runner_cases.json"
ARRIVAL_ORDER = Path(__file__).parent / "fixtures" / "qtt" / "arrival_order.json"


def _run_fixture(sql_spark: Any, eos_broker: Any, tmp_path: Path, fixture: Path) -> list[CaseResult]:
    """Every case of ``fixture`` through the runner (all of them run)."""
    from oncestream.sql.engine.serde import current_registry

    env = case_environment(sql_spark, eos_broker.bootstrap, str(tmp_path / "checkpoints"), current_registry())
    try:
        results, not_run = run_cases(load_file(fixture), env, jobs=1)
    finally:
        env.close()
    assert not_run == []
    return results


def test_runner_reports_pass_fail_expected_errors_and_out_of_scope(sql_spark, eos_broker, registry, tmp_path):
    results = _run_fixture(sql_spark, eos_broker, tmp_path, FIXTURE)
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
    for fmt in ("AVRO", "PROTOBUF", "JSON_SR"):
        assert outcome(f"registry formats run - {fmt}") is Outcome.PASS, report
    assert outcome("columns from the registry") is Outcome.PASS, report
    assert families["documented unsupported statement is out of scope"] == "documented not supported: ASSERT statement"
    assert "TOTAL: 7 pass, 3 fail, 3 out of scope (13 cases;" in report
    assert "  PROTOBUF: 1 pass, 0 fail, 0 out of scope" in report


def test_input_producer_writes_a_record_without_key_and_value_in_order(eos_broker):
    """ksqlDB's cases have inputs with neither key nor value (a keyless stream's null value) and
    headers without a value (headers.json), which kafka-python refuses: the runner writes them
    with confluent-kafka, between the records before and after them; read back with
    confluent-kafka."""
    from confluent_kafka import Consumer, TopicPartition

    from oncestream.sql.conformance.case_runner import InputProducer
    from tests.spark.sql.golden import create_topics, unique

    topic = unique("empty_records")
    create_topics(eos_broker.bootstrap, topic)
    producer = InputProducer(eos_broker.bootstrap)
    errors: list[str] = []
    Headers = list[tuple[str, str | bytes | None]] | None
    records: list[tuple[bytes | None, bytes | None, int, Headers]] = [
        (b"k", b"1", 1000, None), (None, None, 2000, None), (b"h", b"2", 2500, [("a", None), ("b", b"x")]),
        (None, b"3", 3000, [("c", b"y")])]
    for key, value, ts, headers in records:
        producer.produce(topic, key, value, ts, headers, errors)
    assert producer.flush(30)
    assert not errors
    consumer = Consumer({"bootstrap.servers": eos_broker.bootstrap, "group.id": unique("check"),
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    try:
        for _ in range(60):
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got.append((msg.key(), msg.value(), msg.timestamp()[1], msg.headers()))
            if len(got) == 4:
                break
    finally:
        consumer.close()
    assert got == [(b"k", b"1", 1000, None), (None, None, 2000, None), (b"h", b"2", 2500, [("a", None), ("b", b"x")]),
                   (None, b"3", 3000, [("c", b"y")])]


def test_a_join_sees_its_inputs_in_the_cases_order(sql_spark, eos_broker, registry, tmp_path):
    """ksqlDB's test driver processes each input before the next: a stream row whose ROWTIME
    (100, from its AT column) is older than the table row written before it (5000) still joins
    it. In one micro-batch the stream-table join would take the stream row first (ROWTIME
    order) and write nothing for it."""
    results = _run_fixture(sql_spark, eos_broker, tmp_path, ARRIVAL_ORDER)
    assert [(r.outcome, r.detail) for r in results] == [(Outcome.PASS, "")]
