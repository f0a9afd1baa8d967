"""The processing log's start-up side, as ksqlDB's server does it: with
``ksql.logging.processing.topic.auto.create=true`` and ``...stream.auto.create=true`` a node creates
the topic ``<service id>ksql_processing_log`` and the stream ``KSQL_PROCESSING_LOG`` over it (with
ksqlDB's columns), and a restart keeps the one stream. Spark never starts here (lazy): the records
that reach the topic from a query are tests/spark/sql/test_golden_protobuf.py's."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import AdminClient as ConfluentAdmin

from tests.support.brokers import ManagedBroker
from tests.support.sql_servers import LAZY_SPARK, SqlServerProcess

pytestmark = pytest.mark.interop

PROCESSING_LOG = {**LAZY_SPARK, "ksql.logging.processing.topic.auto.create": "true",
                  "ksql.logging.processing.stream.auto.create": "true"}


def test_node_creates_the_processing_log_topic_and_stream(broker: ManagedBroker,
                                                          tmp_path_factory: pytest.TempPathFactory) -> None:
    service_id = f"plog_{uuid.uuid4().hex[:6]}_"
    node = SqlServerProcess(bootstrap=broker.bootstrap, service_id=service_id,
                            state_dir=tmp_path_factory.mktemp("sql-plog"), config=PROCESSING_LOG)
    node.start()
    try:
        topics = ConfluentAdmin({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=30).topics
        assert f"{service_id}ksql_processing_log" in topics
        description = node.ok("DESCRIBE KSQL_PROCESSING_LOG;")[0]["sourceDescription"]
        assert description["topic"] == f"{service_id}ksql_processing_log"
        assert (description["keyFormat"], description["valueFormat"]) == ("KAFKA", "JSON")
        fields = {f["name"]: f["schema"] for f in description["fields"]}
        assert list(fields) == ["LOGGER", "LEVEL", "TIME", "MESSAGE"]
        message = {f["name"] for f in fields["MESSAGE"]["fields"]}
        assert {"TYPE", "DESERIALIZATIONERROR", "RECORDPROCESSINGERROR", "SERIALIZATIONERROR"} <= message
        node.stop()
        node.start()   # the stream exists: not created again
        streams = [s["name"] for s in node.ok("LIST STREAMS;")[0]["streams"]]
        assert streams.count("KSQL_PROCESSING_LOG") == 1
    finally:
        node.stop()
