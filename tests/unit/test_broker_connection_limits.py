"""Connection limits, sans-io: ``max.connections``, ``max.connections.per.ip`` (+ overrides) and
``connections.max.idle.ms`` (Kafka's names and defaults), and their parsing from broker
properties."""

from __future__ import annotations

import pytest

from oncestream.broker.config import BrokerConfig
from oncestream.broker.connection_limits import (
    UNLIMITED,
    ConnectionAccountingError,
    ConnectionQuotas,
    IdleTracker,
    parse_per_ip_overrides,
)
from oncestream.errors import InvalidConfigError


def test_broker_wide_limit_refuses_the_next_connection_until_one_closes() -> None:
    quotas = ConnectionQuotas(max_connections=3)
    assert [quotas.try_admit(ip) for ip in ("10.0.0.1", "10.0.0.2", "10.0.0.1")] == [None, None, None]
    assert "max.connections=3" in (quotas.try_admit("10.0.0.3") or "")
    assert quotas.total == 3
    quotas.release("10.0.0.2")
    assert quotas.try_admit("10.0.0.3") is None


def test_per_ip_limit_and_overrides() -> None:
    quotas = ConnectionQuotas(max_per_ip=2, per_ip_overrides={"127.0.0.2": 3})
    assert quotas.try_admit("127.0.0.1") is None
    assert quotas.try_admit("127.0.0.1") is None
    assert "127.0.0.1" in (quotas.try_admit("127.0.0.1") or "")
    assert [quotas.try_admit("127.0.0.2") for _ in range(3)] == [None, None, None]  # its override: 3
    assert "max.connections.per.ip=3" in (quotas.try_admit("127.0.0.2") or "")
    assert (quotas.count("127.0.0.1"), quotas.count("127.0.0.2"), quotas.total) == (2, 3, 5)
    quotas.release("127.0.0.1")
    assert quotas.try_admit("127.0.0.1") is None


def test_releasing_an_unknown_connection_is_a_bookkeeping_error() -> None:
    quotas = ConnectionQuotas()
    with pytest.raises(ConnectionAccountingError):
        quotas.release("10.0.0.1")
    assert quotas.total == 0


def test_idle_clock_runs_only_while_the_broker_waits_for_the_client() -> None:
    idle = IdleTracker(idle_ms=1000, now_ms=0)
    assert not idle.expired(999)
    assert idle.expired(1000)
    idle.activity(900)  # bytes arrived (a part of a frame counts)
    assert not idle.expired(1899)
    assert idle.expired(1900)
    idle.start_request()  # a long-poll fetch: the client waits for us, it is not idle
    assert idle.deadline_ms() is None
    assert not idle.expired(10_000_000)
    idle.finish_request(20_000)
    assert idle.deadline_ms() == 21_000
    idle.activity(5)  # a late, older stamp never moves the clock back
    assert idle.deadline_ms() == 21_000


def test_configs_have_kafkas_names_and_defaults() -> None:
    default = BrokerConfig.from_properties("127.0.0.1", 0, {})
    assert default.connections_max_idle_ms == 600_000
    assert default.max_connections == default.max_connections_per_ip == UNLIMITED
    assert default.max_connections_per_ip_overrides == {}
    assert default.queued_max_request_bytes == 256 * 1024 * 1024
    custom = BrokerConfig.from_properties("127.0.0.1", 0, {
        "connections.max.idle.ms": "500",
        "max.connections": "3",
        "max.connections.per.ip": "2",
        "max.connections.per.ip.overrides": "127.0.0.2:5, host.example:0",
        "socket.request.max.bytes": "4194304",
        "queued.max.request.bytes": "4194304",
    })
    assert (custom.connections_max_idle_ms, custom.max_connections, custom.max_connections_per_ip) == (500, 3, 2)
    assert custom.max_connections_per_ip_overrides == {"127.0.0.2": 5, "host.example": 0}
    assert custom.queued_max_request_bytes == 4 * 1024 * 1024
    assert BrokerConfig.from_properties("h", 0, {"queued.max.request.bytes": "-1"}).queued_max_request_bytes == -1


@pytest.mark.parametrize("props", [
    {"connections.max.idle.ms": "0"},
    {"max.connections": "0"},
    {"max.connections.per.ip": "many"},
    {"max.connections.per.ip.overrides": "127.0.0.1"},
    {"max.connections.per.ip.overrides": "127.0.0.1:-2"},
    # Kafka's rule: a pool smaller than the largest request could never admit it.
    {"queued.max.request.bytes": "1048576"},
    {"queued.max.request.bytes": "0"},
])
def test_bad_limit_configs_are_refused(props: dict[str, str]) -> None:
    with pytest.raises(InvalidConfigError):
        BrokerConfig.from_properties("127.0.0.1", 0, props)


def test_override_parsing_keeps_ipv6_hosts_whole() -> None:
    assert parse_per_ip_overrides("::1:4,") == {"::1": 4}
