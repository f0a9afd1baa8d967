"""Three cluster brokers under librdkafka load while PostgreSQL or the object store goes away.

Issue 22, point 7: PostgreSQL restarted during load (stopped cleanly, or SIGKILLed) and SeaweedFS
stopped and restarted. Idempotent acks=all producers write numbered records to three partitions
through every broker. While a store is down a probe producer that neither retries nor is
idempotent gets the broker's own answer: it must be a retriable Kafka error (never an
acknowledgement, never a non-retriable error), and the broker processes stay up. Once the store is
back the brokers resume by themselves (the load is acknowledged again, no broker restarted).
Afterwards every acknowledged record is read exactly once, at the offset it was acknowledged with
and in order per key, with read_committed and with read_uncommitted; a probe record that was
never acknowledged appears at most once.

Each test owns the store it stops (``postgres_factory`` / ``seaweedfs_factory``: a server of the
module's own, shared by the module's tests) and uses the session's server for the other store.
A store stays away until the brokers answered the probes (about 20 s with PostgreSQL down: the
brokers' own bound on a commit) and one more second. The default run SIGKILLs PostgreSQL (a clean
stop under load is tests/chaos/test_cluster_pg_restart.py's) and stops SeaweedFS; the ``slow``
tests add the clean stop with probes and four outages of both stores at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.clients import create_topic, unique_topic
from tests.support.cluster import Cluster
from tests.support.cluster_clients import consume_all
from tests.support.cluster_faults import (
    RETRIABLE_PRODUCE_ERRORS,
    NumberedLoad,
    assert_acknowledged_exactly_once,
    probe_produce,
    probe_producer,
    start_cluster,
)
from tests.support.postgres import PostgresServer, create_database
from tests.support.seaweedfs import SeaweedServer

pytestmark = pytest.mark.chaos

PARTITIONS = 3
PROGRESS_S = 120.0  # a bound on a hang only: the load must make progress within it
DOWN_S = 1.0  # how long a store stays away after the probes were answered
# The brokers commit and fetch every 100 ms here, so outages catch many commits in flight.
CONFIG = {"diskless.append.commit.interval.ms": "100"}


@pytest.fixture(scope="module")
def own_postgres(postgres_factory: Callable[[], PostgresServer]) -> PostgresServer:
    return postgres_factory()


@pytest.fixture(scope="module")
def own_seaweedfs(seaweedfs_factory: Callable[..., SeaweedServer]) -> SeaweedServer:
    return seaweedfs_factory()


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    return tmp_path / "logs"


@pytest.fixture
def clusters() -> Iterator[list[Cluster]]:
    started: list[Cluster] = []
    try:
        yield started
    finally:
        for cluster in started:
            cluster.kill_all()


def _outages_under_load(cluster: Cluster, take_down: Callable[[], None], bring_up: Callable[[], None],
                        outages: int) -> None:
    topic = unique_topic("cluster-outage")
    create_topic(cluster.brokers[0].bootstrap, topic, partitions=PARTITIONS)
    probe = probe_producer(cluster.bootstrap)
    assert probe_produce(probe, topic, {0: b"probe-warm-up"}) == {0: None}
    load = NumberedLoad(cluster.bootstrap, topic).start()
    probes: set[bytes] = set()
    try:
        load.wait_for_acks(50, PROGRESS_S)
        for outage in range(outages):
            take_down()
            try:
                values = {partition: f"probe-{outage}-{partition}".encode() for partition in range(PARTITIONS)}
                probes.update(values.values())
                for partition, err in probe_produce(probe, topic, values).items():
                    assert err is not None, f"probe {values[partition]!r} was acknowledged while the store was down"
                    assert err.code() in RETRIABLE_PRODUCE_ERRORS, f"{values[partition]!r}: a non-retriable answer {err}"
                time.sleep(DOWN_S)
                acked_while_down = load.acked_count()
            finally:
                bring_up()
            load.wait_for_acks(acked_while_down + 50, PROGRESS_S)
        time.sleep(1.0)
    finally:
        load.finish()
        probe.flush(10)
    gone = [broker.node_id for broker in cluster.brokers if not broker.is_alive()]
    assert not gone, f"brokers {gone} exited during the outage"
    for isolation in ("read_committed", "read_uncommitted"):
        consumed = consume_all(cluster.bootstrap, topic, PARTITIONS, len(load.acked) + 1,
                               {"isolation.level": isolation})
        warm = [r for r in consumed if r.value == b"probe-warm-up"]
        assert len(warm) == 1, f"{isolation}: the warm-up probe read {len(warm)} times"
        assert_acknowledged_exactly_once(load.acked, [r for r in consumed if r.value != b"probe-warm-up"],
                                         frozenset(probes))


def _postgres_outage(server: PostgresServer, kill: bool) -> tuple[Callable[[], None], Callable[[], None]]:
    def take_down() -> None:
        if kill:
            server.kill()
        else:
            server.stop()

    def bring_up() -> None:
        server.start()

    return take_down, bring_up


# SIGKILL in the default run (tests/chaos/test_cluster_pg_restart.py stops it cleanly under load on
# two brokers); the clean stop with this test's probes runs with the slow tests.
# Both forms soak with the slow runs: the default run keeps test_cluster_pg_restart.py's (the
# short one per guarantee; the default run's time budget).
@pytest.mark.slow
@pytest.mark.parametrize("kill", [False, True], ids=["stop", "kill"])
def test_postgresql_restart_during_load(kill: bool, own_postgres: PostgresServer, seaweedfs: SeaweedServer,
                                        logs: Path, clusters: list[Cluster]) -> None:
    cluster = start_cluster(logs, own_postgres.url(create_database(own_postgres)), seaweedfs, 3, CONFIG)
    clusters.append(cluster)
    _outages_under_load(cluster, *_postgres_outage(own_postgres, kill), outages=1)


def test_object_store_outage_during_load(pg_database: str, own_seaweedfs: SeaweedServer, logs: Path,
                                         clusters: list[Cluster]) -> None:
    cluster = start_cluster(logs, pg_database, own_seaweedfs, 3, CONFIG)
    clusters.append(cluster)
    def bring_up() -> None:
        own_seaweedfs.start()

    _outages_under_load(cluster, own_seaweedfs.stop, bring_up, outages=1)


@pytest.mark.slow
def test_store_outages_soak(own_postgres: PostgresServer, own_seaweedfs: SeaweedServer, logs: Path,
                            clusters: list[Cluster]) -> None:
    cluster = start_cluster(logs, own_postgres.url(create_database(own_postgres)), own_seaweedfs, 3, CONFIG)
    clusters.append(cluster)
    pg_down, pg_up = _postgres_outage(own_postgres, kill=True)

    def take_down() -> None:
        pg_down()
        own_seaweedfs.kill()

    def bring_up() -> None:
        own_seaweedfs.start()
        pg_up()

    _outages_under_load(cluster, take_down, bring_up, outages=4)
