"""The broker's metrics without a network: every name names.py lists is what a scrape shows (no
more, no less), the /metrics endpoint serves prometheus-client's exposition on an OS-picked port,
and the response error walker counts every error code of a kio response."""

from __future__ import annotations

import asyncio
import datetime
import urllib.request

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from oncestream.broker.config import BrokerConfig
from oncestream.broker.memory_pool import RequestMemoryPool
from oncestream.broker.metrics import names
from oncestream.broker.metrics.collector import BrokerStateCollector
from oncestream.broker.metrics.recorder import PrometheusBrokerMetrics, RequestTiming
from oncestream.broker.state import BrokerState
from oncestream.metrics.endpoint import MetricsEndpoint, MetricsListenError, parse_listen
from oncestream.protocol.codec import build
from oncestream.protocol.fetch_response import PartitionFetchResult
from oncestream.protocol.schemas import response_module


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_a_scrape_shows_exactly_the_names_listed(tmp_path):
    state = BrokerState(tmp_path / "data", BrokerConfig.from_properties("127.0.0.1", 0, {}))
    try:
        state.logs.create_topic("t", 2, {}, state.now_ms())
        metrics = PrometheusBrokerMetrics()
        metrics.registry.register(BrokerStateCollector(state.logs, state.transactions.coordinator,
                                                       state.groups.coordinator, RequestMemoryPool(1024), state.now_ms))
        timing = RequestTiming()
        timing.api_key, timing.api_version, timing.handler_start_s, timing.handler_end_s = 0, 9, 1.0, 1.002
        metrics.request_done(timing, 0.999, 1.003)
        metrics.produced("t", 120, 3)
        result = PartitionFetchResult(partition_index=0, error_code=0, high_watermark=3, last_stable_offset=3,
                                      log_start_offset=0, aborted_transactions=None)
        result.size_bytes = 120
        metrics.fetched([("t", [result])])
        metrics.connection_opened("PLAINTEXT")
        metrics.failed_authentication("PLAINTEXT")
        metrics.flush_round(0.004)
        samples = _samples(generate_latest(metrics.registry).decode())
    finally:
        state.close()
    shown = {name for name, _ in samples if not name.endswith("_created")}
    # Groups and their offsets show once a group exists; everything else shows now.
    assert shown == names.exposed_names() - {names.GROUP_COUNT, names.GROUP_STATE, names.GROUP_OFFSET, names.GROUP_LAG}
    assert samples[(f"{names.BYTES_IN}_total", frozenset({("topic", "t")}))] == 120
    assert samples[(f"{names.MESSAGES_IN}_total", frozenset({("topic", "t")}))] == 3
    assert samples[(f"{names.BYTES_OUT}_total", frozenset({("topic", "t")}))] == 120
    assert samples[(f"{names.TOTAL_TIME}_sum", frozenset({("request", "Produce")}))] == pytest.approx(4.0)
    assert samples[(f"{names.LOCAL_TIME}_sum", frozenset({("request", "Produce")}))] == pytest.approx(2.0)
    assert samples[(f"{names.REQUESTS}_total", frozenset({("request", "Produce"), ("version", "9")}))] == 1
    assert samples[(f"{names.ERRORS}_total", frozenset({("request", "Fetch"), ("error", "NONE")}))] == 1
    assert samples[(names.LOG_END, frozenset({("topic", "t"), ("partition", "1")}))] == 0
    assert samples[(names.MEMORY_POOL_AVAILABLE, frozenset())] == 1024


def test_every_error_code_of_a_response_is_counted():
    m = response_module(0, 9)
    part = {"base_offset": -1, "log_start_offset": -1, "log_append_time": None, "error_message": None, "record_errors": ()}
    response = build(m.ProduceResponse, throttle_time=datetime.timedelta(0), responses=(
        build(m.TopicProduceResponse, name="a", partition_responses=(
            build(m.PartitionProduceResponse, index=0, error_code=0, **part),
            build(m.PartitionProduceResponse, index=1, error_code=3, **part))),
        build(m.TopicProduceResponse, name="b", partition_responses=(
            build(m.PartitionProduceResponse, index=0, error_code=3, **part),)),
    ))
    metrics = PrometheusBrokerMetrics()
    metrics.response_errors(0, response)
    samples = _samples(generate_latest(metrics.registry).decode())
    errors = {dict(labels)["error"]: v for (name, labels), v in samples.items() if name == f"{names.ERRORS}_total"}
    assert errors == {"NONE": 1, "UNKNOWN_TOPIC_OR_PARTITION": 2}


def test_the_endpoint_serves_on_an_os_picked_port():
    metrics = PrometheusBrokerMetrics()
    metrics.produced("t", 5, 1)

    async def scrape() -> tuple[bytes, int]:
        endpoint = MetricsEndpoint(metrics.registry, "127.0.0.1", 0)
        await endpoint.start()
        try:
            assert endpoint.port != 0

            def get(path: str) -> tuple[bytes, int]:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{endpoint.port}{path}", timeout=10) as response:
                        return response.read(), response.status
                except urllib.error.HTTPError as exc:
                    return b"", exc.code

            body, status = await asyncio.to_thread(get, "/metrics")
            _, missing = await asyncio.to_thread(get, "/nope")
            assert missing == 404
            return body, status
        finally:
            endpoint.close()

    body, status = asyncio.run(scrape())
    assert status == 200
    assert _samples(body.decode())[(f"{names.BYTES_IN}_total", frozenset({("topic", "t")}))] == 5


def test_metrics_listen_is_host_and_port():
    assert parse_listen("0.0.0.0:9404") == ("0.0.0.0", 9404)
    assert parse_listen("[::1]:0") == ("::1", 0)
    for bad in ("9404", "host:", "host:99999"):
        try:
            parse_listen(bad)
        except MetricsListenError:
            continue
        raise AssertionError(f"{bad!r} accepted")
