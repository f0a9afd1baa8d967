"""Shared fixtures: real broker processes for the interop, chaos and fuzz suites.

``ONCESTREAM_TEST_BROKER=tansu`` runs the interop and fuzz suites against the Tansu peer broker
instead of ours (every client feature must also work against a standard Kafka-protocol broker);
``ONCESTREAM_TEST_BROKER=cluster`` runs them against three cluster brokers on the session's
PostgreSQL and SeaweedFS (tests/support/cluster_kind.py), keeping only the tests that start their
brokers through ``module_broker_factory`` (the module-wide ``broker`` fixture does),
``module_our_broker_factory`` (suites that need our broker, not Tansu) or its session-wide twin
``session_our_broker_factory`` (the SQL suites' shared Spark node).
``@pytest.mark.broker_kinds(...)`` limits a test to the kinds that support it; the others deselect
it at collection.
Under the default kind the interop suites whose broker configs agree share one running broker
(``shared_brokers``), as the cluster kind's suites share a cluster; the cluster pass proves them
fit to share (their tests keep to names of their own). A suite that restarts, stops or kills its
broker (``OWN_BROKER_MODULES``), that gets a cluster of its own under the cluster kind, or that has
a test the cluster pass leaves out starts its own.
The chaos suite always uses our broker: it restarts the process and Tansu keeps nothing across
restarts.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

# The suites import ``tests.support``; make that work however pytest was started.
_PROJECT_ROOT = str(Path(__file__).resolve().parent.parent)
if _PROJECT_ROOT not in sys.path:
    sys.path.insert(0, _PROJECT_ROOT)

from tests.support.brokers import BrokerFaults, BrokerProcess, ManagedBroker, TansuProcess  # noqa: E402
from tests.support.cluster_kind import (  # noqa: E402
    BROKER_KINDS,
    BROKER_KINDS_MARKER,
    KIND_SWITCH_FIXTURES,
    ClusterUnderTest,
    SharedClusters,
    cluster_starter,
    deselect_by_broker_kind,
    needs_own_cluster,
    uses_fixture_of,
)
from tests.support.postgres import pg_database, postgres, postgres_factory  # noqa: E402, F401  (session-wide PostgreSQL)
from tests.support.seaweedfs import seaweedfs, seaweedfs_factory  # noqa: E402, F401  (session-wide S3 server)

if TYPE_CHECKING:
    from oncestream.postgres_process import PostgresServer
    from tests.support.certs import Pki
    from tests.support.seaweedfs import SeaweedServer

BROKER_KIND_ENV = "ONCESTREAM_TEST_BROKER"
AnyBroker = ManagedBroker | ClusterUnderTest
SHARED_CLUSTERS_KEY = pytest.StashKey[SharedClusters[ClusterUnderTest]]()
SHARED_BROKERS_KEY = pytest.StashKey[SharedClusters[BrokerProcess]]()
# The modules (relative to the project) with a test on the module-wide broker that the cluster
# pass leaves out (a ``broker_kinds`` marker without ``cluster``): nothing proves them fit to share.
UNPROVEN_MODULES_KEY = pytest.StashKey[frozenset[str]]()
SHARED_BROKER_SUITES = "tests/interop/"  # the suites the cluster pass runs on shared clusters
# Interop suites that keep a single broker of their own under the default kind, and why (and the
# cluster kind's OWN_CLUSTER_MODULES, which change what every client of a broker sees).
OWN_BROKER_MODULES = {
    "tests/interop/test_broker_robustness.py": "it stops the broker and restarts it, SIGKILLing it every other round",
    "tests/interop/test_groups_protocol_migration.py": "it SIGKILLs the broker",
    "tests/interop/test_share_consumer_interop.py": "it SIGKILLs and restarts the broker",
}


def broker_kind() -> str:
    """``oncestream`` (default), ``tansu`` or ``cluster``, from the environment."""
    kind = os.environ.get(BROKER_KIND_ENV, "oncestream")
    if kind not in BROKER_KINDS:
        raise pytest.UsageError(f"{BROKER_KIND_ENV} must be one of {', '.join(BROKER_KINDS)}, not {kind!r}")
    return kind


@pytest.fixture(scope="module")
def broker_config(request: pytest.FixtureRequest) -> dict[str, str]:
    """Broker properties of our module-wide ``broker``: the module's ``MODULE_BROKER_CONFIG`` if it
    has one (e.g. tests.support.brokers.NO_INITIAL_REBALANCE_DELAY), else none (Kafka's defaults)."""
    return dict(getattr(request.module, "MODULE_BROKER_CONFIG", {}))


@pytest.fixture(scope="module")
def module_broker_factory(request: pytest.FixtureRequest,
                          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., AnyBroker]]:
    """Start brokers of the kind under test (``broker_kind()``) that live until the module ends:
    ``start(config, name)`` with Kafka broker properties (Tansu takes none). Module fixtures that
    need their own configuration (group, transaction suites) start their broker here, so they run
    against every kind; the ``cluster`` kind keeps only the tests that use this fixture (or
    ``module_our_broker_factory``)."""
    yield from _module_brokers(request, tmp_path_factory, broker_kind())


@pytest.fixture(scope="module")
def module_our_broker_factory(request: pytest.FixtureRequest,
                              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., AnyBroker]]:
    """Like ``module_broker_factory``, for suites that need our broker whatever the peer kind
    (KIP-848 groups, quotas, metrics: Tansu has none of them): three cluster brokers with the same
    properties under the ``cluster`` kind, else our single broker (also under ``tansu``)."""
    kind = "cluster" if broker_kind() == "cluster" else "oncestream"
    yield from _module_brokers(request, tmp_path_factory, kind)


@pytest.fixture(scope="session")
def session_our_broker_factory(request: pytest.FixtureRequest) -> Iterator[Callable[..., AnyBroker]]:
    """Like ``module_our_broker_factory``, for session fixtures (tests/interop/sql/conftest.py's
    Spark node, whose Spark start costs more than its modules' tests): ``start(config)`` gives a
    running broker of the session's pool, three cluster brokers under the ``cluster`` kind
    (``shared_clusters``), else our single broker (``shared_brokers``), held until the session
    ends. The suites of the same config share it meanwhile, as they share it between modules."""
    pool_name = "shared_clusters" if broker_kind() == "cluster" else "shared_brokers"
    # Each with its pool, which started after this fixture and so ends before it (the release is
    # then only bookkeeping): the pool is not asked for again at teardown.
    held: list[tuple[SharedClusters, AnyBroker]] = []

    def start(config: dict[str, str] | None = None) -> AnyBroker:
        pool: SharedClusters = request.getfixturevalue(pool_name)
        running = pool.acquire(config or None)
        held.append((pool, running))
        return running

    try:
        yield start
    finally:
        for pool, running in held:
            pool.release(running)


@pytest.fixture(scope="session")
def shared_clusters(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                    postgres: PostgresServer, seaweedfs: SeaweedServer) -> Iterator[SharedClusters]:
    """The ``cluster`` kind's running clusters, shared by the suites whose broker configs agree
    (tests/support/cluster_kind.py); PostgreSQL and SeaweedFS start only when it is asked for."""
    clusters = SharedClusters(cluster_starter(postgres, seaweedfs), tmp_path_factory.mktemp("clusters"))
    request.config.stash[SHARED_CLUSTERS_KEY] = clusters
    try:
        yield clusters
    finally:
        clusters.close()


@pytest.fixture(scope="session")
def shared_brokers(request: pytest.FixtureRequest,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedClusters[BrokerProcess]]:
    """The default kind's running single brokers, one per broker config, shared by the interop
    suites that ``shares_a_running_broker`` (a broker start and stop cost about as much as a
    short suite's tests)."""

    def start(config: Mapping[str, str] | None, log_dir: Path) -> BrokerProcess:
        process = BrokerProcess(data_dir=log_dir.parent / "data", config=dict(config) if config else None)
        try:
            process.start()
        except BaseException:
            process.kill()
            raise
        return process

    brokers = SharedClusters(start, tmp_path_factory.mktemp("brokers"))
    request.config.stash[SHARED_BROKERS_KEY] = brokers
    try:
        yield brokers
    finally:
        brokers.close()


def shares_a_running_broker(config: pytest.Config, module_file: str | Path) -> bool:
    """Whether the suite in ``module_file`` gets a shared single broker under the default kind:
    an interop suite (the cluster pass runs it on a shared cluster) neither in ``OWN_BROKER_MODULES``
    nor in the cluster kind's ``OWN_CLUSTER_MODULES``, whose tests on the module-wide broker all run
    in the cluster pass."""
    relative = Path(module_file).resolve().relative_to(Path(_PROJECT_ROOT).resolve()).as_posix()
    return (relative.startswith(SHARED_BROKER_SUITES) and relative not in OWN_BROKER_MODULES
            and not needs_own_cluster(module_file, _PROJECT_ROOT)
            and relative not in config.stash.get(UNPROVEN_MODULES_KEY, frozenset()))


def _module_brokers(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                    kind: str) -> Iterator[Callable[..., AnyBroker]]:
    """The factory of both module fixtures above: brokers of ``kind``, all ended with the module,
    except the ``cluster`` kind's shared clusters, which outlive it for the next suites."""
    started: list[AnyBroker] = []
    shared: list[AnyBroker] = []
    pool_name = "shared_clusters" if kind == "cluster" else "shared_brokers"

    def start(config: dict[str, str] | None = None, name: str = "broker") -> AnyBroker:
        if kind == "oncestream" and shares_a_running_broker(request.config, request.path):
            brokers: SharedClusters[BrokerProcess] = request.getfixturevalue(pool_name)
            running = brokers.acquire(config or None)
            shared.append(running)
            return running
        if kind == "cluster":
            clusters: SharedClusters = request.getfixturevalue("shared_clusters")
            if needs_own_cluster(request.path, _PROJECT_ROOT):
                cluster = clusters.start_private(config or None)
                started.append(cluster)
            else:
                cluster = clusters.acquire(config or None)
                shared.append(cluster)
            return cluster
        base = tmp_path_factory.mktemp(name)
        process: AnyBroker
        if kind == "tansu":
            process = TansuProcess(log_dir=base / "logs")
        else:
            process = BrokerProcess(data_dir=base / "data", config=config or None)
        started.append(process)
        process.start()
        return process

    try:
        yield start
    finally:
        for process in started:
            if isinstance(process, ClusterUnderTest):
                process.kill()  # nothing of a private cluster outlives its module; a clean stop only costs time
            else:
                process.stop()
        if shared:
            pool = request.getfixturevalue(pool_name)
            for running in shared:
                pool.release(running)


@pytest.fixture(scope="module")
def broker(module_broker_factory: Callable[..., AnyBroker], broker_config: dict[str, str]) -> AnyBroker:
    """One running broker for a whole test module (tests use unique topic names); under the
    ``cluster`` kind, three cluster brokers with a database and an object-store prefix of their own."""
    return module_broker_factory(broker_config)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A fresh CA, broker key store and client certificates for one test module (the TLS suites)."""
    from tests.support.certs import make_pki  # cryptography is loaded only by the suites that use TLS

    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """Start our broker with its data dir under ``tmp_path``; every one is killed at teardown."""
    started: list[BrokerProcess] = []

    def start(config: dict[str, str] | None = None, name: str = "broker",
              faults: BrokerFaults | None = None) -> BrokerProcess:
        process = BrokerProcess(data_dir=tmp_path / name / "data", config=config, faults=faults)
        started.append(process)
        return process.start()  # type: ignore[return-value]

    try:
        yield start
    finally:
        for process in started:
            process.kill()


def pytest_configure(config: pytest.Config) -> None:
    """Declare the ``broker_kinds`` marker; silence kafka-python's own deprecated
    importlib.resources calls (noise in every report)."""
    config.addinivalue_line("markers", f"{BROKER_KINDS_MARKER}(*kinds, reason): the broker kinds "
                            "(ONCESTREAM_TEST_BROKER) a test supports; deselected under the others")
    config.addinivalue_line("filterwarnings", "ignore:read_text is deprecated:DeprecationWarning")
    config.addinivalue_line("filterwarnings", "ignore:open_text is deprecated:DeprecationWarning")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    """How many shared clusters (``cluster`` kind) or single brokers (default kind) the suites
    started and how often one was shared."""
    clusters = config.stash.get(SHARED_CLUSTERS_KEY, None)
    if clusters is not None:
        terminalreporter.write_line(f"cluster kind: {clusters.started} clusters started "
                                    f"({clusters.starting_s:.0f} s in all), "
                                    f"{clusters.reused} suite requests served by a running one")
    brokers = config.stash.get(SHARED_BROKERS_KEY, None)
    if brokers is not None:
        terminalreporter.write_line(f"shared single brokers: {brokers.started} started "
                                    f"({brokers.starting_s:.0f} s in all), "
                                    f"{brokers.reused} suite requests served by a running one")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Select the tests of the broker kind under test (``broker_kinds`` markers; see above); note
    the suites with a test on the module-wide broker that the cluster kind would leave out."""
    unproven = set()
    for item in items:
        marker = item.get_closest_marker(BROKER_KINDS_MARKER)
        if marker is not None and "cluster" not in marker.args and any(
                uses_fixture_of(item, name, __file__) for name in KIND_SWITCH_FIXTURES):
            unproven.add(Path(str(item.path)).resolve().relative_to(Path(_PROJECT_ROOT).resolve()).as_posix())
    config.stash[UNPROVEN_MODULES_KEY] = frozenset(unproven)
    deselect_by_broker_kind(config, items, broker_kind(), __file__)
    for item in items:
        if item.get_closest_marker("timeout") is None and _spark_bound(item):
            item.add_marker(pytest.mark.timeout(SPARK_HANG_GUARD_S))


# The hang guard of a test that runs Spark (a SparkSession, a Spark driver or a SQL node) and sets
# none of its own: pyproject's 300 s default is a few times what such a test takes on a quiet
# machine, but a CI run with three Spark-bound runs on 2 cores took 2-3 times as long as a quiet
# one, and tests whose own waits allow 240-900 s hit 300 s (2026-11-29).
SPARK_HANG_GUARD_S = 900
SPARK_BOUND_FOLDERS = ("tests/spark/", "tests/chaos/sql/", "tests/interop/sql/")


def _spark_bound(item: pytest.Item) -> bool:
    path = Path(str(item.path)).resolve().relative_to(Path(_PROJECT_ROOT).resolve()).as_posix()
    return item.get_closest_marker("spark") is not None or path.startswith(SPARK_BOUND_FOLDERS)
