"""KIP-714 client metrics on the broker, sans-io: ClientMetrics subscriptions (validation,
matching, Kafka's subscription id), the push rules and their error codes, OTLP payloads built with
opentelemetry-proto decoded (through every compression the KIP allows) and shown on a registry."""

from __future__ import annotations

import types
import uuid
from typing import Any

import crc32c
import pytest
from kio.schema.errors import ErrorCode
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AggregationTemporality,
    Gauge,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from oncestream.broker.handlers import telemetry as handlers
from oncestream.broker.telemetry import otlp
from oncestream.broker.telemetry import subscriptions as subs
from oncestream.broker.telemetry.exported import ReceivedClientMetrics
from oncestream.broker.telemetry.manager import ClientMetricsManager, TelemetryRequestError
from oncestream.broker.telemetry.service import ClientTelemetry
from oncestream.errors import InvalidConfigError, InvalidRequestError
from oncestream.protocol.codec import RequestHeader
from oncestream.protocol.compression import compress
from oncestream.protocol.schemas import request_module

INSTANCE = uuid.UUID("6d2a7b0c-1e4f-4a5b-9c8d-7e6f5a4b3c2d")


def _client(**changes: str) -> subs.ClientMetadata:
    values = dict(client_instance_id=str(INSTANCE), client_id="orders-producer", client_software_name="librdkafka",
                  client_software_version="2.16.1", client_source_address="10.0.0.7", client_source_port="51234")
    values.update(changes)
    return subs.ClientMetadata(**values)


# --- subscriptions ---------------------------------------------------------------------------


def test_match_patterns_must_match_the_whole_value():
    sub = subs.validate("s", {"metrics": "org.apache.kafka.producer.",
                              "match": "client_id=orders-.*,client_software_name=librdkafka"})
    assert sub.matches(_client())
    assert not sub.matches(_client(client_id="x-orders-producer"))  # fullmatch, as Java's matches()
    assert not sub.matches(_client(client_software_name="librdkafka-fork"))
    assert subs.validate("all", {"metrics": "*"}).matches(_client())  # no match: every client


@pytest.mark.parametrize(("configs", "error"), [
    ({"interval.ms": "99"}, InvalidConfigError),
    ({"interval.ms": "3600001"}, InvalidConfigError),
    ({"interval.ms": "soon"}, InvalidConfigError),
    ({"match": "client_colour=red"}, InvalidConfigError),
    ({"match": "client_id"}, InvalidConfigError),
    ({"match": "client_id=(unclosed"}, InvalidConfigError),
    ({"metric": "org."}, InvalidConfigError),
])
def test_bad_configs_are_refused(configs, error):
    with pytest.raises(error):
        subs.validate("s", configs)


def test_an_empty_name_is_an_invalid_request():
    with pytest.raises(InvalidRequestError):
        subs.validate("", {"metrics": "*"})


def test_incremental_operations_append_and_subtract_lists():
    configs = subs.apply_operations({}, [("metrics", 0, "org.apache.kafka.producer."), ("interval.ms", 0, "1000")])
    configs = subs.apply_operations(configs, [("metrics", 2, "org.apache.kafka.consumer.")])
    assert configs["metrics"] == "org.apache.kafka.producer.,org.apache.kafka.consumer."
    configs = subs.apply_operations(configs, [("metrics", 3, "org.apache.kafka.producer."), ("interval.ms", 1, None)])
    assert configs == {"metrics": "org.apache.kafka.consumer."}
    with pytest.raises(InvalidConfigError):
        subs.apply_operations(configs, [("interval.ms", 2, "5")])


def test_java_uuid_hash():
    assert subs.java_uuid_hash(uuid.UUID(int=(1 << 64) | 2)) == 3  # Uuid(1, 2).hashCode()
    assert subs.java_uuid_hash(uuid.UUID(int=0xFFFFFFFF00000000 << 64)) == -1


def test_subscription_id_is_kafkas_crc_of_the_metric_set_and_interval():
    resolved = subs.resolve([subs.validate("a", {"metrics": "org.b,org.a", "interval.ms": "1000"}),
                             subs.validate("b", {"metrics": "org.c", "interval.ms": "2000"})], _client(), INSTANCE)
    assert resolved.metrics == ("org.a", "org.b", "org.c")
    assert resolved.interval_ms == 1000
    crc = crc32c.crc32c(b"[org.a, org.b, org.c]1000")
    expected = (crc ^ subs.java_uuid_hash(INSTANCE)) & 0xFFFFFFFF
    assert resolved.subscription_id == (expected - (1 << 32) if expected >= 1 << 31 else expected)
    other = subs.resolve([subs.validate("a", {"metrics": "org.a", "interval.ms": "1000"})], _client(), INSTANCE)
    assert other.subscription_id != resolved.subscription_id


def test_any_all_metrics_subscription_makes_the_set_star_and_no_match_keeps_the_default():
    resolved = subs.resolve([subs.validate("a", {"metrics": "org.a"}), subs.validate("b", {"metrics": "*"})],
                            _client(), INSTANCE)
    assert resolved.metrics == ("*",)
    assert resolved.interval_ms == subs.DEFAULT_INTERVAL_MS
    none = subs.resolve([subs.validate("a", {"metrics": "org.a", "match": "client_id=other"})], _client(), INSTANCE)
    assert none.metrics == ()
    assert none.interval_ms == subs.DEFAULT_INTERVAL_MS


# --- the push rules --------------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def _manager(clock: _Clock, **kwargs) -> ClientMetricsManager:
    return ClientMetricsManager({"s": {"metrics": "org.apache.kafka.", "interval.ms": "1000"}}, clock,
                                new_instance_id=lambda: INSTANCE, **kwargs)


def _meta(instance_id: uuid.UUID) -> subs.ClientMetadata:
    return _client(client_instance_id=str(instance_id))


def _code(call) -> ErrorCode:
    try:
        call()
    except TelemetryRequestError as exc:
        return exc.code
    return ErrorCode.none


def test_zero_uuid_gets_an_instance_id_and_the_subscription():
    clock = _Clock()
    instance = _manager(clock).get_subscriptions(uuid.UUID(int=0), _meta)
    assert instance.instance_id == INSTANCE
    assert instance.subscription.metrics == ("org.apache.kafka.",)
    assert instance.subscription.interval_ms == 1000


def test_each_bad_push_gets_kafkas_error_code():
    clock = _Clock()
    manager = _manager(clock, max_bytes=100)
    sub_id = manager.get_subscriptions(None, _meta).subscription.subscription_id

    def push(sid=sub_id, codec=0, payload=b"x", terminating=False, instance=INSTANCE):
        return lambda: manager.push(instance, _meta, sid, codec, payload, terminating)

    assert _code(push(instance=uuid.UUID(int=0))) == ErrorCode.invalid_request
    assert _code(push(sid=sub_id + 1)) == ErrorCode.unknown_subscription_id
    assert _code(push(codec=7)) == ErrorCode.unsupported_compression_type
    assert _code(push(payload=b"x" * 101)) == ErrorCode.telemetry_too_large
    assert _code(push()) == ErrorCode.none  # the first push after GetTelemetrySubscriptions
    clock.ms += 999
    assert _code(push()) == ErrorCode.throttling_quota_exceeded  # sooner than interval.ms
    clock.ms += 1
    assert _code(push()) == ErrorCode.none
    assert _code(push(terminating=True)) == ErrorCode.none  # a terminating push is never too frequent
    clock.ms += 5000
    assert _code(push()) == ErrorCode.invalid_request  # nothing after the terminating push


def test_get_subscriptions_again_too_soon_is_throttled_unless_the_push_was_refused_for_its_id():
    clock = _Clock()
    manager = _manager(clock)
    manager.get_subscriptions(INSTANCE, _meta)
    clock.ms += 10
    assert _code(lambda: manager.get_subscriptions(INSTANCE, _meta)) == ErrorCode.throttling_quota_exceeded
    assert _code(lambda: manager.push(INSTANCE, _meta, 12345, 0, b"", False)) == ErrorCode.unknown_subscription_id
    assert _code(lambda: manager.get_subscriptions(INSTANCE, _meta)) == ErrorCode.none


def test_a_subscription_change_makes_the_old_id_unknown_and_the_client_fetches_the_new_set():
    clock = _Clock()
    manager = _manager(clock)
    old = manager.get_subscriptions(INSTANCE, _meta).subscription
    manager.install({"s": {"metrics": "org.apache.kafka.consumer.", "interval.ms": "1000"}})
    clock.ms += 1000
    assert _code(lambda: manager.push(INSTANCE, _meta, old.subscription_id, 0, b"", False)) == \
        ErrorCode.unknown_subscription_id
    new = manager.get_subscriptions(INSTANCE, _meta).subscription
    assert new.metrics == ("org.apache.kafka.consumer.",)
    assert new.subscription_id != old.subscription_id
    assert _code(lambda: manager.push(INSTANCE, _meta, new.subscription_id, 0, b"", False)) == ErrorCode.none


def test_silent_instances_expire():
    clock = _Clock()
    manager = _manager(clock)
    manager.get_subscriptions(INSTANCE, _meta)
    clock.ms += 60_000
    assert manager.expire() == []
    clock.ms += 1
    assert manager.expire() == [INSTANCE]
    assert manager.instances == {}


def test_the_least_recently_heard_from_instance_is_evicted_past_the_cap():
    clock = _Clock()
    ids = iter(uuid.UUID(int=n) for n in range(1, 10))
    manager = ClientMetricsManager({}, clock, new_instance_id=lambda: next(ids), max_instances=2)
    first = manager.get_subscriptions(None, _meta).instance_id
    clock.ms += 1
    second = manager.get_subscriptions(None, _meta).instance_id
    clock.ms += 1
    third = manager.get_subscriptions(None, _meta).instance_id
    assert set(manager.instances) == {second, third}
    assert first not in manager.instances


def test_subscriptions_are_read_back_from_the_data_dir(tmp_path):
    configs = {"producers": {"metrics": "org.apache.kafka.producer.", "interval.ms": "1000"}, "emptied": {}}
    subs.save(tmp_path, configs)
    telemetry = ClientTelemetry(tmp_path, {"telemetry.max.bytes": "2048"}, _Clock())
    assert telemetry.manager.configs == {"producers": configs["producers"]}
    assert telemetry.manager.max_bytes == 2048
    assert telemetry.manager.get_subscriptions(None, _meta).subscription.interval_ms == 1000


# --- OTLP payloads ---------------------------------------------------------------------------


def _kv(key: str, value: str | int) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(int_value=value) if isinstance(value, int) else AnyValue(string_value=value))


def _payload(latency: float, created: int) -> bytes:
    """MetricsData as librdkafka builds it: a gauge per broker node and a delta monotonic sum."""
    gauge = Metric(name="org.apache.kafka.producer.node.request.latency.avg",
                   gauge=Gauge(data_points=[NumberDataPoint(as_double=latency, attributes=[_kv("node_id", 1)])]))
    total = Metric(name="org.apache.kafka.producer.connection.creation.total", sum=Sum(
        aggregation_temporality=AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA, is_monotonic=True,
        data_points=[NumberDataPoint(as_int=created)]))
    data = MetricsData(resource_metrics=[ResourceMetrics(
        resource=Resource(attributes=[_kv("client_rack", "r1")]),
        scope_metrics=[ScopeMetrics(metrics=[gauge, total])])])
    return data.SerializeToString()


def test_decode_a_real_otlp_payload():
    resource, points = otlp.decode(_payload(2.5, 3))
    assert resource == {"client_rack": "r1"}
    assert otlp.DataPoint("org.apache.kafka.producer.node.request.latency.avg", (("node_id", "1"),), 2.5, False) in points
    assert otlp.DataPoint("org.apache.kafka.producer.connection.creation.total", (), 3.0, True) in points
    with pytest.raises(InvalidRequestError):
        otlp.decode(b"\xff\xff\xff")


def test_prometheus_names():
    assert otlp.prometheus_name("org.apache.kafka.producer.node.request.latency.avg") == \
        "org_apache_kafka_producer_node_request_latency_avg"
    assert otlp.prometheus_name("9lives-x") == "_9lives_x"


def _scrape(collector: ReceivedClientMetrics) -> dict:
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _received_handler_state(clock: _Clock, tmp_path) -> Any:
    """The one part of BrokerState the telemetry handlers use."""
    telemetry = ClientTelemetry(tmp_path, {}, clock)
    telemetry.manager.install({"s": {"metrics": "org.apache.kafka.producer.", "interval.ms": "1000"}})
    return types.SimpleNamespace(telemetry=telemetry)


def _push_request(sub_id: int, codec: int, payload: bytes):
    m = request_module(72, 0)
    return m.PushTelemetryRequest(client_instance_id=INSTANCE, subscription_id=sub_id, terminating=False,
                                  compression_type=codec, metrics=payload)


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])  # none, gzip, snappy, lz4, zstd
def test_a_push_in_each_compression_reaches_the_collector_with_the_client_labels(codec, tmp_path):
    clock = _Clock()
    state = _received_handler_state(clock, tmp_path)
    header = RequestHeader(api_key=71, api_version=0, correlation_id=1, client_id="orders-producer", body_offset=0)
    get: Any = handlers.handle_get_subscriptions(state, header, request_module(71, 0).GetTelemetrySubscriptionsRequest(
        client_instance_id=INSTANCE))
    assert get.error_code == ErrorCode.none
    assert get.requested_metrics == ("org.apache.kafka.producer.",)
    push_header = RequestHeader(api_key=72, api_version=0, correlation_id=2, client_id="orders-producer", body_offset=0)
    payload = compress(codec, _payload(2.5, 3)) if codec else _payload(2.5, 3)
    answer: Any = handlers.handle_push(state, push_header, _push_request(get.subscription_id, codec, payload))
    assert answer.error_code == ErrorCode.none
    labels = {"client_id": "orders-producer", "client_instance_id": str(INSTANCE), "client_software_name": "",
              "client_software_version": ""}
    samples = _scrape(state.telemetry.received)
    assert samples[("org_apache_kafka_producer_node_request_latency_avg",
                    frozenset({**labels, "node_id": "1"}.items()))] == 2.5
    assert samples[("org_apache_kafka_producer_connection_creation_total", frozenset(labels.items()))] == 3.0


def test_a_payload_that_does_not_decode_is_refused(tmp_path):
    clock = _Clock()
    state = _received_handler_state(clock, tmp_path)
    header = RequestHeader(api_key=71, api_version=0, correlation_id=1, client_id="c", body_offset=0)
    get: Any = handlers.handle_get_subscriptions(state, header, request_module(71, 0).GetTelemetrySubscriptionsRequest(
        client_instance_id=INSTANCE))
    answer: Any = handlers.handle_push(state, header, _push_request(get.subscription_id, 4, b"not zstd"))
    assert answer.error_code == ErrorCode.invalid_record


def test_delta_sums_add_up_gauges_replace_and_silent_clients_disappear():
    clock = _Clock()
    received = ReceivedClientMetrics(clock)
    labels = {"client_id": "c", "client_instance_id": str(INSTANCE), "client_software_name": "librdkafka",
              "client_software_version": "2.16.1"}
    for latency, created in ((2.5, 3), (4.0, 2)):
        received.record(labels, otlp.decode(_payload(latency, created))[1], expiry_ms=60_000)
    samples = _scrape(received)
    assert samples[("org_apache_kafka_producer_connection_creation_total", frozenset(labels.items()))] == 5.0
    assert samples[("org_apache_kafka_producer_node_request_latency_avg",
                    frozenset({**labels, "node_id": "1"}.items()))] == 4.0
    clock.ms += 60_001
    assert _scrape(received) == {}
