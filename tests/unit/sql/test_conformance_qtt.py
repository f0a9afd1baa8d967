"""The conformance runner's sans-io parts (issue 24 point 6): reading ksqlDB's QTT format
(comments, format and config expansions, records, expected exceptions, post conditions), the
out-of-scope families, the records' bytes as the formats define them, the comparison with its
difference in words, and the report's counts. The runner's own case file is
tests/spark/sql/fixtures/qtt/runner_cases.json (written here, not ksqlDB's)."""

from __future__ import annotations

import dataclasses
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from oncestream.sql.conformance.case_runner import CaseResult, Outcome, arrival_runs, renamed, topics_to_create
from oncestream.sql.conformance.command import case_files, collect_cases, run_cases
from oncestream.sql.conformance.qtt_format import QttFormatError, QttRecord, Window, cases_of_test, load_file, strip_comments
from oncestream.sql.conformance.records import (
    ActualRecord,
    compare_topic,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    values_match,
)
from oncestream.sql.conformance.report import failure_cause, json_report, tally, text_report
from oncestream.sql.conformance.scope import (
    CONNECTORS,
    UDF_PLUGINS,
    Family,
    refusal_family,
    registry_formats,
    static_family,
)
from oncestream.sql.language import sql_ast
from oncestream.sql.language.catalog import Column, Format, Namespace, SourceInfo
from oncestream.sql.language.parser import parse
from oncestream.sql.language.sql_ast import SourceKind, WindowKind, WindowSpec
from oncestream.sql.language.types import SqlType

FIXTURE = Path(__file__).parents[2] / "spark" / "sql" / "fixtures" / "qtt" / "runner_cases.json"


def _t(name: str) -> SqlType:
    (stmt,) = parse(f"CREATE STREAM X (C {name}) WITH (KAFKA_TOPIC='x', VALUE_FORMAT='JSON');")
    assert isinstance(stmt, sql_ast.CreateSource)
    return stmt.columns[0].type


def _source(key_format: Format, value_format: Format, key: str | None = "INT", values: tuple[str, ...] = ("STRING",),
            window: WindowSpec | None = None) -> SourceInfo:
    columns = ([Column("K", _t(key), Namespace.KEY)] if key else []) + [
        Column(f"V{i}", _t(t), Namespace.VALUE) for i, t in enumerate(values)]
    return SourceInfo(name="S", kind=SourceKind.STREAM, topic="t", key_format=key_format, value_format=value_format,
                      columns=tuple(columns), statement="", window=window)


def test_comments_are_stripped_outside_strings_only():
    text = '{"a": "x // not a comment", /* block */ "b": 1 // line\n}'
    assert strip_comments(text) == '{"a": "x // not a comment",  "b": 1 \n}'


def test_fixture_file_expands_formats_and_drops_disabled_cases():
    cases = load_file(FIXTURE)
    names = [c.name for c in cases]
    assert "runner_cases - registry formats run - AVRO" in names
    assert "runner_cases - registry formats run - PROTOBUF" in names
    assert not any("disabled" in n for n in names)
    avro = next(c for c in cases if c.format == "AVRO")
    assert avro.statements[0] == "CREATE STREAM S (ID INT KEY, V STRING, N BIGINT) WITH (kafka_topic='s', value_format='AVRO');"
    first = cases[0]
    assert first.inputs[1] == QttRecord("payments", "acc-2", {"cents": 250, "note": "rent"}, 2000)
    assert first.inputs[2].value is None
    assert first.inputs[3].value == {"CENTS": Decimal("101.0"), "NOTE": None}
    assert first.post_sources[0].name == "LARGE"
    assert first.post_sources[0].type == "stream"
    refused = next(c for c in cases if c.test_name == "unknown source is refused as expected")
    assert refused.expected_exception is not None
    assert refused.expected_exception.message == "NOWHERE does not exist"


def test_config_expansion_puts_each_value_in_the_config_property():
    cases = cases_of_test("f.json", {"name": "t", "config": ["true", "false"], "statements": ["X"],
                                     "properties": {"ksql.new.query.planner.enabled": "{CONFIG}", "other": "1"}})
    assert [c.properties["ksql.new.query.planner.enabled"] for c in cases] == ["true", "false"]
    assert cases[0].name == "f - t - ksql.new.query.planner.enabled=true"
    assert all(c.properties["other"] == "1" for c in cases)


def test_bad_files_and_tests_are_reported_with_their_names(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"tests": [ {"name": "x", "statements": "not a list"} ]}')
    with pytest.raises(QttFormatError, match=r"bad\.json: x"):
        load_file(bad)
    (tmp_path / "broken.json").write_text("{ not json")
    cases, unreadable = collect_cases(case_files(tmp_path))
    assert cases == []
    assert len(unreadable) == 2
    assert [p.name for p in case_files(tmp_path, "bad.json, broken.json")] == ["bad.json", "broken.json"]
    assert [p.name for p in case_files(tmp_path, "b*d.json")] == ["bad.json"]
    with pytest.raises(QttFormatError, match="needs \"type\" or \"message\""):
        cases_of_test("f.json", {"name": "t", "statements": [], "expectedException": {}})
    with pytest.raises(QttFormatError, match="\"topic\" and \"value\""):
        cases_of_test("f.json", {"name": "t", "statements": [], "inputs": [{"topic": "a"}]})


def test_windows_and_headers_are_read():
    (case,) = cases_of_test("f.json", {"name": "t", "statements": [], "outputs": [
        {"topic": "o", "key": 1, "value": {"C": 2}, "window": {"start": 0, "end": 100, "type": "time"}},
        {"topic": "o", "value": None, "headers": [{"KEY": "h", "VALUE": "IQ=="}]}]})
    assert case.outputs[0].window == Window(0, 100, "TIME")
    assert not case.outputs[1].has_key
    assert case.outputs[1].headers == (("h", "IQ=="),)


def test_static_families():
    cases = {c.test_name: c for c in load_file(FIXTURE)}
    assert static_family(cases["connector is out of scope"]) is CONNECTORS
    assert static_family(cases["test udf is out of scope"]) is UDF_PLUGINS
    # The registry formats run (the runner starts a Schema Registry): no family
    assert static_family(cases["registry formats run"]) is None
    assert not CONNECTORS.counts_toward_goal
    assert static_family(cases["filter and project passes"]) is None
    (inferring,) = cases_of_test("f.json", {"name": "t", "statements": [
        "CREATE STREAM S WITH (kafka_topic='s', value_format='AVRO');"]})
    assert static_family(inferring) is None
    assert registry_formats(inferring) == ["AVRO"]
    (several,) = cases_of_test("f.json", {"name": "t", "format": ["PROTOBUF_NOSR"], "statements": [
        "CREATE STREAM S (A INT) WITH (kafka_topic='s', key_format='JSON_SR', value_format='{FORMAT}');"]})
    assert registry_formats(several) == ["PROTOBUF_NOSR", "JSON_SR"]
    (old,) = cases_of_test("f.json", {"name": "t", "statements": ["X"], "versions": {"max": "5.5.0"}})
    assert static_family(old) is not None


def test_refusal_family_only_for_documented_unsupported_constructs():
    family = refusal_family("line 1:1: The ASSERT statement is not supported")
    assert family is not None
    assert family.name == "documented not supported: ASSERT statement"
    assert refusal_family("line 1:15: CREATE CONNECTOR is not supported") is not None
    assert refusal_family("NOWHERE does not exist.") is None
    assert refusal_family("Function 'X' is not supported for type BOOLEAN") is None


def test_topics_are_renamed_per_case():
    create, csas, csas_named = parse(
        "CREATE STREAM A (K INT KEY, V INT) WITH (kafka_topic='in', value_format='JSON');"
        "CREATE STREAM B AS SELECT * FROM A;"
        "CREATE STREAM C WITH (KAFKA_TOPIC='c_topic') AS SELECT * FROM A;")
    assert isinstance(renamed(create, "qtt9_"), sql_ast.CreateSource)
    assert renamed(create, "qtt9_").properties["KAFKA_TOPIC"] == "qtt9_in"  # type: ignore[attr-defined]
    assert renamed(csas, "qtt9_").properties["KAFKA_TOPIC"] == "qtt9_B"  # type: ignore[attr-defined]
    assert renamed(csas, "qtt9_", output_prefix="p-").properties["KAFKA_TOPIC"] == "qtt9_p-B"  # type: ignore[attr-defined]
    assert renamed(csas_named, "qtt9_").properties["KAFKA_TOPIC"] == "qtt9_c_topic"  # type: ignore[attr-defined]
    # The schema ids a case names are the ids its schemas got in the shared registry
    (by_id,) = parse("CREATE STREAM A WITH (kafka_topic='in', value_format='AVRO', value_schema_id=7, key_schema_id=3);")
    props = renamed(by_id, "qtt9_", {7: 41}).properties  # type: ignore[attr-defined]
    assert (props["VALUE_SCHEMA_ID"], props["KEY_SCHEMA_ID"]) == (41, 3)
    (case,) = cases_of_test("f.json", {"name": "t", "statements": [
        "CREATE STREAM A (K INT KEY) WITH (kafka_topic='in', value_format='JSON');",
        "CREATE STREAM P (K INT KEY) WITH (kafka_topic='made', partitions=3, value_format='JSON');",
        "CREATE STREAM B WITH (kafka_topic='out') AS SELECT * FROM A;"],
        "topics": [{"name": "declared", "partitions": 2}],
        "inputs": [{"topic": "other", "value": None}]})
    assert topics_to_create(case) == {"declared": 2, "in": 1, "other": 1}
    # a topic a CREATE gives PARTITIONS is that statement's, even when the inputs or ``topics``
    # (without partitions) name it (fk-join.json "Should allow partition count mismatch")
    (case,) = cases_of_test("f.json", {"name": "t", "statements": [
        "CREATE TABLE L (K INT PRIMARY KEY) WITH (kafka_topic='left', partitions=128, value_format='JSON');",
        "CREATE TABLE R (K INT PRIMARY KEY) WITH (kafka_topic='right', partitions=2, value_format='JSON');"],
        "topics": [{"name": "right", "keyFormat": "AVRO"}],
        "inputs": [{"topic": "left", "value": None}, {"topic": "right", "value": None}]})
    assert topics_to_create(case) == {}


def test_kafka_json_and_delimited_bytes():
    kafka = _source(Format.KAFKA, Format.KAFKA, "INT", ("BIGINT",))
    record = QttRecord("t", 5, {"V0": 9})
    assert encode_key(record, kafka) == struct.pack(">i", 5)
    assert encode_value(record, kafka) == struct.pack(">q", 9)
    assert decode_key(struct.pack(">i", 5), kafka) == (5, None)
    assert decode_value(struct.pack(">q", 9), kafka) == 9
    json_source = _source(Format.JSON, Format.JSON, "STRING", ("DOUBLE", "STRING"))
    odd = QttRecord("t", "k", {"v0": Decimal("1.50"), "V1": "x"})
    assert encode_key(odd, json_source) == b'"k"'
    assert encode_value(odd, json_source) == b'{"v0":1.50,"V1":"x"}'   # written as the test gives it
    delimited = _source(Format.KAFKA, Format.DELIMITED, "STRING", ("INT", "STRING"))
    assert encode_value(QttRecord("t", "k", "1,a"), delimited) == b"1,a"
    assert decode_value(b"1,a", delimited) == "1,a"
    assert encode_key(QttRecord("t", None, None, has_key=False), kafka) is None
    assert encode_value(QttRecord("t", 1, None), kafka) is None


def test_windowed_keys_as_kafka_streams_writes_them():
    tumbling = _source(Format.KAFKA, Format.JSON, "STRING", window=WindowSpec(WindowKind.TUMBLING, 1000))
    data = b"k" + struct.pack(">q", 3000)
    assert decode_key(data, tumbling) == ("k", Window(3000, 4000, "TIME"))
    session = _source(Format.KAFKA, Format.JSON, "STRING", window=WindowSpec(WindowKind.SESSION, 500))
    assert decode_key(b"k" + struct.pack(">qq", 900, 100), session) == ("k", Window(100, 900, "SESSION"))
    record = QttRecord("t", "k", None, window=Window(100, 900, "SESSION"))
    assert encode_key(record, session) == b"k" + struct.pack(">qq", 900, 100)


def test_values_match_numbers_by_value_and_objects_exactly():
    assert values_match({"A": Decimal("1.10"), "B": [1, None]}, {"A": 1.1, "B": [Decimal("1.0"), None]})
    assert not values_match({"A": 1}, {"A": 1, "B": None})
    assert not values_match({"A": "1"}, {"A": 1})
    assert not values_match(True, 1)
    assert not values_match([1, 2], [2, 1])


def test_compare_topic_says_where_and_what_differs():
    expected = [QttRecord("o", 1, {"N": 1}), QttRecord("o", 1, {"N": 2}, timestamp_ms=10)]
    good = [ActualRecord(1, {"N": 1}, 5), ActualRecord(1, {"N": 2}, 10)]
    assert compare_topic("o", expected, good) is None
    wrong_value = [ActualRecord(1, {"N": 1}, 5), ActualRecord(1, {"N": 3}, 10)]
    assert compare_topic("o", expected, wrong_value) == (
        'topic o, record 1: value differ: expected <1, {"N":2}> ts=10 but was <1, {"N":3}> ts=10')
    late = [ActualRecord(1, {"N": 1}, 5), ActualRecord(1, {"N": 2}, 99)]
    assert "timestamp differ" in (compare_topic("o", expected, late) or "")
    missing = compare_topic("o", expected, good[:1])
    assert missing == 'topic o: expected 2 records but was 1; first missing: <1, {"N":2}> ts=10'
    zero = [QttRecord("o", 1, {"N": 1}, timestamp_ms=0)]
    assert compare_topic("o", zero, [ActualRecord(1, {"N": 1}, 77)], check_zero_timestamps=False) is None


def test_a_topic_of_several_partitions_is_compared_in_the_interleaving_ksqldb_listed():
    """Kafka orders records within a partition only: read partition after partition, the records
    of a multi-partition sink are compared in the interleaving that follows the expected order
    (fk-join.json's PARTITIONS cases), each partition's own order kept."""
    expected = [QttRecord("o", k, {"N": k}, timestamp_ms=11) for k in (0, 1, 2)] + [QttRecord("o", 1, None)]
    p0 = [ActualRecord(0, {"N": 0}, 11, partition=0), ActualRecord(2, {"N": 2}, 11, partition=0)]
    p1 = [ActualRecord(1, {"N": 1}, 11, partition=1), ActualRecord(1, None, 12, partition=1)]
    assert compare_topic("o", expected, p0 + p1) is None
    assert compare_topic("o", expected, p1 + p0) is None
    # within one partition the order still counts: key 1's tombstone cannot come before its row
    swapped = [*p0, p1[1], p1[0]]
    assert "record 1: value/timestamp differ" in (compare_topic("o", expected, swapped) or "")
    # one partition: compared as read
    assert compare_topic("o", expected, [ActualRecord(r.key, r.value, r.timestamp_ms) for r in p0 + p1]) is not None


def test_out_of_scope_cases_need_no_environment():
    cases = [c for c in load_file(FIXTURE) if static_family(c) is not None]

    def no_environment():
        raise AssertionError("a statically out-of-scope case must not start Spark or a broker")

    results, not_run = run_cases(cases, no_environment)
    assert not_run == []
    assert len(results) == 2
    assert all(r.outcome is Outcome.OUT_OF_SCOPE for r in results)


GAP = Family("a runner gap", counts_toward_goal=True)


def test_report_counts_per_file_and_the_goal_ratio():
    results = [
        CaseResult("a.json", "a - 1", Outcome.PASS),
        CaseResult("a.json", "a - 2", Outcome.FAIL, "topic OUT, record 3: value differ: expected <1, 2> but was <1, 3>"),
        CaseResult("b.json", "b - 1", Outcome.OUT_OF_SCOPE, CONNECTORS.name, CONNECTORS),
        CaseResult("b.json", "b - 2", Outcome.OUT_OF_SCOPE, GAP.name, GAP, formats=("AVRO",)),
    ]
    per_file, total = tally(results)
    assert (per_file["a.json"].passed, per_file["a.json"].failed) == (1, 1)
    assert (total.passed, total.failed, total.out_of_scope, total.goal_denominator) == (1, 1, 2, 3)
    text = text_report(results)
    assert "TOTAL: 1 pass, 1 fail, 2 out of scope (4 cases; pass rate in scope 33.3%)" in text
    assert CONNECTORS.name in text
    assert failure_cause(results[1].detail) == "topic T, record N: value differ"
    assert json_report(results)["total"]["goalDenominator"] == 3
    assert "  AVRO: 0 pass, 0 fail, 1 out of scope" in text
    assert json_report(results)["registryFormats"]["AVRO"]["outOfScope"] == 1


def test_a_case_the_machine_kept_from_running_is_not_counted():
    """Spark's fixed 10 s wait for a query's Python process is a machine limit, not an engine
    result: such a FAIL is retried, then reported NOT_RUN outside the totals."""
    from oncestream.sql.conformance.command import is_infrastructure_failure

    machine = CaseResult("a.json", "a - 1", Outcome.FAIL, "query Q failed: Python worker failed to connect back.")
    engine = CaseResult("a.json", "a - 2", Outcome.FAIL, "query Q failed: DATATYPE_MISMATCH")
    assert is_infrastructure_failure(machine)
    assert not is_infrastructure_failure(engine)
    _per_file, total = tally([engine, CaseResult("a.json", "a - 1", Outcome.NOT_RUN, machine.detail)])
    assert (total.failed, total.not_run, total.total, total.goal_denominator) == (1, 1, 1, 1)
    assert total.line().endswith("1 not run (machine)")


def test_interleave_takes_cases_round_robin_from_the_files():
    from oncestream.sql.conformance.command import interleaved

    cases = (cases_of_test("a.json", {"name": "1", "statements": []}) + cases_of_test("a.json", {"name": "2", "statements": []})
             + cases_of_test("b.json", {"name": "1", "statements": []}))
    assert [c.name for c in interleaved(cases)] == ["a - 1", "b - 1", "a - 2"]


def test_a_query_with_a_watermark_is_done_only_after_a_batch_without_input():
    """Spark writes what the watermark closes (EMIT FINAL windows, sessions) in a batch without
    data after the last one with data: a windowed query's case waits for such a report."""
    from types import SimpleNamespace

    from oncestream.sql.conformance.case_runner import _consumed

    source = SimpleNamespace(topic="in")
    query: Any = SimpleNamespace(analyzed=SimpleNamespace(sources={"S": source}))
    stable = {("in", 0): 3}
    at_end = {"sources": [{"endOffset": '{"in":{"0":3}}'}]}
    assert _consumed([{**at_end, "numInputRows": 3}], stable, query)
    assert not _consumed([{"sources": [{"endOffset": {"in": {"0": 2}}}], "numInputRows": 2}], stable, query)
    windowed = {**at_end, "eventTime": {"watermark": "1970-01-01T00:00:00.002Z"}}
    assert not _consumed([{**windowed, "numInputRows": 3}], stable, query)
    assert _consumed([{**windowed, "numInputRows": 3}, {**windowed, "numInputRows": 0}], stable, query)


def test_json_results_read_back_as_written(tmp_path):
    """``--resume`` goes on from a ``--json`` file: what it holds reads back whole, families with
    their goal rule and each result's engine revision included."""
    from oncestream.sql.conformance.report import read_json, write_json

    results = [
        CaseResult("a.json", "a - 1", Outcome.PASS, seconds=1.25, engine="abc123"),
        CaseResult("a.json", "a - 2", Outcome.FAIL, "topic OUT, record 0: value differ", engine="abc123+dirty"),
        CaseResult("b.json", "b - 1", Outcome.OUT_OF_SCOPE, GAP.name, GAP, formats=("AVRO",), engine="abc123"),
        CaseResult("b.json", "b - 2", Outcome.OUT_OF_SCOPE, CONNECTORS.name, CONNECTORS),
    ]
    path = tmp_path / "r.json"
    write_json(str(path), results)
    assert read_json(str(path)) == results
    assert json_report(results)["engines"] == ["abc123", "abc123+dirty"]
    assert not (tmp_path / "r.json.tmp").exists()


def test_resume_runs_only_the_cases_the_results_file_lacks(tmp_path, capsys, monkeypatch):
    """A run in parts: the cases the file already holds are kept (none is run again, so no
    environment starts), a NOT_RUN one is run again, and the file is rewritten with all of them."""
    import argparse

    from oncestream.sql.conformance.command import cmd_sql_conformance
    from oncestream.sql.conformance.report import read_json, write_json

    all_cases = load_file(FIXTURE)
    in_scope = [c for c in all_cases if static_family(c) is None]
    held = [CaseResult(c.file, c.name, Outcome.PASS, engine="earlier") for c in in_scope]
    path = tmp_path / "r.json"
    write_json(str(path), held)
    args = argparse.Namespace(path=str(FIXTURE), files="*.json", cases=None, interleave=False, resume=True,
                              json_out=str(path), verbose=False, jobs=1, budget_s=None, bootstrap_server=None,
                              spark_master="local[1]", schema_registry_url=None)
    assert cmd_sql_conformance(args) == 0
    out = capsys.readouterr().out
    assert f"resuming: {len(held)} results kept from {path}, {len(all_cases) - len(in_scope)} cases to run" in out
    after = read_json(str(path))
    assert after[:len(held)] == held
    assert {r.outcome for r in after[len(held):]} == {Outcome.OUT_OF_SCOPE}
    assert len(after) == len(all_cases)
    assert "measured on 2 engine revisions: " in out

    # a case the machine kept from running is not a result: --resume runs it again
    write_json(str(path), [dataclasses.replace(held[0], outcome=Outcome.NOT_RUN), *held[1:]])
    import oncestream.sql.conformance.command as command

    asked: list[str] = []
    original = command.run_cases

    def recording(cases: Any, *a: Any, **k: Any) -> Any:
        asked.extend(c.name for c in cases if static_family(c) is None)
        return original([c for c in cases if static_family(c) is not None], *a, **k)

    monkeypatch.setattr(command, "run_cases", recording)
    cmd_sql_conformance(args)
    assert asked == [held[0].name]


def test_inputs_of_a_query_reading_several_topics_are_produced_in_arrival_runs():
    """ksqlDB's test driver processes a case's inputs in the listed order across topics; a query
    reading one offset per trigger from each of two topics would take the first of each in one
    batch. Paced, the inputs go in runs of consecutive records of one topic (joins.json "stream
    stream right join": the left row at 13 s comes before the right row at 15 s)."""
    inputs = [QttRecord("left", 0, {}, 0), QttRecord("right", 0, {}, 10000), QttRecord("left", 10, {}, 11000),
              QttRecord("left", 0, {}, 13000), QttRecord("right", 0, {}, 15000)]
    runs = arrival_runs(inputs, paced=True)
    assert [[r.timestamp_ms for r in run] for run in runs] == [[0], [10000], [11000, 13000], [15000]]
    assert arrival_runs(inputs, paced=False) == [inputs]
    # no inputs (INSERT VALUES only): one empty run, still followed by the wait for the queries
    assert arrival_runs([], paced=True) == [[]]
