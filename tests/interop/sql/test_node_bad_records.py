"""Bad records through a real node (issue 25): a JSON stream's topic gets records confluent-kafka
produces with a value that is not JSON, a field of another type and a key that is not JSON between
good ones. A persistent query (CSAS) writes the good ones exactly once and stays RUNNING, a push
query over the stream returns the good ones, and ``SELECT * FROM KSQL_PROCESSING_LOG EMIT
CHANGES`` (the stream the node creates with ``ksql.logging.processing.stream.auto.create``) shows
ksqlDB's deserialization-error entries for the bad ones, keys and values. The per-format cases
(DELIMITED, KAFKA, AVRO, JSON_SR, PROTOBUF) are tests/spark/sql/test_golden_bad_records.py's."""

from __future__ import annotations

import base64
import json
import uuid
import warnings
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support.brokers import NO_INITIAL_REBALANCE_DELAY
from tests.support.cluster_kind import BrokerUnderTest
from tests.support.sql_servers import SqlServerProcess, running_node, wait_until, wait_until_running

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # ksql.utils imports telnetlib
    from ksql import KSQLAPI

pytestmark = [pytest.mark.interop, pytest.mark.spark,
              pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")]

EARLIEST = {"ksql.streams.auto.offset.reset": "earliest"}
PROCESSING_LOG = {"ksql.logging.processing.topic.auto.create": "true",
                  "ksql.logging.processing.stream.auto.create": "true",
                  "ksql.logging.processing.rows.include": "true"}
BAD_VALUE, BAD_TYPE, BAD_KEY = b"not json", b'{"ID": "one", "NAME": "x"}', b"{oops"


@pytest.fixture(scope="module")
def node(module_our_broker_factory: Callable[..., BrokerUnderTest],
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerUnderTest, SqlServerProcess]]:
    """The broker under test (our single broker or a cluster) with KIP-939 two-phase commit (the
    exactly-once sink needs it) and a node with the processing-log topic and stream."""
    broker = module_our_broker_factory({**NO_INITIAL_REBALANCE_DELAY, "transaction.two.phase.commit.enable": "true"})
    with running_node(broker, tmp_path_factory.mktemp("bad-records"), config=PROCESSING_LOG,
                      name="bad-records-node") as server:
        yield broker, server


def _read_committed(bootstrap: str, topic: str, count: int) -> list[tuple[bytes | None, bytes | None]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    out: list[tuple[bytes | None, bytes | None]] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])

        def enough() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                out.append((msg.key(), msg.value()))
            return len(out) >= count and msg is None

        wait_until(enough, f"{count} records in {topic}", timeout_s=300)
    finally:
        consumer.close()
    return out


def test_bad_records_go_to_the_processing_log_and_queries_keep_running(node) -> None:
    broker, server = node
    assert server.url is not None
    name = f"S_{uuid.uuid4().hex[:6].upper()}"
    topic, out = name.lower(), f"{name.lower()}_out"
    server.ok(f"CREATE STREAM {name} (K STRING KEY, ID INT, NAME STRING) WITH (KAFKA_TOPIC='{topic}', PARTITIONS=1, "
              "FORMAT='JSON');")
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for key, value in ((b'"a"', b'{"ID": 1, "NAME": "a"}'), (b'"x"', BAD_VALUE), (b'"x"', BAD_TYPE),
                       (BAD_KEY, b'{"ID": 9, "NAME": "x"}'), (b'"b"', b'{"ID": 2, "NAME": "b"}')):
        producer.produce(topic, value, key)
    assert producer.flush(30) == 0

    status = server.ok(f"CREATE STREAM C_{name} WITH (KAFKA_TOPIC='{out}', KEY_FORMAT='JSON') AS "
                       f"SELECT * FROM {name} EMIT CHANGES;", EARLIEST)[0]
    query_id = status["commandStatus"]["queryId"]
    records = _read_committed(broker.bootstrap, out, 2)
    assert [(k, json.loads(v or b"")) for k, v in records] == [
        (b'"a"', {"ID": 1, "NAME": "a"}), (b'"b"', {"ID": 2, "NAME": "b"})]
    wait_until_running(server, [query_id])

    api = KSQLAPI(server.url, timeout=300)
    rows = json.loads("".join(api.query(f"SELECT K, ID, NAME FROM {name} EMIT CHANGES LIMIT 2;",
                                        stream_properties=EARLIEST)))
    assert [r["row"]["columns"] for r in rows[1:3]] == [["a", 1, "a"], ["b", 2, "b"]]

    logged = json.loads("".join(api.query("SELECT MESSAGE FROM KSQL_PROCESSING_LOG EMIT CHANGES LIMIT 3;",
                                          stream_properties=EARLIEST)))
    errors = [r["row"]["columns"][0]["DESERIALIZATIONERROR"] for r in logged[1:4]]
    assert [r["row"]["columns"][0]["TYPE"] for r in logged[1:4]] == [0, 0, 0]
    assert sorted((e["TARGET"], base64.b64decode(e["RECORDB64"])) for e in errors) == sorted(
        [("value", BAD_VALUE), ("value", BAD_TYPE), ("key", BAD_KEY)])
    assert {e["topic"] for e in errors} == {topic}
    assert all(e["ERRORMESSAGE"] for e in errors)
    wait_until_running(server, [query_id])
