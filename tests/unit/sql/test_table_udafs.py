"""ksqlDB's undoable aggregates (TableUdaf) and the two steps of a table aggregation, without
Spark: expected values are ksqlDB's (its UDAF implementations and query-validation cases)."""

from __future__ import annotations

import json
import math
import statistics
from decimal import Decimal

import pytest

from oncestream.sql.engine.compile.table_udafs import (
    ChangeRow,
    Delta,
    TableUdafError,
    changelog_step,
    group_step,
    table_udaf,
    unsupported_message,
)
from oncestream.sql.language.analyzer_aggregates import TABLE_AGGREGATES
from oncestream.sql.language.functions_collections import HISTOGRAM_LIMIT


def _parse(text: str):
    return json.loads(text, parse_float=Decimal)


def _run(udaf, ops):
    acc = udaf.initial()
    for sign, args in ops:
        acc = udaf.add(acc, args) if sign > 0 else udaf.undo(acc, args)
    return udaf.result(acc)


def test_count_star_counts_rows_and_count_of_a_column_skips_nulls():
    assert _run(table_udaf("COUNT", [], star=True), [(1, []), (1, []), (-1, [])]) == 1
    assert _run(table_udaf("COUNT", ["INTEGER"]), [(1, [None]), (1, [3]), (-1, [None])]) == 1
    assert _run(table_udaf("COUNT", ["INTEGER"]), [(1, [3]), (-1, [3])]) == 0


def test_sum_wraps_like_java_and_keeps_decimals_exact():
    assert _run(table_udaf("SUM", ["INTEGER"]), [(1, [2**31 - 1]), (1, [1])]) == -(2**31)
    assert _run(table_udaf("SUM", ["BIGINT"]), [(1, [5]), (1, [None]), (-1, [2])]) == 3
    assert _run(table_udaf("SUM", ["DECIMAL"]), [(1, [Decimal("0.1")]), (1, [Decimal("0.2")])]) == "0.3"
    assert _run(table_udaf("SUM", ["DOUBLE"]), [(1, [Decimal("1.5")]), (-1, [Decimal("0.5")])]) == 1.0
    with pytest.raises(TableUdafError):
        table_udaf("SUM", ["STRING"])


def test_avg_is_zero_without_values_and_undoes():
    avg = table_udaf("AVG", ["INTEGER"])
    assert _run(avg, []) == 0.0
    assert _run(avg, [(1, [1]), (1, [4]), (1, [None])]) == 2.5
    assert _run(avg, [(1, [1]), (1, [4]), (-1, [1])]) == 4.0


def test_collect_list_keeps_nulls_and_undo_removes_the_last_occurrence():
    cl = table_udaf("COLLECT_LIST", ["STRING"])
    assert _run(cl, [(1, ["a"]), (1, [None]), (1, ["b"]), (1, ["a"]), (-1, ["a"])]) == ["a", None, "b"]
    assert _run(cl, [(1, ["a"]), (-1, ["zzz"])]) == ["a"]


def test_stddev_sample_adds_and_undoes():
    # ksqlDB's standarddeviation.json "stddev_sample int": 0, 10, 7, 6 -> 4.193248541803041; its
    # "stddev_samp int" gives the variance of the same values (StandardDeviationSampUdaf's quirk)
    values = [(1, [0]), (1, [10]), (1, [7]), (1, [6])]
    assert _run(table_udaf("STDDEV_SAMPLE", ["INTEGER"]), values) == 4.193248541803041
    assert _run(table_udaf("STDDEV_SAMP", ["INTEGER"]), values) == 17.583333333333332
    assert _run(table_udaf("STDDEV_SAMP", ["INTEGER"]), values[:3]) == 26.333333333333332
    # undoing the last value gives the value before it (0, 10, 7 -> 5.131601439446884)
    assert _run(table_udaf("STDDEV_SAMPLE", ["INTEGER"]), [*values, (-1, [6])]) == pytest.approx(5.131601439446884)
    assert _run(table_udaf("STDDEV_SAMPLE", ["INTEGER"]), [(1, [3])]) == 0.0


def test_correlation_adds_and_undoes_pairs():
    corr = table_udaf("CORRELATION", ["DOUBLE", "DOUBLE"])
    pairs = [(1, [1.0, 2.0]), (1, [2.0, 4.0]), (1, [3.0, 6.5]), (1, [None, 1.0])]
    pearson = statistics.correlation([1.0, 2.0, 3.0], [2.0, 4.0, 6.5])
    assert _run(corr, pairs) == pytest.approx(pearson)
    assert _run(corr, [*pairs, (1, [10.0, -3.0]), (-1, [10.0, -3.0])]) == pytest.approx(pearson)
    assert math.isnan(_run(corr, []))


def test_sum_list_adds_and_undoes_lists_skipping_nulls_and_wraps_like_java():
    # sum.json "sum list of ints into a single int" and its table form
    ints = table_udaf("SUM_LIST", ["ARRAY<INTEGER>"])
    assert _run(ints, [(1, [[1, 1]]), (1, [[2, 2]]), (1, [[100, 100, None]]), (1, [None])]) == 206
    assert _run(ints, [(1, [[1, 1]]), (1, [[2, 2]]), (-1, [[1, 1]])]) == 4
    assert _run(ints, [(1, [[2**31 - 1, 1]])]) == -(2**31)
    assert _run(table_udaf("SUM_LIST", ["ARRAY<BIGINT>"]), [(1, [[2**31 - 1, 1]])]) == 2**31
    assert _run(table_udaf("SUM_LIST", ["ARRAY<DOUBLE>"]), [(1, [[Decimal("1.5"), None]]), (1, [[Decimal("2.0")]])]) == 3.5
    assert _run(ints, []) == 0


def test_histogram_counts_values_and_drops_a_value_counted_down_to_zero():
    # histogram.json "histogram on a table": bob moves from east to west, then is deleted
    hist = table_udaf("HISTOGRAM", ["STRING"])
    assert _run(hist, [(1, ["alice"]), (1, ["bob"]), (1, ["bob"]), (1, [None])]) == {"alice": 1, "bob": 2}
    assert _run(hist, [(1, ["alice"]), (1, ["bob"]), (-1, ["bob"])]) == {"alice": 1}
    assert _run(hist, [(1, ["alice"]), (-1, ["zzz"])]) == {"alice": 1}


def test_histogram_ignores_new_values_beyond_its_limit():
    many = [(1, [f"v{i}"]) for i in range(HISTOGRAM_LIMIT)]
    result = _run(table_udaf("HISTOGRAM", ["STRING"]), [*many, (1, ["late"]), (1, ["v0"])])
    assert len(result) == HISTOGRAM_LIMIT
    assert "late" not in result
    assert result["v0"] == 2


def test_attr_is_the_single_value_left_and_null_counts_as_a_value():
    # attr.json "table attr with tombstones", as the group's rows come and go
    attr = table_udaf("ATTR", ["STRING"])
    ops = [(1, ["1"]), (1, ["1"]), (-1, ["1"])]
    assert _run(attr, ops) == "1"
    ops += [(-1, ["1"])]
    assert _run(attr, ops) is None                     # no value left
    ops += [(1, ["2"])]
    assert _run(attr, ops) == "2"
    ops += [(1, ["3"])]
    assert _run(attr, ops) is None                     # two values
    ops += [(-1, ["3"])]
    assert _run(attr, ops) == "2"
    assert _run(attr, [(1, ["2"]), (1, [None])]) is None
    assert _run(attr, [(-1, ["2"]), (1, ["2"])]) == "2"      # a count never goes below zero
    assert _run(table_udaf("ATTR", ["DECIMAL"]), [(1, [Decimal("1.10")]), (1, [Decimal("1.10")])]) == "1.10"


def test_every_aggregate_the_analyzer_lets_aggregate_a_table_has_an_undoable_form():
    sample_types = {"SUM_LIST": ["ARRAY<INTEGER>"], "CORRELATION": ["DOUBLE", "DOUBLE"]}
    for name in TABLE_AGGREGATES:
        udaf = table_udaf(name, sample_types.get(name, ["INTEGER"]))
        assert udaf.name == name


def test_functions_ksqldb_refuses_on_tables_get_its_message():
    with pytest.raises(TableUdafError, match="The aggregation function MIN cannot be applied to a table source"):
        table_udaf("MIN", ["INTEGER"])
    assert unsupported_message(["LATEST_BY_OFFSET", "MIN", "MAX"]) == (
        "The aggregation functions LATEST_BY_OFFSET, MIN and MAX cannot be applied to a table source, "
        "only to a stream source.")


def test_changelog_step_retracts_and_adds_for_every_record_in_offset_order():
    old = ('{"G":"east"}', '{"a0":1}')
    rows = [ChangeRow(0, 7, True, '{"G":"west"}', '{"a0":2}'), ChangeRow(0, 5, True, '{"G":"north"}', '{"a0":3}')]
    deltas, kept = changelog_step(rows, old)
    # north is passed through within the batch: it is touched (and so written) too, as in ksqlDB
    assert deltas == [Delta('{"G":"east"}', '{"a0":1}', -1, 0, 5, 0), Delta('{"G":"north"}', '{"a0":3}', 1, 0, 5, 1),
                      Delta('{"G":"north"}', '{"a0":3}', -1, 0, 7, 0), Delta('{"G":"west"}', '{"a0":2}', 1, 0, 7, 1)]
    assert kept == ('{"G":"west"}', '{"a0":2}')


def test_changelog_step_tombstones_null_groups_and_rows_failing_where_only_retract():
    old = ('{"G":"east"}', '{"a0":1}')
    for row in (ChangeRow(0, 9, False, None, None), ChangeRow(0, 9, True, None, '{"a0":1}'),
                ChangeRow(0, 9, False, '{"G":"east"}', '{"a0":1}')):
        deltas, kept = changelog_step([row], old)
        assert deltas == [Delta('{"G":"east"}', '{"a0":1}', -1, 0, 9, 0)]
        assert kept is None
    assert changelog_step([ChangeRow(0, 1, False, None, None)], None) == ([], None)


def test_group_step_applies_deltas_in_record_order_and_keeps_state_at_zero():
    udafs = [table_udaf("COUNT", [], star=True), table_udaf("SUM", ["INTEGER"]), table_udaf("COLLECT_LIST", ["INTEGER"])]
    slices = [[], ["a0"], ["a0"]]
    g = '{"G":"x"}'
    adds = [Delta(g, '{"a0":5}', 1, 0, 2, 1), Delta(g, '{"a0":7}', 1, 0, 1, 1)]
    results, accs = group_step(adds, None, udafs, slices, _parse)
    assert results == [2, 12, [7, 5]]
    # retracting both: ksqlDB writes the initial values (COUNT 0), not a tombstone
    retracts = [Delta(g, '{"a0":5}', -1, 0, 3, 0), Delta(g, '{"a0":7}', -1, 0, 4, 0)]
    results, accs = group_step(retracts, accs, udafs, slices, _parse)
    assert results == [0, 0, []]
    assert json.loads(json.dumps(accs)) == accs


def test_group_results_are_written_in_the_order_of_the_changes_that_made_them():
    """A record that moves a row from group a to group b changes both: ksqlDB writes a's
    retraction before b's addition, and each change after the ones before it. transformWithState
    emits groups in key order; in_change_order puts a partition's results back in change order."""
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from oncestream.sql.engine.compile.table_state import RESULT_SCHEMA, in_change_order

    assert isinstance(RESULT_SCHEMA, StructType)
    rows = [  # (group, partition, offset, seq): b was added by offset 7, a retracted by it
        ("b", 0, 7, 1), ("a", 0, 7, 0), ("c", 0, 3, 1), ("d", 1, 0, 1),
    ]
    schema = pa.schema([("__G", pa.string()), ("__R", pa.string()), ("__T", pa.int64()), ("__P", pa.int64()),
                        ("__O", pa.int64()), ("__SEQ", pa.int64())])
    batches = [pa.RecordBatch.from_pylist([{"__G": g, "__R": "{}", "__T": 0, "__P": p, "__O": o, "__SEQ": s}],
                                          schema=schema) for g, p, o, s in rows]
    ordered = [g for batch in in_change_order(iter(batches)) for g in batch.column("__G").to_pylist()]
    assert ordered == ["c", "a", "b", "d"]
    assert list(in_change_order(iter([]))) == []
