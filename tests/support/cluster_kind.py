"""The ``cluster`` broker kind: conftest's module-wide ``broker`` as three cluster brokers.

With ``ONCESTREAM_TEST_BROKER=cluster`` the interop suites' ``broker`` fixture is a
``ClusterUnderTest``: three ``oncestream broker --metadata-store ... --object-store ...`` processes
(node ids 1..3, tests/support/cluster.py's ``ClusterBroker``) on a fresh database of the session's
PostgreSQL and a key prefix of their own on the session's SeaweedFS. Its ``bootstrap`` lists all
three brokers, so every client spreads its connections over the cluster; ``host`` and ``port`` are
those of the first broker, for the suites that open one raw socket.

Tests that need what a cluster does not have (a data dir, a single process to restart) say so with
``@pytest.mark.broker_kinds(...)`` (see ``deselect_by_broker_kind``).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Generic, Protocol, TypeVar

import pytest

from oncestream.broker.inter_broker import inter_broker_security
from oncestream.broker.listeners import parse_listeners
from oncestream.broker.tls import listener_property
from oncestream.broker_process import OnceStreamBroker
from oncestream.postgres_process import PostgresServer
from tests.support.cluster import ClusterBroker, wait_converged
from tests.support.postgres import create_database
from tests.support.seaweedfs import SeaweedServer, clean_environ

BROKER_KINDS = ("oncestream", "tansu", "cluster")
CLUSTER_SIZE = 3
BROKER_KINDS_MARKER = "broker_kinds"
# The conftest's fixtures that start brokers of the kind under test: ``module_broker_factory`` (our
# broker, Tansu or a cluster), ``module_our_broker_factory`` (our broker or a cluster, for the
# suites that need what Tansu does not have: broker configs, KIP-848 groups, quotas, metrics) and
# its session-wide twin ``session_our_broker_factory`` (the SQL suites' shared Spark node).
KIND_SWITCH_FIXTURES = ("module_broker_factory", "module_our_broker_factory", "session_our_broker_factory")
# Every cluster produce waits for the next commit of its batch (``diskless.append.commit.interval.ms``,
# 250 ms by default, docs/cluster.md). The cluster kind commits every 20 ms instead: the same code
# path (buffer, one upload, one PostgreSQL commit, then the answers) at a twelfth of the wait, so the
# interop pass spends its time on the tests rather than on commit intervals. A suite's own value
# (``MODULE_BROKER_CONFIG``) wins.
CLUSTER_KIND_CONFIG = {"diskless.append.commit.interval.ms": "20"}
# The suites of one config share a running cluster (``SharedClusters``); this many clusters of
# other configs stay up between suites. Suites run in file order, and the common configs (none,
# no initial rebalance delay, the transaction and KIP-848 suites') come back every few modules.
SHARED_CLUSTERS_KEPT = 3


class ClusterUnderTest:
    """Three cluster brokers that stand in for the one broker a suite expects.

    It offers the part of ``ManagedBroker`` the interop suites use through the ``broker`` fixture:
    ``bootstrap`` (every broker), ``host``/``port`` (the first broker), start, stop, kill and
    restart of all brokers together, and the output of all of them for failure messages.
    """

    name = "cluster"

    def __init__(self, brokers: list[ClusterBroker], client_conf: Mapping[str, str] | None = None) -> None:
        """``client_conf``: the security settings of a client of each broker's ``bootstrap``
        listener (``peer_client_conf``), to see the brokers converge."""
        self.brokers = brokers
        self.client_conf = dict(client_conf or {})

    @property
    def bootstrap(self) -> str:
        """Every broker's ``host:port``, for ``bootstrap.servers``."""
        return ",".join(broker.bootstrap for broker in self.brokers)

    def listener_bootstrap(self, name: str) -> str:
        """Every broker's ``host:port`` of the listener called ``name`` (with a ``listeners`` property)."""
        return ",".join(broker.listener_bootstrap(name) for broker in self.brokers)

    @property
    def host(self) -> str:
        return self.brokers[0].host

    @property
    def port(self) -> int:
        return self.brokers[0].port

    def start(self) -> ClusterUnderTest:
        """Start every broker and wait until each lists all of them (tests/support/cluster.py).
        The brokers start side by side: each is spawned here, in the calling thread (a broker
        dies with the thread that spawned it: ``die_with_parent`` is PR_SET_PDEATHSIG, which
        follows the spawning thread), and only then is each waited for."""
        for broker in self.brokers:
            broker.spawn()
        for broker in self.brokers:
            broker.wait_ready()
        wait_converged(self.brokers, self.client_conf)
        return self

    def stop(self) -> None:
        for broker in self.brokers:
            broker.stop()

    def kill(self) -> None:
        for broker in self.brokers:
            broker.kill()

    def restart(self, *, crash: bool = False) -> ClusterUnderTest:
        """Stop (SIGTERM) or crash (SIGKILL) every broker, then start each on its port again."""
        if crash:
            self.kill()
        else:
            self.stop()
        return self.start()

    def is_alive(self) -> bool:
        return all(broker.is_alive() for broker in self.brokers)

    def output_tail(self) -> str:
        """The last few KB of each broker's stderr, broker by broker."""
        return "\n".join(f"--- node {broker.node_id} ---\n{broker.output_tail()}" for broker in self.brokers)

    def stderr_tail(self) -> str:
        return self.output_tail()

    def __repr__(self) -> str:
        return f"ClusterUnderTest({self.bootstrap})"


# What conftest's ``module_our_broker_factory`` gives: our single broker, or a cluster.
BrokerUnderTest = OnceStreamBroker | ClusterUnderTest


def processes_of(broker: BrokerUnderTest) -> list[OnceStreamBroker | ClusterBroker]:
    """Every broker process behind ``broker``: a cluster's three, else the one."""
    return list(broker.brokers) if isinstance(broker, ClusterUnderTest) else [broker]


def cluster_kind_config(config: Mapping[str, str] | None) -> dict[str, str]:
    """The properties of a cluster-kind broker: ``CLUSTER_KIND_CONFIG`` under a suite's ``config``."""
    return {**CLUSTER_KIND_CONFIG, **(config or {})}


def module_cluster(postgres: PostgresServer, seaweedfs: SeaweedServer, log_dir: Path,
                   config: Mapping[str, str] | None) -> ClusterUnderTest:
    """Three (not yet started) brokers on a fresh database and a fresh object-store prefix, with
    ``CLUSTER_KIND_CONFIG`` under ``config``."""
    metadata_store = postgres.url(create_database(postgres, prefix="kind"))
    uri = seaweedfs.uri(f"kind-{uuid.uuid4().hex[:10]}")
    environ = clean_environ(**seaweedfs.env())
    merged = cluster_kind_config(config)
    return ClusterUnderTest([ClusterBroker(node_id, metadata_store, uri, environ, log_dir, merged)
                             for node_id in range(1, CLUSTER_SIZE + 1)], peer_client_conf(merged))


def peer_client_conf(config: Mapping[str, str]) -> dict[str, str]:
    """librdkafka's security settings for a client of a cluster broker's ``bootstrap`` listener
    (``ClusterBroker``: the first PLAINTEXT listener, else the first), logging in as the brokers
    log in to each other: none on a PLAINTEXT listener; else the listener must be the
    inter-broker one (broker/inter_broker.py), whose SASL mechanism and credentials (the JAAS
    ``username``/``password``), trust store (PEM) and, where it asks for client certificates
    (``ssl.client.auth``), key store the client takes. A secured suite's config
    thereby says how its cluster is seen to converge, with no further argument to the factory."""
    listeners = parse_listeners(config, "127.0.0.1", 0)
    plaintext = [listener for listener in listeners if listener.security_protocol == "PLAINTEXT"]
    bootstrap = (plaintext or list(listeners))[0]
    if bootstrap.security_protocol == "PLAINTEXT":
        return {}
    peer = inter_broker_security(config, listeners)
    if peer.listener_name != bootstrap.name:
        raise pytest.UsageError(f"a cluster-kind broker's bootstrap listener {bootstrap.name} is secured but is not "
                                f"its inter-broker listener ({peer.listener_name}): no credentials to converge with")
    conf = {"security.protocol": peer.security_protocol}
    if peer.sasl is not None:
        conf |= {"sasl.mechanism": peer.sasl.mechanism, "sasl.username": peer.sasl.username,
                 "sasl.password": peer.sasl.password}
    truststore = listener_property(config, bootstrap.name, "ssl.truststore.location")
    if bootstrap.uses_tls and truststore:
        conf["ssl.ca.location"] = truststore
    # A listener that asks for client certificates gets the brokers' own (their PEM key store:
    # key and chain in one file), as a peer broker presents it (broker/inter_broker.py).
    keystore = listener_property(config, bootstrap.name, "ssl.keystore.location")
    client_auth = (listener_property(config, bootstrap.name, "ssl.client.auth") or "none").strip().lower()
    if bootstrap.uses_tls and keystore and client_auth != "none":
        conf |= {"ssl.certificate.location": keystore, "ssl.key.location": keystore}
    return conf


def start_or_kill(cluster: ClusterUnderTest) -> ClusterUnderTest:
    """``cluster.start()``; a cluster that fails to start leaves no broker behind."""
    try:
        return cluster.start()
    except BaseException:
        cluster.kill()
        raise


def cluster_starter(postgres: PostgresServer, seaweedfs: SeaweedServer) -> StartCluster:
    """Start a ``module_cluster`` on these servers and wait until it has converged."""
    def start(config: Mapping[str, str] | None, log_dir: Path) -> ClusterUnderTest:
        return start_or_kill(module_cluster(postgres, seaweedfs, log_dir, config))
    return start


ConfigKey = frozenset[tuple[str, str]]
# Starts a running cluster of the kind (``config``, ``log_dir``): ``cluster_starter``'s in the suites.
StartCluster = Callable[[Mapping[str, str] | None, Path], ClusterUnderTest]


class Shareable(Protocol):
    """What ``SharedClusters`` needs of what it keeps running: a cluster, or a single broker."""

    def is_alive(self) -> bool: ...

    def kill(self) -> object: ...


Running = TypeVar("Running", bound=Shareable)


class SharedClusters(Generic[Running]):
    """The session's running clusters of the ``cluster`` kind, one per effective broker config.

    Starting three brokers and waiting until they agree on each other and on the coordinator
    leases costs more than most suites' tests, so the suites whose merged config
    (``cluster_kind_config``) is the same share one cluster: its database, its object-store
    prefix and its three brokers. Their tests already keep to names of their own (unique topics,
    group and transactional ids), as they do on a module-wide single broker; a suite that changes
    what every client of the cluster sees (``OWN_CLUSTER_MODULES``) gets a private cluster
    (``start_private``) that ends with it. At most ``capacity`` clusters not in use by the running
    module stay up (the least recently used one is killed first): idle brokers still heartbeat and
    renew their leases, on a machine the other test runs share. A cluster a test left with a dead
    broker is replaced by a fresh one when next asked for. The default kind's single brokers are
    shared the same way (``SharedClusters[BrokerProcess]``, tests/conftest.py).
    """

    def __init__(self, start_cluster: Callable[[Mapping[str, str] | None, Path], Running], base_dir: Path,
                 capacity: int = SHARED_CLUSTERS_KEPT) -> None:
        self.start_cluster = start_cluster
        self.base_dir = base_dir
        self.capacity = capacity
        self._running: OrderedDict[ConfigKey, Running] = OrderedDict()  # least recently used first
        self._in_use: Counter[ConfigKey] = Counter()
        self.started = 0  # clusters started, shared and private
        self.reused = 0  # requests answered by a running cluster
        self.starting_s = 0.0  # spent starting clusters, from spawn to settled leases

    def acquire(self, config: Mapping[str, str] | None) -> Running:
        """A running cluster with ``config``: the one already up, else a new one. Give it back
        with ``release`` when the module ends."""
        key: ConfigKey = frozenset(cluster_kind_config(config).items())
        cluster = self._running.pop(key, None)
        if cluster is not None and cluster.is_alive():
            self.reused += 1
        else:
            if cluster is not None:
                cluster.kill()  # a test killed or stopped a broker and left it so
            self._evict(room_for=1)
            cluster = self._start(config)
        self._running[key] = cluster
        self._in_use[key] += 1
        return cluster

    def release(self, cluster: Running) -> None:
        """The module that acquired ``cluster`` has ended; it stays up for the next suites."""
        for key, running in self._running.items():
            if running is cluster:
                self._in_use[key] -= 1
        self._evict(room_for=0)

    def start_private(self, config: Mapping[str, str] | None) -> Running:
        """A cluster of its own for a suite that changes cluster-wide state; the caller kills it."""
        return self._start(config)

    def close(self) -> None:
        """Kill every running cluster (the end of the session)."""
        while self._running:
            self._running.popitem(last=False)[1].kill()

    def _start(self, config: Mapping[str, str] | None) -> Running:
        self.started += 1
        began = time.monotonic()
        try:
            return self.start_cluster(config, self.base_dir / f"cluster-{self.started}" / "logs")
        finally:
            self.starting_s += time.monotonic() - began

    def _evict(self, room_for: int) -> None:
        """Kill the least recently used clusters not in use until ``room_for`` more fit."""
        idle = [key for key in self._running if self._in_use[key] <= 0]
        while idle and len(self._running) + room_for > self.capacity:
            self._running.pop(idle.pop(0)).kill()


def uses_fixture_of(item: pytest.Item, name: str, defined_in: str) -> bool:
    """Whether ``item`` uses the fixture ``name`` as defined in the file ``defined_in`` (and not a
    module's own fixture of the same name)."""
    fixture_info = getattr(item, "_fixtureinfo", None)
    definitions = fixture_info.name2fixturedefs.get(name) if fixture_info is not None else None
    if not definitions:
        return False
    code = getattr(definitions[-1].func, "__code__", None)
    return code is not None and Path(code.co_filename).resolve() == Path(defined_in).resolve()


def deselect_by_broker_kind(config: pytest.Config, items: list[pytest.Item], kind: str,
                            kind_switch_file: str) -> None:
    """Keep, at collection, only the tests that run against ``kind``; report the rest deselected.

    ``@pytest.mark.broker_kinds("oncestream", "tansu", reason=...)`` names the kinds a test
    supports (a feature cluster mode does not have yet, or one that needs a data dir). Under the
    ``cluster`` kind only the tests that start their broker through one of ``KIND_SWITCH_FIXTURES``
    of ``kind_switch_file`` (the conftest; its ``broker`` fixture does) are kept: the others start
    their own single brokers, and the default run already covers them.
    """
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        marker = item.get_closest_marker(BROKER_KINDS_MARKER)
        supported = marker is None or kind in marker.args
        uses_kind_switch = kind != "cluster" or any(uses_fixture_of(item, name, kind_switch_file)
                                                    for name in KIND_SWITCH_FIXTURES)
        (kept if supported and uses_kind_switch else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def not_on_cluster(reason: str) -> pytest.MarkDecorator:
    """The ``broker_kinds`` marker of a test that runs against our single broker and Tansu only."""
    return pytest.mark.broker_kinds("oncestream", "tansu", reason=reason)


# Why tests leave the cluster kind, one sentence each (docs/cluster.md, "The interop suites on a
# cluster"): remove the marker from a suite once cluster mode has what it needs.
CLUSTER_METRICS_OF_ONE_PROCESS = ("the test reads one broker process's /metrics and data dir for counters of what "
                                  "every client sent; on a cluster the requests spread over three processes, the "
                                  "logs are diskless, and the transaction and quota gauges belong to whichever "
                                  "broker coordinates or throttles")
CLUSTER_RESTART_OUTLASTS_SESSIONS = ("the test SIGKILLs and restarts the broker and expects every group member to "
                                     "outlive it with a 6 s session; a cluster's three brokers restart one after the "
                                     "other (about 7 s each on a loaded machine), so the classic member's session "
                                     "ends first (coordinator failover is tests/interop/test_cluster_*'s subject)")
DATA_DIR_USERS = ("the test bootstraps SCRAM users offline into a broker's data dir (`oncestream users --data-dir`) "
                  "and SIGKILLs that one process; a cluster keeps its users in PostgreSQL, created through any broker "
                  "(tests/interop/test_cluster_security.py)")
IN_PROCESS_BROKER = ("the test watches one in-process broker's event loop (LoopThreadBroker): a cluster is three "
                     "broker processes")
RESTART_KEEPS_LISTENER_PORTS = ("the test restarts one broker process and expects its port-0 listeners back on "
                                "the same ports (read from its data dir); a cluster broker binds new ones and "
                                "registers them (tests/support/cluster.py)")
BROKER_COMMAND_CHECK = ("the test runs `oncestream broker --data-dir` itself with settings it must refuse: a check "
                        "of the command line before any store is opened, no broker of a kind")
README_QUICKSTART_BROKER = ("the test runs the README's SQL quickstart as written, whose own `oncestream broker "
                            "--data-dir` command starts the single broker the quickstart uses")
IN_MEMORY_SQL_ENGINE = ("the test drives the SQL server's REST layer over the in-memory test engine "
                        "(tests/unit/sql/test_rest_support.py): no broker of any kind is involved")
ONE_BROKER_ASSUMED = ("the test talks to one broker on the wire and expects it to coordinate every group or "
                      "transactional id, which holds for one broker only (a cluster answers NOT_COORDINATOR "
                      "from the others, as Kafka does)")
# Suites that change what every client of a cluster sees get a cluster of their own under the
# ``cluster`` kind (``SharedClusters.start_private``) rather than one shared with the other suites
# of their config: the module's file (relative to the project) and why.
OWN_CLUSTER_MODULES = {
    "tests/interop/test_client_quotas.py": "it sets client quotas, the default user's and client id's among them, "
                                           "which PostgreSQL holds for the whole cluster, and restarts the brokers",
}


def needs_own_cluster(module_file: str | Path, project_root: str | Path) -> bool:
    """Whether the suite in ``module_file`` is one of ``OWN_CLUSTER_MODULES``."""
    relative = Path(module_file).resolve().relative_to(Path(project_root).resolve())
    return relative.as_posix() in OWN_CLUSTER_MODULES
