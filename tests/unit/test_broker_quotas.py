"""Client quotas, sans-io (KIP-13, KIP-55, KIP-124, KIP-546, KIP-599): the eight levels of entity
precedence, Kafka's sampled rate and throttle time with an injected clock, the controller
mutation token bucket, AlterClientQuotas' validation, DescribeClientQuotas' filters, the durable
store's round trip, and the throttle field put into responses."""

from __future__ import annotations

import asyncio
import datetime
import struct
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from oncestream.broker.quotas.enforcement import QuotaEnforcer, TimedCoroutine, quota_user, with_throttle
from oncestream.broker.quotas.entities import (
    ABSENT,
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    ClientQuotaConfigs,
    QuotaEntity,
    QuotaOp,
)
from oncestream.broker.quotas.managers import INACTIVE_SENSOR_EXPIRY_MS, ClientQuotaManagers, QuotaWindow
from oncestream.broker.quotas.rate import SampledRate, TokenBucket
from oncestream.broker.quotas.store import (
    CLIENT_QUOTAS_FILE,
    FileClientQuotaStore,
    load_client_quotas,
    save_client_quotas,
)
from oncestream.errors import InvalidRequestError, StorageError
from oncestream.protocol import api_keys as k
from oncestream.protocol.codec import build
from oncestream.protocol.fetch_response import encode_fetch_response
from oncestream.protocol.fetch_response_view import parse_fetch_response
from oncestream.protocol.schemas import response_module

# Kafka's DefaultQuotaCallback order, highest first: (entity, the measurement key it shares).
LEVELS = [
    (QuotaEntity("alice", "app"), ("alice", "app")),
    (QuotaEntity("alice", None), ("alice", "app")),
    (QuotaEntity("alice", ABSENT), ("alice", "")),
    (QuotaEntity(None, "app"), ("alice", "app")),
    (QuotaEntity(None, None), ("alice", "app")),
    (QuotaEntity(None, ABSENT), ("alice", "")),
    (QuotaEntity(ABSENT, "app"), ("", "app")),
    (QuotaEntity(ABSENT, None), ("", "app")),
]


def _set(configs: ClientQuotaConfigs, entity: QuotaEntity, key: str, value: float) -> ClientQuotaConfigs:
    return configs.altered(entity, [QuotaOp(key, value, remove=False)])


def test_the_eight_levels_match_in_kafkas_precedence_order():
    configs = ClientQuotaConfigs()
    for rank, (entity, _) in enumerate(LEVELS):
        configs = _set(configs, entity, PRODUCER_BYTE_RATE, 1000 * (rank + 1))
    # Remove the highest level one at a time: the next one down takes over, with its sharing key.
    for rank, (entity, metric_key) in enumerate(LEVELS):
        assert configs.quota_for("alice", "app", PRODUCER_BYTE_RATE) == (1000 * (rank + 1), metric_key)
        configs = configs.altered(entity, [QuotaOp(PRODUCER_BYTE_RATE, 0, remove=True)])
    assert configs.quota_for("alice", "app", PRODUCER_BYTE_RATE) is None
    assert configs.is_empty()


def test_each_quota_type_is_matched_on_its_own_and_other_clients_are_not_caught():
    configs = _set(ClientQuotaConfigs(), QuotaEntity("alice", ABSENT), PRODUCER_BYTE_RATE, 500)
    configs = _set(configs, QuotaEntity(ABSENT, None), CONSUMER_BYTE_RATE, 700)
    assert configs.quota_for("alice", "x", CONSUMER_BYTE_RATE) == (700, ("", "x"))
    assert configs.quota_for("bob", "x", PRODUCER_BYTE_RATE) is None
    assert configs.quota_for("alice", "x", REQUEST_PERCENTAGE) is None


@pytest.mark.parametrize(("entity", "ops", "message"), [
    ([("user", "a")], [QuotaOp("producer_byte_rate", -1, False)], "positive"),
    ([("user", "a")], [QuotaOp("producer_byte_rate", 10.5, False)], "whole number"),
    ([("user", "a")], [QuotaOp("bogus", 1, False)], "Invalid configuration key bogus"),
    ([("user", "a")], [QuotaOp("request_percentage", 1, False), QuotaOp("request_percentage", 2, False)], "Duplicate"),
    ([("ip", "1.2.3.4")], [QuotaOp("producer_byte_rate", 1, False)], "Unhandled client quota entity type: ip"),
    ([("user", "a"), ("user", "b")], [QuotaOp("producer_byte_rate", 1, False)], "Duplicate user"),
    ([], [QuotaOp("producer_byte_rate", 1, False)], "empty"),
])
def test_alter_validation_is_invalid_request_with_kafkas_reason(entity, ops, message):
    with pytest.raises(InvalidRequestError, match=message):
        ClientQuotaConfigs().altered(QuotaEntity.from_parts(entity), ops)


def test_describe_filters_exact_default_specified_and_strict():
    configs = ClientQuotaConfigs()
    for entity, _ in LEVELS:
        configs = _set(configs, entity, REQUEST_PERCENTAGE, 50)
    configs = _set(configs, QuotaEntity("bob", ABSENT), REQUEST_PERCENTAGE, 10)

    def described(components, strict=False):
        return {e.describe() for e, _ in configs.describe(components, strict)}

    assert described([("user", 0, "alice")]) == {"user=alice, client-id=app", "user=alice, client-id=<default>",
                                                 "user=alice"}
    assert described([("user", 0, "alice")], strict=True) == {"user=alice"}
    assert described([("user", 1, None), ("client-id", 2, None)], strict=True) == {"user=<default>, client-id=app"}
    assert described([("user", 2, None)], strict=True) == {"user=alice", "user=bob"}
    assert len(described([])) == 9
    with pytest.raises(InvalidRequestError):
        configs.describe([("user", 0, None)], False)
    with pytest.raises(InvalidRequestError):
        configs.describe([("user", 1, None), ("user", 2, None)], False)


def test_sampled_rate_and_throttle_time_are_kafkas():
    rate = SampledRate(samples=11, window_ms=1000, now_ms=0)
    rate.record(1000, 0)
    # Fewer than samples-1 full windows elapsed: divided by 10 windows (Kafka's Rate.windowSize).
    assert rate.rate_per_s(0) == pytest.approx(100.0)
    # Kafka's estimate, (rate - bound) / bound * window, is 10 s; but at 10 s the 1000 bytes are
    # still kept over a 10 s window (100/s): the rate falls within 50/s only when their sample
    # expires, 11 s after it started.
    assert rate.throttle_ms(50, 0) == 11_000
    assert rate.rate_per_s(10_000) == pytest.approx(100.0)
    assert rate.rate_per_s(11_000) == 0
    assert rate.throttle_ms(100, 0) == 0
    # Twelve quiet seconds later every sample has expired.
    assert rate.rate_per_s(12_000) == 0


def test_a_client_that_waits_its_throttle_time_holds_the_quota():
    """The acceptance property of the byte-rate quota, with an injected clock: a producer sending
    100 KB requests and honouring each throttle time gets within 10% of a 200 KB/s quota over a
    minute (Kafka's throttle estimate lets such a client run ~15% above it: see rate.py)."""
    now = [0]
    configs = _set(ClientQuotaConfigs(), QuotaEntity(ABSENT, "greedy"), PRODUCER_BYTE_RATE, 200_000)
    managers = ClientQuotaManagers(configs, lambda: now[0])
    sent = 0
    while now[0] < 60_000:
        throttle_ms = managers.record_produce("ANONYMOUS", "greedy", 100_000)
        sent += 100_000
        now[0] += throttle_ms + 5
    assert sent / (now[0] / 1000) == pytest.approx(200_000, rel=0.10)
    # The unthrottled client is never throttled.
    assert managers.record_produce("ANONYMOUS", "other", 10**9) == 0


def test_request_time_throttle_is_bounded_by_one_window():
    configs = _set(ClientQuotaConfigs(), QuotaEntity("alice", ABSENT), REQUEST_PERCENTAGE, 1)
    managers = ClientQuotaManagers(configs, lambda: 0, QuotaWindow(11, 1000))
    # 10 s of handler time against 1% of a thread: Kafka caps the throttle at one window.
    assert managers.record_request_time("alice", "c", 10_000) == 1000


def test_idle_measurements_expire_after_an_hour():
    now = [0]
    configs = _set(ClientQuotaConfigs(), QuotaEntity(ABSENT, None), PRODUCER_BYTE_RATE, 1000)
    managers = ClientQuotaManagers(configs, lambda: now[0])
    for n in range(5):
        managers.record_produce("u", f"short-lived-{n}", 10)
    assert managers.produce.measured() == 5
    now[0] = INACTIVE_SENSOR_EXPIRY_MS
    managers.record_produce("u", "new", 10)
    assert managers.produce.measured() == 1


def test_controller_mutation_rate_kip_599_strict_and_permissive():
    bucket = TokenBucket(samples=11, window_ms=1000, now_ms=0)
    bucket.record(100, rate_per_s=10, now_ms=0)  # burst 110: still in credit
    assert bucket.throttle_ms(10, 0) == 0
    bucket.record(20, rate_per_s=10, now_ms=0)  # 10 tokens in debt: one second at 10/s
    assert bucket.throttle_ms(10, 0) == 1000

    now = [0]
    configs = _set(ClientQuotaConfigs(), QuotaEntity("admin", ABSENT), "controller_mutation_rate", 10)
    managers = ClientQuotaManagers(configs, lambda: now[0])
    strict = managers.mutation_quota("admin", "c", strict=True)
    assert strict.try_record(120)  # the one that exceeds the quota is accepted
    assert strict.throttle_ms == 1000
    assert not strict.try_record(1)  # then refused (THROTTLING_QUOTA_EXCEEDED) until paid back
    now[0] = 1000
    assert managers.mutation_quota("admin", "c", strict=True).try_record(1)
    permissive = managers.mutation_quota("admin", "c", strict=False)
    assert permissive.try_record(50)
    assert permissive.try_record(50)
    assert permissive.throttle_ms > 0
    assert managers.mutation_quota("root", "c", strict=True).try_record(10**6)  # no quota: unlimited


def test_store_round_trip_and_damage(tmp_path):
    configs = _set(ClientQuotaConfigs(), QuotaEntity("alice", None), PRODUCER_BYTE_RATE, 1024)
    configs = _set(configs, QuotaEntity(ABSENT, None), REQUEST_PERCENTAGE, 12.5)
    save_client_quotas(tmp_path, configs)
    assert load_client_quotas(tmp_path).entries() == configs.entries()
    assert load_client_quotas(tmp_path / "nothing-yet").is_empty()
    (tmp_path / CLIENT_QUOTAS_FILE).write_text('{"version": 1, "entries": [{"entity": {}, "quotas": {}}]}')
    with pytest.raises(StorageError, match="unreadable"):
        load_client_quotas(tmp_path)


def test_throttle_time_goes_into_kio_and_framed_fetch_responses():
    m = response_module(k.PRODUCE, 9)
    produce = build(m.ProduceResponse, responses=(), throttle_time=datetime.timedelta(0))
    assert with_throttle(k.PRODUCE, 9, produce, 1234).throttle_time == datetime.timedelta(milliseconds=1234)
    for version in (4, 11, 12):
        framed = with_throttle(k.FETCH, version, encode_fetch_response(version, 7, ()), 4321)
        body = b"".join(bytes(b) for b in framed)[4:]
        header_bytes = 4 + (1 if version >= 12 else 0)
        assert parse_fetch_response(version, body, header_bytes).throttle_time_ms == 4321
    assert quota_user("User:alice") == "alice"


def test_handler_time_counts_its_steps_not_its_waits():
    """request_percentage: a handler waiting on a future (a long poll, an fsync) costs nothing
    while it waits. The clock is a counter advanced only by the timer's own reads."""
    ticks = [0.0]

    def clock_s() -> float:
        ticks[0] += 1.0
        return ticks[0]

    async def handler(done: asyncio.Future[None]) -> str:
        await done  # two steps: before and after the wait
        return "ok"

    async def main() -> tuple[str, float]:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        timed = TimedCoroutine(handler(done), clock_s)
        task = asyncio.ensure_future(timed)
        for _ in range(5):
            await asyncio.sleep(0)  # the clock must not move while the handler waits
        done.set_result(None)
        return await task, timed.busy_s

    result, busy_s = asyncio.run(main())
    assert result == "ok"
    assert busy_s == 2.0  # two steps of one tick each


def test_enforcer_sets_throttle_and_channel_mute():
    from oncestream.broker.quotas.enforcement import take_channel_mute_s

    now = [0]
    configs = _set(ClientQuotaConfigs(), QuotaEntity(ABSENT, "greedy"), PRODUCER_BYTE_RATE, 1000)
    managers = ClientQuotaManagers(configs, lambda: now[0])
    enforcer = QuotaEnforcer(lambda: managers, clock_s=lambda: 0.0)
    m = response_module(k.PRODUCE, 9)

    def handler() -> object:
        return build(m.ProduceResponse, responses=(), throttle_time=datetime.timedelta(0))

    async def main() -> tuple[Any, float | None]:
        response = await enforcer.call(k.PRODUCE, 9, "User:ANONYMOUS", "greedy", 20_000, handler, False)
        return response, take_channel_mute_s()

    response, mute_s = asyncio.run(main())
    # 20 KB against 1 KB/s: within the quota once the sample expires, 11 s later.
    assert response.throttle_time == datetime.timedelta(seconds=11)
    assert mute_s == 11.0


def test_a_throttled_fetch_is_capped_answered_empty_and_unrecorded():
    """Kafka's fetch quota: the handler sees maxQuotaWindowBytes (rate x (samples - 1) x window)
    as its size cap; a fetch that is throttled goes out with no partitions, its correlation id and
    throttle time, and its bytes are taken back from the rate."""
    from oncestream.broker.quotas.enforcement import count_fetch_when_sent, fetch_quota_max_bytes, take_channel_mute_s
    from oncestream.protocol.fetch_response import PartitionFetchResult

    configs = _set(ClientQuotaConfigs(), QuotaEntity(ABSENT, "reader"), CONSUMER_BYTE_RATE, 1000)
    managers = ClientQuotaManagers(configs, lambda: 0, QuotaWindow(11, 1000))
    enforcer = QuotaEnforcer(lambda: managers, clock_s=lambda: 0.0)
    seen_caps: list[int | None] = []
    counted: list[str] = []

    def handler() -> list[Any]:
        seen_caps.append(fetch_quota_max_bytes())
        count_fetch_when_sent(lambda: counted.append("bytes out"))
        part = PartitionFetchResult(partition_index=0, error_code=0, high_watermark=9, last_stable_offset=9,
                                    log_start_offset=0, aborted_transactions=None)
        part.chunks, part.size_bytes = [b"r" * 20_000], 20_000
        return encode_fetch_response(12, 77, [("t", [part])])

    async def main(client_id: str) -> tuple[Any, float | None]:
        response = await enforcer.call(k.FETCH, 12, "User:ANONYMOUS", client_id, 100, handler, False)
        return response, take_channel_mute_s()

    response, mute_s = asyncio.run(main("reader"))
    assert seen_caps == [10_000]
    assert counted == []  # nothing went out: no bytes out (Kafka counts what it sends)
    body = b"".join(bytes(b) for b in response)
    assert len(body) < 100  # no records: an empty response
    parsed = parse_fetch_response(12, body[4:], 5)
    assert parsed.throttle_time_ms > 0
    assert mute_s is not None
    assert int.from_bytes(body[4:8], "big") == 77
    # Un-recorded: the next fetch of the same size is throttled by the same amount, not more.
    again, _ = asyncio.run(main("reader"))
    assert parse_fetch_response(12, b"".join(bytes(b) for b in again)[4:], 5).throttle_time_ms == parsed.throttle_time_ms
    # A client without a fetch quota sees no cap and keeps its records.
    other, _ = asyncio.run(main("other"))
    assert seen_caps[-1] is None
    assert sum(len(b) for b in other) > 20_000
    assert counted == ["bytes out"]
    count_fetch_when_sent(lambda: counted.append("outside a quota decision"))  # counted at once
    assert counted[-1] == "outside a quota decision"


def _handler_state(tmp_path, authorizer=None):
    from concurrent.futures import ThreadPoolExecutor
    from types import SimpleNamespace

    return SimpleNamespace(authorizer=authorizer, client_quotas=ClientQuotaManagers(ClientQuotaConfigs(), lambda: 0),
                           client_quota_lock=asyncio.Lock(), data_dir=tmp_path, disk_fsync=None,
                           disk_executor=ThreadPoolExecutor(1),
                           client_quota_store=FileClientQuotaStore(tmp_path, lambda: None))


def _alter_request(version: int, *entries: tuple[list[tuple[str, str | None]], list[tuple[str, float, bool]]]) -> Any:
    from oncestream.protocol.schemas import request_module

    m = request_module(k.ALTER_CLIENT_QUOTAS, version)
    return m.AlterClientQuotasRequest(validate_only=False, entries=tuple(
        m.EntryData(entity=tuple(m.EntityData(entity_type=t, entity_name=n) for t, n in entity),
                    ops=tuple(m.OpData(key=key, value=value, remove=remove) for key, value, remove in ops))
        for entity, ops in entries))


def test_alter_client_quotas_handler_stores_before_answering_and_answers_each_entry(tmp_path):
    from oncestream.broker.handlers import client_quotas
    from oncestream.protocol.codec import RequestHeader
    from oncestream.protocol.schemas import request_module

    state = _handler_state(tmp_path)
    request = _alter_request(1, ([("user", "alice")], [("producer_byte_rate", 1024, False)]),
                             ([("client-id", None)], [("nonsense", 1, False)]))
    response: Any = asyncio.run(client_quotas.handle_alter(state, RequestHeader(k.ALTER_CLIENT_QUOTAS, 1, 1, None, 0), request))
    assert [e.error_code for e in response.entries] == [ErrorCode.none, ErrorCode.invalid_request]
    assert response.entries[1].error_message == "Invalid configuration key nonsense"
    assert load_client_quotas(tmp_path).value(QuotaEntity("alice", ABSENT), PRODUCER_BYTE_RATE) == 1024
    assert state.client_quotas.configs.value(QuotaEntity("alice", ABSENT), PRODUCER_BYTE_RATE) == 1024

    m = request_module(k.DESCRIBE_CLIENT_QUOTAS, 0)
    described: Any = client_quotas.handle_describe(state, RequestHeader(k.DESCRIBE_CLIENT_QUOTAS, 0, 1, None, 0),
                                                   m.DescribeClientQuotasRequest(components=(), strict=False))
    assert [(e.entity[0].entity_name, e.values[0].key, e.values[0].value) for e in described.entries] == [
        ("alice", PRODUCER_BYTE_RATE, 1024)]


def test_client_quota_apis_need_describe_configs_and_alter_configs_on_the_cluster(tmp_path):
    from oncestream.authz.authorizer import StandardAuthorizer
    from oncestream.broker.handlers import client_quotas
    from oncestream.protocol.codec import RequestHeader
    from oncestream.protocol.schemas import request_module

    state = _handler_state(tmp_path, StandardAuthorizer([], super_users=[]))  # ANONYMOUS may do nothing
    request = _alter_request(0, ([("user", "alice")], [("producer_byte_rate", 1024, False)]))
    response: Any = asyncio.run(client_quotas.handle_alter(state, RequestHeader(k.ALTER_CLIENT_QUOTAS, 0, 1, None, 0), request))
    assert [e.error_code for e in response.entries] == [ErrorCode.cluster_authorization_failed]
    assert state.client_quotas.configs.is_empty()
    assert not (tmp_path / CLIENT_QUOTAS_FILE).exists()
    m = request_module(k.DESCRIBE_CLIENT_QUOTAS, 1)
    described: Any = client_quotas.handle_describe(state, RequestHeader(k.DESCRIBE_CLIENT_QUOTAS, 1, 1, None, 0),
                                                   m.DescribeClientQuotasRequest(components=(), strict=False))
    assert described.error_code == ErrorCode.cluster_authorization_failed
    assert described.entries is None


def test_pipelined_produce_is_recorded_as_read_and_answered_without_recording_again():
    """KIP-219 with pipelined Produce (cluster mode): the bytes count as each frame is read, so
    the frame that crosses the quota is the one throttled (the server reads nothing after it);
    the requests read before it are handled afterwards, answered with the throttle time their
    read gave, and nothing is recorded twice."""
    from oncestream.broker.quotas.enforcement import produce_recorded_at_read, take_channel_mute_s

    now = [0]
    configs = _set(ClientQuotaConfigs(), QuotaEntity(ABSENT, "greedy"), PRODUCER_BYTE_RATE, 10_000)
    managers = ClientQuotaManagers(configs, lambda: now[0])
    enforcer = QuotaEnforcer(lambda: managers, clock_s=lambda: 0.0)
    m = response_module(k.PRODUCE, 9)
    # 30 KB frames arrive one second apart; the first window holds 10 s of the quota (100 KB).
    read_throttles_ms = []
    for _ in range(5):
        read_throttles_ms.append(enforcer.record_produce_read("User:ANONYMOUS", "greedy", 30_000))
        if read_throttles_ms[-1]:
            break  # the connection is muted: the fifth frame is not read yet
        now[0] += 1000
    assert read_throttles_ms[:3] == [0, 0, 0]
    assert len(read_throttles_ms) == 4
    crossing_ms = read_throttles_ms[3]
    # 120 KB at 10 KB/s; 8 s later the first frame's sample expires and 90 KB over 10 s is within.
    assert crossing_ms == 8000
    assert enforcer.record_produce_read("User:ANONYMOUS", "other", 10**9) == 0  # no quota: not measured

    async def handled(throttle_ms: int) -> tuple[Any, float | None]:
        async def handle() -> tuple[Any, float | None]:  # its own task, as ProducePipeline runs it
            produce_recorded_at_read(throttle_ms)
            response = await enforcer.call(k.PRODUCE, 9, "User:ANONYMOUS", "greedy", 30_000,
                                           lambda: build(m.ProduceResponse, responses=(),
                                                         throttle_time=datetime.timedelta(0)), False)
            return response, take_channel_mute_s()
        return await asyncio.ensure_future(handle())

    async def main() -> list[tuple[Any, float | None]]:
        return [await handled(throttle_ms) for throttle_ms in read_throttles_ms]

    now[0] += 50  # handled later (an upload and a commit)
    answers = asyncio.run(main())
    assert [response.throttle_time for response, _ in answers] == [datetime.timedelta(0)] * 3 + [
        datetime.timedelta(milliseconds=crossing_ms)]
    assert [mute_s for _, mute_s in answers] == [None, None, None, crossing_ms / 1000]
    # Recorded once: still 120 KB (recorded again, the 240 KB would keep it throttled longer).
    assert managers.record_produce("ANONYMOUS", "greedy", 0) == crossing_ms - 50
    # A Produce that was not recorded at read (the single broker's path) is recorded when handled:
    # 150 KB, within the quota once the first two seconds' samples expire.
    single = asyncio.run(enforcer.call(k.PRODUCE, 9, "User:ANONYMOUS", "greedy", 30_000, lambda: build(
        m.ProduceResponse, responses=(), throttle_time=datetime.timedelta(0)), False))
    assert single.throttle_time == datetime.timedelta(milliseconds=9000 - 50)


def _produce_frame(client_id: str, value_bytes: int) -> bytes:
    """A Produce v9 request frame (no size prefix) of one record of ``value_bytes``."""
    import io
    import struct
    import time

    from oncestream.protocol.codec import writer_for
    from oncestream.protocol.records import NewRecord, encode_batch
    from oncestream.protocol.schemas import request_module

    m = request_module(k.PRODUCE, 9)
    request = m.ProduceRequest(transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=30), topic_data=(
        m.TopicProduceData(name="t", partition_data=(m.PartitionProduceData(index=0, records=encode_batch(
            [NewRecord(value=b"v" * value_bytes)], now_ms=int(time.time() * 1000))),)),))
    buf = io.BytesIO()
    raw = client_id.encode()
    buf.write(struct.pack(">hhih", k.PRODUCE, 9, 1, len(raw)) + raw + b"\0")
    writer_for(type(request))(buf, request)
    return buf.getvalue()


def test_dispatcher_records_a_pipelined_produce_frame_as_read(tmp_path):
    """The server hands each pipelined Produce frame to Dispatcher.record_produce_read before it
    is handled: its client id comes from the frame's header, its user from the connection's
    principal; anything the dispatcher would refuse records nothing."""
    from oncestream.broker.config import BrokerConfig
    from oncestream.broker.connection_context import start_session
    from oncestream.broker.dispatch import Dispatcher
    from oncestream.broker.state import BrokerState

    state = BrokerState(tmp_path, BrokerConfig.from_properties("127.0.0.1", 0, {}))
    try:
        configs = _set(ClientQuotaConfigs(), QuotaEntity("ANONYMOUS", "greedy"), PRODUCER_BYTE_RATE, 1000)
        state.client_quotas = ClientQuotaManagers(configs, lambda: 0)
        dispatcher = Dispatcher(state)
        frame = _produce_frame("greedy", 20_000)

        async def connection() -> list[int]:
            start_session(("127.0.0.1", 5555), principal_builder=state.principal_builder)
            return [dispatcher.record_produce_read(frame), dispatcher.record_produce_read(_produce_frame("calm", 20_000)),
                    dispatcher.record_produce_read(frame[:3]),  # malformed: refused when handled
                    dispatcher.record_produce_read(struct.pack(">hhih", k.PRODUCE, 99, 1, 0))]  # no such version

        throttles_ms = asyncio.run(connection())
        # 20 KB and its framing against 1 KB/s: the first window holds 10 KB.
        assert throttles_ms[0] == state.client_quotas.record_produce("ANONYMOUS", "greedy", 0) > 10_000
        assert throttles_ms[1:] == [0, 0, 0]
        assert state.client_quotas.produce.measured() == 1
    finally:
        state.close()
