"""A cluster of ``oncestream broker`` processes on one PostgreSQL database and one SeaweedFS prefix.

``cluster_factory(n, config)`` (a fixture) starts ``n`` brokers (node ids 1..n) on the test's own
database (``pg_database``, on the session's PostgreSQL) and the session's SeaweedFS under a key
prefix of the test's own; every broker is a ``ClusterBroker`` that can be stopped (SIGTERM),
killed (SIGKILL), paused (SIGSTOP) and resumed, and restarted on the same port. A broker is ready
once it has registered in PostgreSQL and listens (it writes its ready file only then). Everything
is killed at teardown.

With a ``listeners`` property (``SECURE://127.0.0.1:0,TLS://127.0.0.1:0``: the OS picks the
ports) a broker's ``listener_ports`` come from its ready file once it is ready, and ``bootstrap``
is its first PLAINTEXT listener's, else its first listener's (as tests/support's single broker);
a restart binds new ports then (and registers them).
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import psycopg
import pytest
from confluent_kafka.admin import AdminClient

from oncestream.broker_process import ManagedBroker, oncestream_command
from oncestream.cluster.leases.coordinator_leases import preferred_owner, resource_name
from oncestream.remote.object_store import ObjectStore, open_object_store
from tests.support.faults import child_environment
from tests.support.seaweedfs import SeaweedServer, clean_environ

READY_TIMEOUT_S = 60.0  # a bound on a hang only: start-up applies the schema and registers
CONVERGE_TIMEOUT_S = 60.0  # a bound on a hang only
LEASE_ROUND_S = 1.0  # a lease round runs every heartbeat interval (TEST_SESSION: 500 ms)
# Short sessions so a silent broker leaves Metadata quickly in tests; the production default is 9 s.
TEST_SESSION = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"}


class ClusterBroker(ManagedBroker):
    """One broker of a cluster: ``oncestream broker --metadata-store URL --object-store URI``."""

    name = "cluster-broker"

    def __init__(self, node_id: int, metadata_store: str, object_store_uri: str, environ: dict[str, str],
                 log_dir: Path, config: dict[str, str] | None = None) -> None:
        super().__init__(log_dir, None, ready_timeout_s=READY_TIMEOUT_S)
        self.node_id = node_id
        self.metadata_store = metadata_store
        self.object_store_uri = object_store_uri
        self.environ = environ
        self.config = {**TEST_SESSION, **(config or {}), "node.id": str(node_id)}
        self.ready_file = self.log_dir / f"node-{node_id}.ready.json"
        self.listener_ports: dict[str, int] = {}

    def command(self) -> list[str]:
        self.ready_file.unlink(missing_ok=True)
        listen = [] if "listeners" in self.config else ["--listen", self.bootstrap]
        argv = [*oncestream_command(), "broker", *listen,
                "--metadata-store", self.metadata_store, "--object-store", self.object_store_uri,
                "--ready-file", str(self.ready_file)]
        for key, value in self.config.items():
            argv += ["--config", f"{key}={value}"]
        return argv

    def environment(self) -> dict[str, str]:
        return child_environment(self.environ)

    def _is_ready(self) -> bool:
        if not self.ready_file.exists():
            return False
        if "listeners" in self.config:
            bound = json.loads(self.ready_file.read_text())["listeners"]
            self.listener_ports = {name: int(item["port"]) for name, item in bound.items()}
            plaintext = [name for name, item in bound.items() if item["security_protocol"] == "PLAINTEXT"]
            self.port = self.listener_ports[plaintext[0] if plaintext else next(iter(bound))]
        return True

    def listener_bootstrap(self, name: str) -> str:
        """``host:port`` of the listener called ``name`` (with a ``listeners`` property)."""
        return f"{self.host}:{self.listener_ports[name.upper()]}"

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets but neither serves nor heartbeats."""
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after ``pause``."""
        os.kill(self.pid, signal.SIGCONT)


def wait_converged(brokers: list[ClusterBroker], client_conf: Mapping[str, str] | None = None) -> None:
    """Until every broker's Metadata lists every broker. A broker is ready once it has
    registered, but the others read the live brokers from PostgreSQL at most every
    ``LIVE_BROKERS_MAX_AGE_MS`` and a loaded machine can delay a first heartbeat, so right
    after start one broker may not list a peer yet. ``client_conf``: the security settings of a
    client of each broker's ``bootstrap`` listener."""
    expected = {broker.node_id for broker in brokers}
    deadline = time.monotonic() + CONVERGE_TIMEOUT_S
    for broker in brokers:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, **(client_conf or {})})
        while (seen := set(admin.list_topics(timeout=10).brokers)) != expected:
            if time.monotonic() > deadline:
                raise TimeoutError(f"node {broker.node_id} lists brokers {seen}, expected {expected}")
            time.sleep(0.1)
    if brokers:
        _wait_leases_settled(brokers[0].metadata_store, expected, deadline)


def _wait_leases_settled(metadata_store: str, node_ids: set[int], deadline: float) -> None:
    """Until every coordinator partition's lease is held by its preferred live broker, and one
    more lease round: the first broker up takes every lease and hands each over as the others
    join (cluster-coordinators.md, "Leases"), so right after start a raw-wire test could find a
    coordinator that hands its group over before the test's next request reaches it."""
    with psycopg.connect(metadata_store, autocommit=True) as conn:
        while True:
            wanted = {resource_name(topic, partition): preferred_owner(resource_name(topic, partition), node_ids)
                      for topic, count in conn.execute("SELECT topic, num_partitions FROM coordinator_topics")
                      for partition in range(count)}
            held: dict[str, int] = dict(conn.execute(
                "SELECT l.resource, l.owner_node_id FROM coordinator_leases l JOIN brokers b"
                " ON b.node_id = l.owner_node_id AND b.incarnation = l.owner_incarnation"
                " AND b.lease_expires_at > clock_timestamp()").fetchall())
            if all(held.get(resource) == owner for resource, owner in wanted.items()):
                break
            if time.monotonic() > deadline:
                moving = sorted(r for r, owner in wanted.items() if held.get(r) != owner)
                raise TimeoutError(f"coordinator leases not settled: {moving[:5]} ({len(moving)} in all)")
            time.sleep(0.1)
    time.sleep(LEASE_ROUND_S)  # every broker's FindCoordinator view comes from its last round


class Cluster:
    """``n`` brokers sharing one metadata store and one object store prefix."""

    def __init__(self, brokers: list[ClusterBroker], metadata_store: str, object_store_uri: str,
                 environ: dict[str, str]) -> None:
        self.brokers = brokers
        self.metadata_store = metadata_store
        self.object_store_uri = object_store_uri
        self.environ = environ

    @property
    def bootstrap(self) -> str:
        """Every broker's ``host:port``, for ``bootstrap.servers``."""
        return ",".join(broker.bootstrap for broker in self.brokers)

    def broker(self, node_id: int) -> ClusterBroker:
        return next(broker for broker in self.brokers if broker.node_id == node_id)

    def object_store(self) -> ObjectStore:
        """The cluster's object store as the brokers see it."""
        return open_object_store(self.object_store_uri, self.environ)

    def wait_converged(self, client_conf: Mapping[str, str] | None = None) -> None:
        """Until every broker's Metadata lists every broker (``wait_converged``). ``client_conf``:
        the security settings of a client of each broker's ``bootstrap`` listener."""
        wait_converged(self.brokers, client_conf)

    def kill_all(self) -> None:
        for broker in self.brokers:
            if broker.is_alive():
                try:
                    broker.resume()  # a paused process dies of SIGKILL too, but resumed it logs its end
                except ProcessLookupError:
                    pass
            broker.kill()


@pytest.fixture
def cluster_factory(tmp_path: Path, pg_database: str, seaweedfs: SeaweedServer) -> Iterator[Callable[..., Cluster]]:
    """Start clusters of ``n`` brokers on the test's database and its own SeaweedFS prefix."""
    started: list[Cluster] = []

    def start(n: int = 3, config: dict[str, str] | None = None, metadata_store: str | None = None,
              client_conf: Mapping[str, str] | None = None) -> Cluster:
        """``metadata_store``: a database of another PostgreSQL (one the test stops); default the
        test's database on the session's server. ``client_conf``: a client's security settings
        for the brokers' listener (SASL, TLS), to see them converge."""
        uri = seaweedfs.uri(f"c-{uuid.uuid4().hex[:10]}")
        environ = clean_environ(**seaweedfs.env())
        url = metadata_store or pg_database
        brokers = [ClusterBroker(node_id, url, uri, environ, tmp_path / "logs", config)
                   for node_id in range(1, n + 1)]
        cluster = Cluster(brokers, url, uri, environ)
        started.append(cluster)
        for broker in brokers:
            broker.start()
        cluster.wait_converged(client_conf)
        return cluster

    try:
        yield start
    finally:
        for cluster in started:
            cluster.kill_all()
