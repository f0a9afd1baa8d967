"""ksqlDB's /ksql response entities, key by key as its REST model (io.confluent.ksql.rest.entity)
writes them: every entity carries "@type", "statementText" and "warnings"."""

from __future__ import annotations

import json

from oncestream.sql.engine.two_phase_check import refusal_text
from oncestream.sql.language import sql_ast
from oncestream.sql.language.analyzer import analyze_query
from oncestream.sql.language.parser import parse
from oncestream.sql.server import entities
from oncestream.sql.server.metastore import Metastore
from tests.support.narrow import of_type, present

SETUP = """
CREATE STREAM orders (id INT KEY, userid STRING, amount DECIMAL(4, 2), tags ARRAY<STRING>,
                      address STRUCT<street STRING>, attrs MAP<STRING, BIGINT>, ts BIGINT)
  WITH (kafka_topic='orders', value_format='json', timestamp='ts');
CREATE TABLE users (userid STRING PRIMARY KEY, name STRING) WITH (kafka_topic='users', value_format='json');
CREATE STREAM big AS SELECT id, userid FROM orders WHERE id > 10;
CREATE TABLE counts AS SELECT userid, COUNT(*) AS n FROM orders WINDOW TUMBLING (SIZE 1 MINUTE) GROUP BY userid;
"""


def metastore() -> Metastore:
    ms = Metastore()
    for offset, s in enumerate(parse(SETUP)):
        ms.apply(ms.validate(s, {}, {"orders": 3, "users": 1}), offset)
    return ms


def common(entity: dict, kind: str, text: str) -> None:
    assert entity["@type"] == kind
    assert entity["statementText"] == text
    assert entity["warnings"] == []
    json.dumps(entity)   # JSON-ready


def test_streams_list() -> None:
    e = entities.streams(metastore(), "SHOW STREAMS;")
    common(e, "streams", "SHOW STREAMS;")
    assert e["streams"] == [
        {"type": "STREAM", "name": "BIG", "topic": "BIG", "keyFormat": "KAFKA", "valueFormat": "JSON", "isWindowed": False},
        {"type": "STREAM", "name": "ORDERS", "topic": "orders", "keyFormat": "KAFKA", "valueFormat": "JSON",
         "isWindowed": False},
    ]


def test_tables_list_marks_windowed_tables() -> None:
    e = entities.tables(metastore(), "SHOW TABLES;")
    common(e, "tables", "SHOW TABLES;")
    assert [(t["name"], t["isWindowed"], t["type"]) for t in e["tables"]] == [("COUNTS", True, "TABLE"),
                                                                               ("USERS", False, "TABLE")]
    assert set(e["tables"][0]) == {"type", "name", "topic", "keyFormat", "valueFormat", "isWindowed"}


def test_queries_list_with_runtime_state_from_the_caller() -> None:
    e = entities.queries(metastore(), "SHOW QUERIES;", states={"CTAS_COUNTS_3": "ERROR"})
    common(e, "queries", "SHOW QUERIES;")
    q0, q1 = e["queries"]
    assert q0 == {"queryString": "CREATE STREAM big AS SELECT id, userid FROM orders WHERE id > 10;", "sinks": ["BIG"],
                  "sinkKafkaTopics": ["BIG"], "id": "CSAS_BIG_2", "statusCount": {"RUNNING": 1},
                  "queryType": "PERSISTENT", "state": "RUNNING"}
    assert q1["id"] == "CTAS_COUNTS_3"
    assert q1["state"] == "ERROR"
    assert q1["statusCount"] == {"ERROR": 1}


def test_source_description_fields_and_keys() -> None:
    ms = metastore()
    e = entities.source_description_entity(ms, present(ms.source("ORDERS"), "source ORDERS"), "DESCRIBE orders;")
    common(e, "sourceDescription", "DESCRIBE orders;")
    d = e["sourceDescription"]
    assert list(d) == ["name", "windowType", "readQueries", "writeQueries", "fields", "type", "timestamp", "statistics",
                       "errorStats", "extended", "keyFormat", "valueFormat", "topic", "partitions", "replication",
                       "statement", "queryOffsetSummaries", "sourceConstraints", "clusterStatistics", "clusterErrorStats"]
    assert d["name"] == "ORDERS"
    assert d["type"] == "STREAM"
    assert d["windowType"] is None
    assert d["timestamp"] == "TS"
    assert d["extended"] is False
    assert d["partitions"] == 0
    assert d["replication"] == 0
    assert [q["id"] for q in d["readQueries"]] == ["CSAS_BIG_2", "CTAS_COUNTS_3"]
    assert d["writeQueries"] == []
    assert d["sourceConstraints"] == ["BIG", "COUNTS"]
    f = {x["name"]: x for x in d["fields"]}
    assert f["ID"] == {"name": "ID", "schema": {"type": "INTEGER", "fields": None, "memberSchema": None}, "type": "KEY"}
    assert f["USERID"] == {"name": "USERID", "schema": {"type": "STRING", "fields": None, "memberSchema": None}}
    assert f["AMOUNT"]["schema"] == {"type": "DECIMAL", "fields": None, "memberSchema": None,
                                     "parameters": {"precision": 4, "scale": 2}}
    assert f["TAGS"]["schema"]["memberSchema"] == {"type": "STRING", "fields": None, "memberSchema": None}
    assert f["ADDRESS"]["schema"]["fields"] == [{"name": "STREET", "schema": {"type": "STRING", "fields": None,
                                                                              "memberSchema": None}}]
    assert f["ATTRS"]["schema"] == {"type": "MAP", "fields": None,
                                    "memberSchema": {"type": "BIGINT", "fields": None, "memberSchema": None}}


def test_describe_extended_reports_partitions_and_replication() -> None:
    ms = metastore()
    d = entities.source_description(ms, present(ms.source("COUNTS"), "source COUNTS"), extended=True)
    assert d["extended"] is True
    assert d["partitions"] == 3
    assert d["replication"] == 1
    assert d["windowType"] == "TUMBLING"
    assert [q["id"] for q in d["writeQueries"]] == ["CTAS_COUNTS_3"]


def test_source_descriptions_list() -> None:
    e = entities.source_descriptions(metastore(), "DESCRIBE STREAMS;", kind="STREAM")
    common(e, "source_descriptions", "DESCRIBE STREAMS;")
    assert [d["name"] for d in e["sourceDescriptions"]] == ["BIG", "ORDERS"]


def test_query_description() -> None:
    ms = metastore()
    q = present(ms.query("CSAS_BIG_2"), "query CSAS_BIG_2")
    e = entities.query_description_entity(ms, q, "EXPLAIN CSAS_BIG_2;",
                                          host_states={"127.0.0.1:8088": "RUNNING", "127.0.0.1:8089": "NOT_RUNNING"})
    common(e, "queryDescription", "EXPLAIN CSAS_BIG_2;")
    d = e["queryDescription"]
    assert {"id", "statementText", "windowType", "fields", "sources", "sinks", "topology", "executionPlan",
            "overriddenProperties", "ksqlHostQueryStatus", "queryType", "state"} <= set(d)
    assert d["id"] == "CSAS_BIG_2"
    assert d["sources"] == ["ORDERS"]
    assert d["sinks"] == ["BIG"]
    assert d["ksqlHostQueryStatus"] == {"127.0.0.1:8088": "RUNNING", "127.0.0.1:8089": "NOT_RUNNING"}
    assert d["state"] == "RUNNING"
    assert d["queryType"] == "PERSISTENT"
    assert [f["name"] for f in d["fields"]] == ["ID", "USERID"]
    assert d["fields"][0]["type"] == "KEY"


def test_current_status() -> None:
    e = entities.current_status("CREATE STREAM x AS SELECT * FROM y;", "stream/`X`/create", "SUCCESS",
                                "Created query with ID CSAS_X_4", 4, "CSAS_X_4")
    assert e == {"@type": "currentStatus", "statementText": "CREATE STREAM x AS SELECT * FROM y;",
                 "commandId": "stream/`X`/create",
                 "commandStatus": {"status": "SUCCESS", "message": "Created query with ID CSAS_X_4", "queryId": "CSAS_X_4"},
                 "commandSequenceNumber": 4, "warnings": []}


def test_properties_list() -> None:
    e = entities.properties({"ksql.service.id": "svc", "ksql.streams.auto.offset.reset": "latest",
                             "auto.offset.reset": "latest"},
                            {"ksql.streams.auto.offset.reset": "earliest"}, "SHOW PROPERTIES;",
                            defaults={"ksql.service.id": "svc"})
    common(e, "properties", "SHOW PROPERTIES;")
    props = {p["name"]: p for p in e["properties"]}
    # ksqlDB: the level comes from the exact name, editability from the name without its prefix
    assert props["ksql.streams.auto.offset.reset"] == {"name": "ksql.streams.auto.offset.reset", "scope": "KSQL",
                                                       "value": "earliest", "editable": True, "level": "SERVER"}
    assert props["ksql.service.id"]["level"] == "SERVER"
    assert not props["ksql.service.id"]["editable"]
    assert props["auto.offset.reset"]["level"] == "QUERY"
    assert props["auto.offset.reset"]["editable"]
    assert e["overwrittenProperties"] == ["ksql.streams.auto.offset.reset"]
    assert e["defaultProperties"] == ["ksql.service.id"]


def test_kafka_topics_hides_internal_topics() -> None:
    e = entities.kafka_topics({"orders": [1, 1, 1], "_confluent-ksql-x_command_topic": [1]}, "SHOW TOPICS;")
    common(e, "kafka_topics", "SHOW TOPICS;")
    assert e["topics"] == [{"name": "orders", "replicaInfo": [1, 1, 1]}]


def test_functions_entities() -> None:
    e = entities.function_names("SHOW FUNCTIONS;")
    common(e, "function_names", "SHOW FUNCTIONS;")
    by_name = {f["name"]: f for f in e["functions"]}
    assert by_name["UCASE"] == {"name": "UCASE", "type": "SCALAR", "category": "STRING"}
    assert by_name["COUNT"]["type"] == "AGGREGATE"
    d = entities.describe_function("ucase", "DESCRIBE FUNCTION ucase;")
    assert d is not None
    assert d["name"] == "UCASE"
    assert d["type"] == "SCALAR"
    assert entities.describe_function("nope", "") is None


def test_explain_of_a_statement_describes_a_query_that_is_not_running() -> None:
    ms = metastore()
    (stmt,) = parse("SELECT id, userid FROM orders EMIT CHANGES;")
    a = analyze_query(of_type(stmt, sql_ast.QueryStatement).query, ms.source_map())
    e = entities.transient_query_description("EXPLAIN SELECT id, userid FROM orders EMIT CHANGES;", stmt.text, a.columns,
                                             ["ORDERS"])
    common(e, "queryDescription", "EXPLAIN SELECT id, userid FROM orders EMIT CHANGES;")
    d = e["queryDescription"]
    assert d["sources"] == ["ORDERS"]
    assert d["sinks"] == []
    assert d["ksqlHostQueryStatus"] == {}
    assert [f["name"] for f in d["fields"]] == ["ID", "USERID"]


def test_command_status_is_the_status_endpoint_body() -> None:
    assert entities.command_status("ERROR", "boom") == {"status": "ERROR", "message": "boom", "queryId": None}


def test_query_error_has_ksqldb_shape_and_classifies_what_the_user_fixes() -> None:
    """ksqlDB's QueryError: {"type", "errorMessage", "timestamp"}; authorization failures and a
    broker refusing two-phase commit are USER errors (ksqlDB's AuthorizationClassifier), the rest
    UNKNOWN."""
    refused = entities.query_error(refusal_text("b:9092", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED: no"), 7)
    assert refused == {"type": "USER", "errorMessage": refusal_text("b:9092", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED: no"),
                       "timestamp": 7}
    assert entities.query_error("KafkaError{code=TOPIC_AUTHORIZATION_FAILED}", 1)["type"] == "USER"
    assert entities.query_error("java.lang.OutOfMemoryError: Java heap space", 1)["type"] == "UNKNOWN"
    assert json.loads(json.dumps(refused)) == refused
