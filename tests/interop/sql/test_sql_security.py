"""The SQL server against a secured cluster (issue 14 point 5, issue 12): every Kafka client the
node creates takes the client security options given with ``--config``.

The broker has one listener only, SASL_SSL with ``ssl.client.auth=required`` (so each client needs
``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location``, ``security.protocol``,
``sasl.mechanism``, ``sasl.username`` and ``sasl.password``), and the StandardAuthorizer on with
``allow.everyone.if.no.acl.found=false``. The node's user ``ksql`` (SCRAM-SHA-256) is granted ACLs
on its own resources only: the command topic and internal topics/groups (prefix
``_confluent-ksql-<service id>``), the command producer's transactional id (the service id), the
queries' sink transactional ids (``oncestream-sql-<service id>``), the Spark sink's commit journal,
and the user topics (prefix ``sec_``). Through the REST API only: CREATE STREAM (command topic
producer and consumer, admin), INSERT VALUES (the runtime's producer), a persistent CSAS (the Spark
connector's ``kafka.*`` options; exactly-once sink with KIP-939 two-phase commit) whose output a
confluent-kafka ``read_committed`` consumer reads as another user, and a push query with LIMIT.
With a wrong password the node does not come up healthy and says why. The broker is the kind under
test's (our single broker, or three cluster brokers in the cluster pass), the same test bodies on both.

Pull queries on tables made by ``CREATE TABLE AS SELECT`` (issue 13 part 3) run on the same node
(one Spark session for the module): the CTAS sink topic is written by the Spark runtime's
exactly-once sink (serde's Spark column form) and materialized by the node from that topic
read_committed; pull queries decode it with serde's Python form. So that test checks both halves
agree on the key layout, windowed keys included: an aggregate keyed by ``PAGE``, and a
TUMBLING-windowed one queried with ``WINDOWSTART`` bounds.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer as CkConsumer
from confluent_kafka import Producer as CkProducer
from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType, ResourceType

from tests.support.acl import AUTHORIZER, wait_described_everywhere
from tests.support.brokers import NO_INITIAL_REBALANCE_DELAY
from tests.support.certs import Pki
from tests.support.cluster_kind import BrokerUnderTest
from tests.support.metrics import Samples, scrape, value
from tests.support.sasl import add_scram_users_online, plain_jaas, sasl_broker_config
from tests.support.sql_servers import SqlServerProcess, wait_until, wait_until_running

pytestmark = [pytest.mark.interop, pytest.mark.spark]

TIMEOUT_S = 60.0
USERS = {"admin": "admin-secret", "reader": "reader-secret"}  # PLAIN
KSQL_USER, KSQL_PASSWORD = "ksql", "ksql-scram-secret"       # SCRAM-SHA-256
SERVICE_ID = f"sec_{uuid.uuid4().hex[:6]}_"
EARLIEST = {"ksql.streams.auto.offset.reset": "earliest"}
MINUTE_MS = 60_000


@pytest.fixture(scope="module")
def broker(module_our_broker_factory: Callable[..., BrokerUnderTest], pki: Pki) -> BrokerUnderTest:
    """The broker under test: our single broker, or a cluster whose brokers log in to each other on
    the one listener as ``admin`` (PLAIN, a super user) with the broker certificate as their client
    certificate. The node's SCRAM user is created once it runs (AlterUserScramCredentials, as the
    SASL suites do: a cluster keeps its users in PostgreSQL)."""
    config = sasl_broker_config({
        "listeners": "SASL_SSL://127.0.0.1:0",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": plain_jaas(USERS, login="admin"),
        "listener.name.sasl_ssl.ssl.client.auth": "required",
        **pki.broker_stores(),
        **AUTHORIZER,
        "allow.everyone.if.no.acl.found": "false",
        # The queries' exactly-once sink prepares its transactions (KIP-939).
        "transaction.two.phase.commit.enable": "true",
        **NO_INITIAL_REBALANCE_DELAY,  # the node's and the reader's groups join without Kafka's 3 s wait
    })
    broker = module_our_broker_factory(config)
    add_scram_users_online(broker, {KSQL_USER: KSQL_PASSWORD}, _security(pki, "PLAIN", "admin", USERS["admin"]))
    return broker


def _security(pki: Pki, mechanism: str, user: str, password: str) -> dict[str, str]:
    """The seven client security options (librdkafka's names)."""
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": mechanism, "sasl.username": user,
            "sasl.password": password, "ssl.ca.location": str(pki.ca),
            "ssl.certificate.location": str(pki.alice.cert), "ssl.key.location": str(pki.alice.key)}


def _grant(broker: BrokerUnderTest, pki: Pki, bindings: list[AclBinding]) -> None:
    """Create ``bindings`` as admin; return once every broker process describes each (a client may
    send its next request to any broker of a cluster)."""
    admin_conf = _security(pki, "PLAIN", "admin", USERS["admin"])
    admin = AdminClient({"bootstrap.servers": broker.listener_bootstrap("SASL_SSL"), **admin_conf})
    for future in admin.create_acls(bindings, request_timeout=TIMEOUT_S).values():
        future.result(timeout=TIMEOUT_S)
    for binding in bindings:
        wait_described_everywhere(broker, binding, listener="SASL_SSL", client_conf=admin_conf)


def _allow(principal: str, rtype: ResourceType, name: str, pattern: ResourcePatternType,
           op: AclOperation = AclOperation.ALL) -> AclBinding:
    return AclBinding(rtype, name, pattern, f"User:{principal}", "*", op, AclPermissionType.ALLOW)


@pytest.fixture(scope="module")
def node(broker: BrokerUnderTest, pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqlServerProcess]:
    prefixed, literal = ResourcePatternType.PREFIXED, ResourcePatternType.LITERAL
    internal = f"_confluent-ksql-{SERVICE_ID}"
    _grant(broker, pki, [
        _allow(KSQL_USER, ResourceType.TOPIC, internal, prefixed),
        _allow(KSQL_USER, ResourceType.GROUP, internal, prefixed),
        _allow(KSQL_USER, ResourceType.TOPIC, "sec_", prefixed),
        _allow(KSQL_USER, ResourceType.TOPIC, "__oncestream_spark_commits", literal),
        _allow(KSQL_USER, ResourceType.TRANSACTIONAL_ID, SERVICE_ID, literal),
        _allow(KSQL_USER, ResourceType.TRANSACTIONAL_ID, f"oncestream-sql-{SERVICE_ID}", prefixed),
        _allow("reader", ResourceType.TOPIC, "sec_", prefixed, AclOperation.READ),
        _allow("reader", ResourceType.GROUP, "reader-", prefixed, AclOperation.READ),
    ])
    process = SqlServerProcess(bootstrap=broker.listener_bootstrap("SASL_SSL"), service_id=SERVICE_ID,
                               state_dir=tmp_path_factory.mktemp("sql-secured-node"),
                               config={**_security(pki, "SCRAM-SHA-256", KSQL_USER, KSQL_PASSWORD),
                                       "metrics.listen": "127.0.0.1:0"})
    process.start()
    try:
        yield process
    finally:
        process.stop()


def _read_committed(broker: BrokerUnderTest, pki: Pki, topic: str, count: int) -> list[tuple[bytes | None, bytes | None]]:
    consumer = CkConsumer({"bootstrap.servers": broker.listener_bootstrap("SASL_SSL"),
                           **_security(pki, "PLAIN", "reader", USERS["reader"]),
                           "group.id": f"reader-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest",
                           "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.subscribe([topic])
    records: list[tuple[bytes | None, bytes | None]] = []
    deadline = time.monotonic() + 240
    try:
        while len(records) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            records.append((msg.key(), msg.value()))
    finally:
        consumer.close()
    return records


def test_statements_inserts_persistent_and_push_queries_over_sasl_ssl_with_acls(
        broker: BrokerUnderTest, pki: Pki, node: SqlServerProcess) -> None:
    assert node.get("/healthcheck").json()["isHealthy"] is True
    src, dst = f"sec_src_{uuid.uuid4().hex[:6]}", f"sec_dst_{uuid.uuid4().hex[:6]}"
    created = node.ok(f"CREATE STREAM SRC (ID INT KEY, V STRING) WITH (KAFKA_TOPIC='{src}', PARTITIONS=1, "
                      "VALUE_FORMAT='JSON');")[0]
    assert created["commandStatus"]["status"] == "SUCCESS", created
    for i, v in enumerate(["a", "b", "c"]):
        node.ok(f"INSERT INTO SRC (ID, V) VALUES ({i}, '{v}');")
    status = node.ok(f"CREATE STREAM DST WITH (KAFKA_TOPIC='{dst}') AS SELECT ID, UCASE(V) AS U FROM SRC "
                     "WHERE ID > 0 EMIT CHANGES;", EARLIEST)[0]
    query_id = status["commandStatus"]["queryId"]

    records = _read_committed(broker, pki, dst, 2)
    assert [json.loads(v) for _, v in records if v is not None] == [{"U": "B"}, {"U": "C"}], node.log_tail()
    wait_until_running(node, [query_id])

    with httpx.stream("POST", f"{node.url}/query-stream", timeout=240,
                      json={"sql": "SELECT ID, V FROM SRC EMIT CHANGES LIMIT 2;",
                            "properties": {"auto.offset.reset": "earliest"}}) as response:
        assert response.status_code == 200
        lines = [json.loads(line) for line in response.iter_lines() if line.strip()]
    assert lines[0]["columnNames"] == ["ID", "V"], lines
    assert lines[1:] == [[0, "a"], [1, "b"]], lines
    assert node.get("/healthcheck").json()["isHealthy"] is True


def _pull(node: SqlServerProcess, sql: str) -> list[list[Any]] | None:
    """The rows of a pull query once the node answers 200 (sorted), else None."""
    assert node.url is not None
    response = httpx.post(f"{node.url}/query-stream", json={"sql": sql, "properties": {}},
                          headers={"Accept": "application/json"}, timeout=60)
    if response.status_code != 200:
        return None
    body = response.json()
    return sorted(row for row in body[1:] if isinstance(row, list))


def test_pull_queries_on_ctas_tables_plain_and_windowed(broker: BrokerUnderTest, pki: Pki,
                                                        node: SqlServerProcess) -> None:
    suffix = uuid.uuid4().hex[:6]
    views, counts, minutes = f"VIEWS_{suffix.upper()}", f"PAGE_COUNTS_{suffix.upper()}", f"PAGE_MINUTES_{suffix.upper()}"
    topic = f"sec_pull_views_{suffix}"
    node.ok(f"CREATE STREAM {views} (PAGE STRING, USERID STRING) WITH (KAFKA_TOPIC='{topic}', PARTITIONS=2, "
            "VALUE_FORMAT='JSON');")
    producer = CkProducer({"bootstrap.servers": broker.listener_bootstrap("SASL_SSL"),
                           **_security(pki, "PLAIN", "admin", USERS["admin"]), "enable.idempotence": True})
    # (page, minute): home x3 in minute 0, home x1 in minute 1, about x2 in minute 1.
    for page, minute in [("home", 0), ("home", 0), ("home", 0), ("home", 1), ("about", 1), ("about", 1)]:
        producer.produce(topic, json.dumps({"PAGE": page, "USERID": "u"}).encode(), key=page.encode(),
                         timestamp=minute * MINUTE_MS + 1000)
    assert producer.flush(TIMEOUT_S) == 0
    node.ok(f"CREATE TABLE {counts} WITH (KAFKA_TOPIC='sec_{counts.lower()}') AS SELECT PAGE, COUNT(*) AS N "
            f"FROM {views} GROUP BY PAGE;", EARLIEST)
    node.ok(f"CREATE TABLE {minutes} WITH (KAFKA_TOPIC='sec_{minutes.lower()}') AS SELECT PAGE, COUNT(*) AS N "
            f"FROM {views} WINDOW TUMBLING (SIZE 1 MINUTE) GROUP BY PAGE;", EARLIEST)

    wait_until(lambda: _pull(node, f"SELECT * FROM {counts};") == [["about", 2], ["home", 4]],
               f"{counts} materialized", timeout_s=300, nodes=[node])
    assert _pull(node, f"SELECT N FROM {counts} WHERE PAGE = 'home';") == [[4]]
    assert _pull(node, f"SELECT PAGE FROM {counts} WHERE PAGE IN ('about', 'nope');") == [["about"]]

    # Both pages, each in its own partition: the query may read them in different micro-batches.
    wait_until(lambda: _pull(node, f"SELECT * FROM {minutes} WHERE PAGE = 'home';")
               == [["home", 0, MINUTE_MS, 3], ["home", MINUTE_MS, 2 * MINUTE_MS, 1]]
               and _pull(node, f"SELECT * FROM {minutes} WHERE PAGE = 'about';") == [["about", MINUTE_MS, 2 * MINUTE_MS, 2]],
               f"{minutes} materialized", timeout_s=300, nodes=[node])
    assert _pull(node, f"SELECT PAGE, N FROM {minutes} WHERE WINDOWSTART = {MINUTE_MS};") == [["about", 2],
                                                                                                ["home", 1]]
    assert _pull(node, f"SELECT N FROM {minutes} WHERE PAGE = 'home' AND WINDOWSTART >= 1000;") == [[1]]
    _check_metrics(node, (f"CTAS_{counts}_", f"CTAS_{minutes}_"))


def _check_metrics(node: SqlServerProcess, query_prefixes: tuple[str, ...]) -> None:
    """The node's /metrics (metrics.listen), parsed by prometheus-client, after the CTAS queries
    above: both run on this node and read the six records each (exactly once: a count that
    replayed would show more), neither is behind its source, the pull queries were timed and the
    statements applied from the command topic.

    The per-query figures come from Spark's progress reports, which Spark posts after a
    micro-batch's commit, so after the pull queries above could already see its rows: they are
    polled until they settle (a replayed count never comes back down to 6, so this still fails)."""
    bound = node.ready_info["metrics"]
    url = f"http://{bound['host']}:{bound['port']}/metrics"

    def per_query(samples: Samples, name: str, prefix: str) -> list[float]:
        return [v for (metric, labels), v in samples.items()
                if metric == name and dict(labels)["query_id"].startswith(prefix)]

    def settled() -> bool:
        samples = scrape(url)
        return all(per_query(samples, "oncestream_sql_query_processed_rows_total", prefix) == [6]
                   and per_query(samples, "oncestream_sql_query_offsets_behind_latest", prefix) == [0]
                   for prefix in query_prefixes)

    wait_until(settled, f"per-query metrics of {query_prefixes} to read 6 rows and 0 behind", timeout_s=TIMEOUT_S,
               nodes=[node])
    samples = scrape(url)
    assert value(samples, "oncestream_sql_command_topic_offset") >= 2
    assert value(samples, "oncestream_sql_persistent_queries", state="RUNNING") >= len(query_prefixes)
    assert value(samples, "oncestream_sql_pull_query_latency_seconds_count") >= 5


def test_wrong_password_is_reported_not_hung(broker: BrokerUnderTest, pki: Pki, tmp_path: Path) -> None:
    """A node whose SCRAM password is wrong does not hang: it never says it is ready, and exits
    with status 1 and a message naming the authentication failure (were it to serve instead,
    /healthcheck would have to say it is not healthy: ``outcome`` watches for both)."""
    process = SqlServerProcess(bootstrap=broker.listener_bootstrap("SASL_SSL"), service_id=f"bad_{uuid.uuid4().hex[:6]}_",
                               state_dir=tmp_path / "node",
                               config={**_security(pki, "SCRAM-SHA-256", KSQL_USER, "wrong-password"),
                                       "ksql.spark.start": "lazy"})
    process.start(wait=False)
    try:
        def outcome() -> str | None:
            if not process.alive:
                return "exited"
            ready = sorted(process.state_dir.glob("ready-*.json"))
            if ready:
                process.url = json.loads(ready[-1].read_text())["url"]
                health = process.get("/healthcheck").json()
                return None if health.get("isHealthy") else "unhealthy"
            return None

        seen = wait_until(outcome, "the node to fail or report itself unhealthy", timeout_s=180, nodes=[process])
        # What the node does: it exits 1 at start-up (creating the command topic is its first
        # call) with one line naming the cause, not a traceback.
        assert seen == "exited", process.log_tail()
        assert process.process is not None
        assert process.process.returncode == 1
        log = process.log_tail(20000)
        assert "cannot start the node" in log, log
        assert "SASL authentication failed" in log, log
        assert "Traceback" not in log, log
    finally:
        process.kill()
