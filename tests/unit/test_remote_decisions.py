"""The RemoteLogManager's sans-io decisions: remote retention, the capped backoff, the broker keys."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from oncestream.broker.config import BrokerConfig
from oncestream.errors import InvalidConfigError
from oncestream.remote.backoff import Backoff, BackoffPolicy
from oncestream.remote.manager_config import RemoteLogManagerConfig
from oncestream.remote.retention import RetentionLimits, plan_remote_deletion


@dataclass(frozen=True)
class Seg:
    base_offset: int
    last_offset: int
    size_bytes: int
    max_timestamp_ms: int


SEGMENTS = [Seg(0, 99, 1000, 1_000), Seg(100, 199, 1000, 2_000), Seg(200, 299, 1000, 3_000)]
UNLIMITED = RetentionLimits(retention_ms=-1, retention_bytes=-1)


def test_nothing_goes_without_limits_or_log_start_move() -> None:
    plan = plan_remote_deletion(SEGMENTS, log_start_offset=0, local_only_bytes=5000, limits=UNLIMITED, now_ms=10**9)
    assert plan.segments == ()
    assert plan.log_start_offset == 0


def test_segments_wholly_below_the_log_start_go_and_the_one_holding_it_stays() -> None:
    plan = plan_remote_deletion(SEGMENTS, log_start_offset=150, local_only_bytes=0, limits=UNLIMITED, now_ms=0)
    assert [s.base_offset for s in plan.segments] == [0]
    assert plan.reasons == ("log-start",)
    assert plan.log_start_offset == 150  # never moves backwards to the deleted segment's end


def test_retention_ms_by_the_segment_max_timestamp_stops_at_the_first_young_one() -> None:
    limits = RetentionLimits(retention_ms=1_500, retention_bytes=-1)
    # now 3_600: segment 0 (1_000) and 1 (2_000) are older than 1_500 ms; 2 (3_000) is not
    plan = plan_remote_deletion(SEGMENTS, log_start_offset=0, local_only_bytes=0, limits=limits, now_ms=3_600)
    assert [s.base_offset for s in plan.segments] == [0, 100]
    assert plan.log_start_offset == 200
    assert plan.reasons == ("retention.ms", "retention.ms")


def test_retention_ms_never_leaves_a_hole() -> None:
    # the middle segment is old but its predecessor is young: nothing goes
    segments = [Seg(0, 99, 1000, 9_000), Seg(100, 199, 1000, 1_000)]
    limits = RetentionLimits(retention_ms=1_000, retention_bytes=-1)
    plan = plan_remote_deletion(segments, log_start_offset=0, local_only_bytes=0, limits=limits, now_ms=9_500)
    assert plan.segments == ()


def test_retention_bytes_counts_the_local_part_not_yet_copied() -> None:
    limits = RetentionLimits(retention_ms=-1, retention_bytes=2_500)
    # 3000 remote + 1000 local-only = 4000; excess 1500: only the oldest 1000-byte segment fits
    plan = plan_remote_deletion(SEGMENTS, log_start_offset=0, local_only_bytes=1000, limits=limits, now_ms=0)
    assert [s.base_offset for s in plan.segments] == [0]
    assert plan.log_start_offset == 100
    plan = plan_remote_deletion(SEGMENTS, log_start_offset=0, local_only_bytes=0, limits=limits, now_ms=0)
    assert plan.segments == ()  # 500 bytes over: deleting a 1000-byte segment would go below the limit
    plan = plan_remote_deletion(SEGMENTS, log_start_offset=0, local_only_bytes=2_600, limits=limits, now_ms=0)
    assert [s.base_offset for s in plan.segments] == [0, 100, 200]


def test_backoff_doubles_to_the_cap_and_resets_on_success() -> None:
    policy = BackoffPolicy(initial_ms=500, max_ms=3_000, jitter=0.0)
    assert [policy.delay_ms(n, 0.5) for n in range(1, 7)] == [500, 1000, 2000, 3000, 3000, 3000]
    backoff = Backoff(policy, lambda: 0.5)
    assert backoff.ready(0)
    assert backoff.failed(100) == 500
    assert not backoff.ready(599)
    assert backoff.ready(600)
    assert backoff.failed(600) == 1000
    backoff.succeeded()
    assert backoff.ready(600)
    assert backoff.failed(700) == 500


def test_backoff_jitter_stays_in_its_band_and_under_the_cap() -> None:
    policy = BackoffPolicy(initial_ms=1000, max_ms=30_000, jitter=0.2)
    assert policy.delay_ms(1, 0.0) == 800
    assert policy.delay_ms(1, 0.999) == 1199
    assert policy.delay_ms(40, 0.999) == 30_000


def test_broker_keys_use_kafka_names_and_defaults() -> None:
    config = BrokerConfig.from_properties("127.0.0.1", 0, {}).remote_log
    assert config == RemoteLogManagerConfig()
    assert (config.enabled, config.task_interval_ms, config.thread_pool_size) == (False, 30000, 2)
    assert (config.retry_backoff_ms, config.retry_backoff_max_ms, config.retry_jitter) == (500, 30000, 0.2)
    assert (config.reader_threads, config.fetch_max_wait_ms, config.index_cache_bytes) == (10, 500, 1073741824)
    parsed = BrokerConfig.from_properties("127.0.0.1", 0, {
        "remote.log.storage.system.enable": "true", "rsm.config.storage.uri": "s3://bucket/p",
        "remote.log.manager.task.interval.ms": "250", "remote.log.manager.thread.pool.size": "3",
        "remote.log.manager.task.retry.backoff.max.ms": "2000",
    }).remote_log
    assert parsed.enabled
    assert parsed.storage_uri == "s3://bucket/p"
    assert (parsed.task_interval_ms, parsed.thread_pool_size, parsed.retry_backoff_max_ms) == (250, 3, 2000)


@pytest.mark.parametrize("props", [
    {"remote.log.storage.system.enable": "true"},  # no storage uri
    {"remote.log.storage.system.enable": "maybe"},
    {"remote.log.manager.task.interval.ms": "0"},
    {"remote.log.manager.thread.pool.size": "x"},
    {"remote.log.manager.task.retry.jitter": "0.7"},
])
def test_bad_remote_keys_fail_the_start(props: dict[str, str]) -> None:
    with pytest.raises(InvalidConfigError):
        BrokerConfig.from_properties("127.0.0.1", 0, props)
