"""Client quotas with real clients (issue 23 point 3; KIP-13, KIP-219, KIP-546, KIP-599).

Two tenants produce with librdkafka, told apart by their client ids; one has a
``producer_byte_rate`` quota. Over 10 s its delivered rate stays within 10% of the quota and
librdkafka reports the throttling (``throttle_cb`` and the statistics' ``throttle`` window); the
other tenant is never throttled (its rate alone and while sharing the broker are printed, not
asserted: no timing assertions). The quotas survive a broker restart and are enforced after it.
The controller mutation rate answers THROTTLING_QUOTA_EXCEEDED to a CreateTopics v6+ client.
Marked slow: a 30 s run of the produce quota, and SASL users as the tenants (own broker)."""

from __future__ import annotations

import datetime
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode

from oncestream.cli import main as cli_main
from oncestream.client import Admin
from oncestream.client.admin.admin import NewTopic
from oncestream.client.admin.admin_quotas import (
    CLIENT_ID,
    USER,
    ClientQuotaAlteration,
    ClientQuotaEntity,
    ClientQuotaFilter,
    ClientQuotaFilterComponent,
    ClientQuotaOp,
)
from oncestream.client.common.connection import BrokerConnection, BrokerUnreachableError, parse_bootstrap
from oncestream.protocol.api_keys import API_VERSIONS_KEY, PRODUCE
from oncestream.protocol.records import NewRecord, encode_batch
from tests.support.brokers import BrokerProcess
from tests.support.clients import CLIENT_TIMEOUT_S, create_topic, unique_topic
from tests.support.sasl import librdkafka_conf, start_sasl_broker

pytestmark = pytest.mark.interop

QUOTA_BYTES_PER_S = 400_000
# The throttled tenant's quota in the 10 s test. Kafka's rate window is never shorter than 10 s,
# so a client gets quota x (10 s + the time it takes to send that much) through before its first
# throttle, and a 10 s measure lands that time's share above the quota: ~1% on the single broker
# (4 MB in ~0.1 s), but a cluster broker answers a connection's Produce once per commit cycle (5 in
# flight), and librdkafka took 0.5-1 s for 4 MB there on a loaded 2-core machine (8-10% above).
# Half the quota is reached in half the time: 5-7% above on the cluster, measured.
GREEDY_BYTES_PER_S = 200_000
VALUE = b"q" * 4000
MEASURE_S = 10.0
ALONE_S = 2.0
GREEDY = ClientQuotaEntity.of({CLIENT_ID: "greedy"})


@pytest.fixture(scope="module")
def broker(module_our_broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    """One broker for the module (each test uses its own client ids and topics), of the kind under
    test (tests/conftest.py; on the cluster kind, three brokers sharing the quota configs in PostgreSQL)."""
    # The unthrottled tenant writes as fast as it can: small segments, deleted every second.
    return module_our_broker_factory({"log.retention.check.interval.ms": "1000"}, name="quotas")


@dataclass
class Tenant:
    """What one producing tenant saw: bytes delivered inside the window, librdkafka's throttle
    reports (throttle_cb, statistics)."""

    client_id: str
    delivered_bytes: int = 0
    throttle_events_ms: list[float] = field(default_factory=list)
    stats_throttle_max_ms: int = 0
    errors: list[str] = field(default_factory=list)
    first_throttle_s: float | None = None  # since the tenant started producing

    def rate_per_s(self, seconds: float) -> float:
        return self.delivered_bytes / seconds


def produce_for(bootstrap: str, topic: str, tenant: Tenant, seconds: float, *, until_throttled: bool = False,
                until_bytes: int = 0, extra_conf: dict[str, str] | None = None) -> None:
    """Produce as fast as librdkafka lets this tenant for ``seconds`` (or until it is first
    throttled, or has ``until_bytes`` delivered); count what is delivered within them (a
    delivery after the window does not count)."""
    start = time.monotonic()

    def on_throttle(event: object) -> None:
        tenant.throttle_events_ms.append(event.throttle_time * 1000)  # type: ignore[attr-defined]
        if tenant.first_throttle_s is None:
            tenant.first_throttle_s = time.monotonic() - start

    def on_stats(raw: str) -> None:
        for broker in json.loads(raw).get("brokers", {}).values():
            tenant.stats_throttle_max_ms = max(tenant.stats_throttle_max_ms, int(broker.get("throttle", {}).get("max", 0)))

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": tenant.client_id, "linger.ms": 5,
                         "batch.size": 65536, "statistics.interval.ms": 500, "throttle_cb": on_throttle,
                         "stats_cb": on_stats, "error_cb": lambda err: tenant.errors.append(str(err)),
                         **(extra_conf or {})})
    end = start + seconds

    def delivered(err: object, msg: object) -> None:
        if err is None and time.monotonic() <= end:
            tenant.delivered_bytes += len(VALUE)

    while (time.monotonic() < end and not (until_throttled and tenant.throttle_events_ms)
           and not (until_bytes and tenant.delivered_bytes >= until_bytes)):
        try:
            producer.produce(topic, VALUE, on_delivery=delivered)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    producer.purge()  # what was not delivered inside the window is not wanted
    producer.flush(CLIENT_TIMEOUT_S)
    producer.poll(0.6)  # one more statistics round


def set_quota(admin: Admin, entity: ClientQuotaEntity, **values: float | None) -> None:
    result = admin.alter_client_quotas([ClientQuotaAlteration(entity, tuple(ClientQuotaOp(k, v) for k, v in values.items()))])
    assert result == {entity: None}


def test_two_tenants_produce_quota_holds_and_survives_restart(broker: BrokerProcess) -> None:
    topic = unique_topic("quota")
    create_topic(broker.bootstrap, topic, config={"retention.bytes": "16777216", "segment.bytes": "8388608"})
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        set_quota(admin, GREEDY, producer_byte_rate=GREEDY_BYTES_PER_S)
        assert admin.describe_client_quotas()[GREEDY] == {"producer_byte_rate": GREEDY_BYTES_PER_S}

    calm_alone = Tenant("calm")
    produce_for(broker.bootstrap, topic, calm_alone, ALONE_S)

    greedy, calm = Tenant("greedy"), Tenant("calm")
    threads = [threading.Thread(target=produce_for, args=(broker.bootstrap, topic, tenant, MEASURE_S))
               for tenant in (greedy, calm)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(MEASURE_S + 2 * CLIENT_TIMEOUT_S)
    print(f"calm alone {calm_alone.rate_per_s(ALONE_S):.0f} B/s, calm beside greedy {calm.rate_per_s(MEASURE_S):.0f} B/s, "
          f"greedy {greedy.rate_per_s(MEASURE_S):.0f} B/s (quota {GREEDY_BYTES_PER_S}), "
          f"greedy throttled {len(greedy.throttle_events_ms)} times (first after {greedy.first_throttle_s} s), "
          f"max {greedy.stats_throttle_max_ms} ms")
    assert not greedy.errors, greedy.errors
    assert not calm.errors, calm.errors
    # The acceptance point: the quota holds over the 10 s, within 10% of it, on top of what
    # Kafka's rate window lets through before the first throttle: 10 s of quota sent in
    # ``first_throttle_s`` (see GREEDY_BYTES_PER_S; 0.1 s alone on the single broker, 1.1 s on a
    # cluster in a loaded CI run, 11% over the quota). A broker that throttled late would let the
    # tenant's own rate, not the quota, through meanwhile, and fail the bound.
    assert greedy.throttle_events_ms
    assert greedy.first_throttle_s is not None
    burst_allowance = GREEDY_BYTES_PER_S * min(greedy.first_throttle_s, MEASURE_S) / MEASURE_S
    assert GREEDY_BYTES_PER_S * 0.9 <= greedy.rate_per_s(MEASURE_S) <= (GREEDY_BYTES_PER_S + burst_allowance) * 1.1
    # librdkafka saw the throttle time (KIP-219) in both of its reports.
    assert max(greedy.throttle_events_ms) > 0
    assert greedy.stats_throttle_max_ms > 0
    # The other tenant is never throttled.
    assert calm.throttle_events_ms == []
    assert calm.stats_throttle_max_ms == 0
    assert calm_alone.throttle_events_ms == []

    broker.restart()
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        assert admin.describe_client_quotas(ClientQuotaFilter.contains_only(
            [ClientQuotaFilterComponent.of_entity(CLIENT_ID, "greedy")])) == {GREEDY: {"producer_byte_rate": GREEDY_BYTES_PER_S}}
    # Enforced after the restart too: a burst larger than ten seconds of quota is throttled.
    after = Tenant("greedy")
    produce_for(broker.bootstrap, topic, after, CLIENT_TIMEOUT_S, until_throttled=True)
    assert after.throttle_events_ms, f"not throttled after the restart ({after.delivered_bytes} bytes)"


def test_describe_and_alter_validation_and_precedence(broker: BrokerProcess) -> None:
    """AlterClientQuotas answers each entry on its own (INVALID_REQUEST with Kafka's reason, the
    valid entries applied); DescribeClientQuotas filters as Kafka's (exact, default, any; strict)."""
    alice_default = ClientQuotaEntity.of({USER: "alice", CLIENT_ID: None})
    default_user = ClientQuotaEntity.of({USER: None})
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        result = admin.alter_client_quotas([
            ClientQuotaAlteration(alice_default, (ClientQuotaOp("consumer_byte_rate", 2048),
                                                  ClientQuotaOp("request_percentage", 25.5))),
            ClientQuotaAlteration(default_user, (ClientQuotaOp("producer_byte_rate", 0.5),)),
            ClientQuotaAlteration(ClientQuotaEntity.of({"ip": "10.0.0.1"}), (ClientQuotaOp("producer_byte_rate", 1),)),
        ])
        assert result[alice_default] is None
        refused, unknown_type = result[default_user], result[ClientQuotaEntity.of({"ip": "10.0.0.1"})]
        assert refused is not None
        assert unknown_type is not None
        assert refused.name() == "INVALID_REQUEST"
        assert "whole number" in refused.str()
        assert "Unhandled client quota entity type: ip" in unknown_type.str()
        # validate_only changes nothing.
        assert admin.alter_client_quotas([ClientQuotaAlteration(default_user, (ClientQuotaOp("producer_byte_rate", 10),))],
                                         validate_only=True) == {default_user: None}
        assert admin.describe_client_quotas()[alice_default] == {"consumer_byte_rate": 2048, "request_percentage": 25.5}
        assert default_user not in admin.describe_client_quotas()
        loose = ClientQuotaFilter.contains([ClientQuotaFilterComponent.of_entity(USER, "alice")])
        strict = ClientQuotaFilter.contains_only([ClientQuotaFilterComponent.of_entity(USER, "alice")])
        assert set(admin.describe_client_quotas(loose)) == {alice_default}
        assert admin.describe_client_quotas(strict) == {}
        set_quota(admin, alice_default, request_percentage=None, consumer_byte_rate=None)
        assert alice_default not in admin.describe_client_quotas()


def test_controller_mutation_rate_kip_599(broker: BrokerProcess) -> None:
    """CreateTopics v6+: the topic that exceeds the quota is created; the next one of the request
    is refused with THROTTLING_QUOTA_EXCEEDED. (A later request on the same connection comes after
    the channel's mute, when the bucket is paid back: KIP-219.) Other clients are not limited."""
    entity = ClientQuotaEntity.of({CLIENT_ID: "topic-maker"})
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        set_quota(admin, entity, controller_mutation_rate=1)
    first, second = unique_topic("mut"), unique_topic("mut")
    with Admin({"bootstrap.servers": broker.bootstrap, "client.id": "topic-maker"}) as maker:
        result = maker.create_topics([NewTopic(first, num_partitions=12), NewTopic(second, num_partitions=1)])
        assert result[first] is None
        refused = result[second]
        assert refused is not None
        assert refused.name() == "THROTTLING_QUOTA_EXCEEDED"
    with Admin({"bootstrap.servers": broker.bootstrap, "client.id": "someone-else"}) as other:
        assert other.create_topics([NewTopic(second, num_partitions=1)]) == {second: None}


def test_fetch_byte_rate_and_request_percentage_throttle_librdkafka(broker: BrokerProcess) -> None:
    """consumer_byte_rate: a librdkafka consumer reading more than ten seconds of its quota is
    throttled (its throttle_cb fires); request_percentage: a producer whose handler time exceeds
    its share of a thread is throttled too, whatever its bytes."""
    topic = unique_topic("fetchq")
    create_topic(broker.bootstrap, topic)
    writer = Tenant("writer")
    produce_for(broker.bootstrap, topic, writer, CLIENT_TIMEOUT_S, until_bytes=3_000_000)
    assert writer.delivered_bytes >= 3_000_000
    assert not writer.throttle_events_ms
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        set_quota(admin, ClientQuotaEntity.of({CLIENT_ID: "slow-reader"}), consumer_byte_rate=100_000)
        set_quota(admin, ClientQuotaEntity.of({CLIENT_ID: "chatty"}), request_percentage=0.1)

    throttles_ms: list[float] = []
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "client.id": "slow-reader", "group.id": topic,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "throttle_cb": lambda event: throttles_ms.append(event.throttle_time * 1000)})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])  # no group join to wait for
    try:
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while not throttles_ms and time.monotonic() < deadline:
            consumer.poll(0.2)
    finally:
        consumer.close()
    assert throttles_ms
    assert max(throttles_ms) > 0

    # Kafka caps a fetch at what the quota window holds (rate * (11 - 1) samples * 1 s) and answers
    # a throttled fetch with no records: a consumer asking for everything at once still gets at
    # most that, plus one batch, plus the rate for the time it read. Without the cap the first
    # fetch alone returns the whole partition (over 2 MB).
    rate_bytes = 20_000
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        set_quota(admin, ClientQuotaEntity.of({CLIENT_ID: "capped-reader"}), consumer_byte_rate=rate_bytes)
    capped_throttles_ms: list[float] = []
    capped = Consumer({"bootstrap.servers": broker.bootstrap, "client.id": "capped-reader", "group.id": topic + "-capped",
                       "auto.offset.reset": "earliest", "enable.auto.commit": False,
                       "max.partition.fetch.bytes": 50_000_000, "fetch.max.bytes": 50_000_000,
                       "receive.message.max.bytes": 60_000_000,
                       "throttle_cb": lambda event: capped_throttles_ms.append(event.throttle_time * 1000)})
    capped.subscribe([topic])
    consumed_bytes = 0
    try:
        first_s = None
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while time.monotonic() < deadline and (first_s is None or time.monotonic() - first_s < 3.0):
            msg = capped.poll(0.2)
            if msg is not None and msg.error() is None:
                if first_s is None:
                    first_s = time.monotonic()
                consumed_bytes += len(msg.value() or b"")
        read_s = time.monotonic() - (first_s or deadline)
    finally:
        capped.close()
    window_bytes = rate_bytes * 10
    one_batch_bytes = 65536 + 1024  # produce_for's batch.size, plus the batch overhead
    assert 0 < consumed_bytes <= window_bytes + one_batch_bytes + rate_bytes * (read_s + 1), consumed_bytes
    assert capped_throttles_ms, "the capped reader was never throttled"

    chatty = Tenant("chatty")
    produce_for(broker.bootstrap, topic, chatty, CLIENT_TIMEOUT_S, until_throttled=True)
    assert chatty.throttle_events_ms, "request_percentage never throttled the producer"
    # Kafka bounds a request-time throttle by one quota window (1 s).
    assert max(chatty.throttle_events_ms) <= 1000


def _api_versions(m: Any) -> Any:
    return m.ApiVersionsRequest(client_software_name="quota-test", client_software_version="1")


def test_kip_219_throttled_connection_is_muted(broker: BrokerProcess) -> None:
    """KIP-219 on the wire: the Produce that exceeds the quota is answered at once with its
    throttle time, and the broker then reads nothing more from that connection for that long (a
    request sent right after gets no answer within 2 s, while the throttle lasts ~10 s); another
    connection is served meanwhile."""
    topic = unique_topic("mute")
    create_topic(broker.bootstrap, topic)
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        set_quota(admin, ClientQuotaEntity.of({CLIENT_ID: "deaf"}), producer_byte_rate=QUOTA_BYTES_PER_S)
    batch = encode_batch([NewRecord(value=b"m" * 900_000)], now_ms=int(time.time() * 1000))
    host, port = parse_bootstrap(broker.bootstrap)
    with BrokerConnection(host, port, client_id="deaf") as conn:
        throttle = datetime.timedelta(0)
        for _ in range(20):  # ~4.2 MB (the first window's bound) crosses the quota
            response = conn.call(PRODUCE, lambda m: m.ProduceRequest(
                transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=30),
                topic_data=(m.TopicProduceData(name=topic, partition_data=(
                    m.PartitionProduceData(index=0, records=batch),)),)))
            assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
            throttle = response.throttle_time
            if throttle > datetime.timedelta(0):
                break
        assert throttle > datetime.timedelta(seconds=2), throttle
        conn._sock.settimeout(2.0)  # the mute outlasts this wait
        with pytest.raises(BrokerUnreachableError, match="timed out"):
            conn.call(API_VERSIONS_KEY, _api_versions)
        with BrokerConnection(host, port, client_id="deaf") as other:  # a new connection is not muted
            assert other.call(API_VERSIONS_KEY, _api_versions).error_code == ErrorCode.none


def quotas_cli(broker: BrokerProcess, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``oncestream quotas ARGS -b BROKER`` in this process: (exit code, stdout, stderr)."""
    code = cli_main(["quotas", *args, "-b", broker.bootstrap])
    out, err = capsys.readouterr()
    return code, out, err


def test_quotas_cli_kafka_configs_options(broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    """``oncestream quotas alter|describe`` with kafka-configs.sh's options and output."""
    both = ("--entity-type", "user", "--entity-name", "carol", "--entity-type", "client-id", "--entity-default")
    code, out, err = quotas_cli(broker, capsys, "alter", *both,
                                "--add-config", "producer_byte_rate=1048576,request_percentage=50")
    assert code == 0, err
    assert out.strip() == "Completed updating config for user-principal 'carol', the default client-id."
    _, out, _ = quotas_cli(broker, capsys, "describe", *both)
    assert out.strip() == ("Quota configs for user-principal 'carol', the default client-id are "
                           "producer_byte_rate=1048576.0, request_percentage=50.0")
    assert quotas_cli(broker, capsys, "alter", *both, "--delete-config", "request_percentage")[0] == 0
    _, out, _ = quotas_cli(broker, capsys, "describe", "--entity-type", "users")
    assert "Quota configs for user-principal 'carol', the default client-id are producer_byte_rate=1048576.0" \
        in out.splitlines()
    code, _, err = quotas_cli(broker, capsys, "alter", "--entity-type", "client-id", "--entity-name", "x",
                              "--add-config", "consumer_byte_rate=-5")
    assert code == 1
    assert "INVALID_REQUEST" in err
    code, _, err = quotas_cli(broker, capsys, "alter", "--entity-name", "x", "--add-config", "consumer_byte_rate=5")
    assert code == 1
    assert "must follow an --entity-type" in err


@pytest.mark.slow
def test_produce_quota_holds_over_thirty_seconds(broker: BrokerProcess) -> None:
    """The longer run: past the first window the rate is kept by the samples' expiry, not the
    padded first window; a librdkafka producer honouring the throttle times stays within 10%."""
    topic = unique_topic("quota-long")
    create_topic(broker.bootstrap, topic)
    entity = ClientQuotaEntity.of({USER: None, CLIENT_ID: "long-runner"})  # level 4: <default> user, this client
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        set_quota(admin, entity, producer_byte_rate=QUOTA_BYTES_PER_S)
    runner = Tenant("long-runner")
    produce_for(broker.bootstrap, topic, runner, 30.0)
    print(f"long-runner {runner.rate_per_s(30.0):.0f} B/s over 30 s, throttled {len(runner.throttle_events_ms)} times")
    assert runner.rate_per_s(30.0) == pytest.approx(QUOTA_BYTES_PER_S, rel=0.10)
    assert len(runner.throttle_events_ms) > 1


@pytest.mark.slow
def test_sasl_users_are_quota_tenants(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The quota user is the SASL principal (KIP-55): alice and admin produce with the same
    client id; only alice, who has a user quota, is throttled."""
    broker = start_sasl_broker(tmp_path_factory.mktemp("sasl-quotas") / "data")
    try:
        admin_conf = librdkafka_conf("PLAIN", "admin", "admin-secret")
        alice_conf = librdkafka_conf("PLAIN", "alice", "alice-secret")
        topic = unique_topic("sasl-quota")
        with Admin({"bootstrap.servers": broker.bootstrap, **admin_conf}) as admin:
            assert admin.create_topics([NewTopic(topic)]) == {topic: None}
            set_quota(admin, ClientQuotaEntity.of({USER: "alice"}), producer_byte_rate=100_000)
        alice, other = Tenant("same-app"), Tenant("same-app")
        produce_for(broker.bootstrap, topic, alice, CLIENT_TIMEOUT_S, until_throttled=True, extra_conf=alice_conf)
        produce_for(broker.bootstrap, topic, other, 1.0, extra_conf=admin_conf)
        assert alice.throttle_events_ms, f"alice not throttled ({alice.delivered_bytes} bytes)"
        assert other.delivered_bytes > 0
        assert other.throttle_events_ms == []
    finally:
        broker.stop()
