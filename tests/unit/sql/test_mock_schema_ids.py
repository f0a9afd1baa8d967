"""The schema ids ksqlDB's test harness gives a case's schemas (a fresh mock registry per case,
topics in java.util.HashMap order): elements.json's "validate ... schema id in csas" cases name
them, e.g. VALUE_SCHEMA_ID=2 for the OUTPUT topic's schema after the input's."""

from __future__ import annotations

from oncestream.sql.conformance.case_runner import case_topic_names, declared_schema_sides
from oncestream.sql.conformance.mock_schema_ids import (
    SchemaSide,
    harness_schema_order,
    java_hash_map_order,
    java_string_hash,
)
from oncestream.sql.conformance.qtt_format import QttCase


def test_java_string_hash_is_javas():
    # "hello".hashCode() == 99162322, "OUTPUT".hashCode() == -1952183039
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("OUTPUT") == -1952183039 & 0xFFFFFFFF
    assert java_string_hash("") == 0


def test_hash_map_order_is_by_bucket_then_insertion():
    # "input" falls in bucket 1 of 16, "OUTPUT" in bucket 5: input first whatever the insertion order
    assert java_hash_map_order(["OUTPUT", "input"]) == ["input", "OUTPUT"]
    # "Aa" and "BB" share a hash: insertion order decides
    assert java_hash_map_order(["BB", "Aa"]) == ["BB", "Aa"]
    assert java_hash_map_order(["Aa", "BB"]) == ["Aa", "BB"]


def test_a_table_more_than_three_quarters_full_doubles():
    names = [f"t{i}" for i in range(13)]
    order = java_hash_map_order(names)
    buckets = [(java_string_hash(n) ^ (java_string_hash(n) >> 16)) & 31 for n in order]
    assert buckets == sorted(buckets)


def _case(statements, topics=(), **kw) -> QttCase:
    return QttCase(file="elements.json", test_name="t", statements=tuple(statements), topics=tuple(topics), **kw)


def test_elements_case_ids_follow_the_harness_order():
    # elements.json "validate extra optional field with schema schema id in csas OK - JSON_SR":
    # key_schema_id=3 and value_schema_id=4 name the OUTPUT topic's schemas, after input's two
    case = _case(["CREATE STREAM INPUT (`ROWKEY` struct<`id` BIGINT> KEY, `c1` BIGINT) WITH (key_format='avro', "
                  "kafka_topic='input', value_format='avro', partitions=1);",
                  "CREATE STREAM OUTPUT WITH(key_schema_id=3, key_format='json_sr', value_format='json_sr', "
                  "value_schema_id=4, PARTITIONS = 4) as SELECT * FROM input;"],
                 topics=[{"name": "OUTPUT", "valueSchema": {"type": "object"}, "keySchema": {"type": "object"}}])
    declared = declared_schema_sides(case)
    assert declared == [SchemaSide("input", True), SchemaSide("input", False)]
    order = harness_schema_order([SchemaSide("OUTPUT", True), SchemaSide("OUTPUT", False)], declared,
                                 case_topic_names(case))
    assert order == [SchemaSide("input", True), SchemaSide("input", False),
                     SchemaSide("OUTPUT", True), SchemaSide("OUTPUT", False)]


def test_a_kafka_format_key_declares_no_schema():
    case = _case(["CREATE STREAM INPUT (`id` INT KEY, `c1` INT) WITH (kafka_topic='input', value_format='avro');"])
    assert declared_schema_sides(case) == [SchemaSide("input", False)]
