"""Shared fixtures: real broker processes for the interop, chaos and fuzz suites.

``ONCESTREAM_TEST_BROKER=tansu`` runs the interop and fuzz suites against the Tansu peer broker
instead of ours (every client feature must also work against a standard Kafka-protocol broker).
The chaos suite always uses our broker: it restarts the process and Tansu keeps nothing across
restarts.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

# The suites import ``tests.support``; make that work however pytest was started.
_PROJECT_ROOT = str(Path(__file__).resolve().parent.parent)
if _PROJECT_ROOT not in sys.path:
    sys.path.insert(0, _PROJECT_ROOT)

from tests.support.brokers import BrokerFaults, BrokerProcess, ManagedBroker, TansuProcess  # noqa: E402
from tests.support.postgres import pg_database, postgres, postgres_factory  # noqa: E402, F401  (session-wide PostgreSQL)
from tests.support.seaweedfs import seaweedfs, seaweedfs_factory  # noqa: E402, F401  (session-wide S3 server)

if TYPE_CHECKING:
    from tests.support.certs import Pki

BROKER_KIND_ENV = "ONCESTREAM_TEST_BROKER"


def broker_kind() -> str:
    """``oncestream`` (default) or ``tansu``, from the environment."""
    kind = os.environ.get(BROKER_KIND_ENV, "oncestream")
    assert kind in ("oncestream", "tansu"), f"{BROKER_KIND_ENV} must be oncestream or tansu"
    return kind


@pytest.fixture(scope="module")
def broker_config(request: pytest.FixtureRequest) -> dict[str, str]:
    """Broker properties of our module-wide ``broker``: the module's ``MODULE_BROKER_CONFIG`` if it
    has one (e.g. tests.support.brokers.NO_INITIAL_REBALANCE_DELAY), else none (Kafka's defaults)."""
    return dict(getattr(request.module, "MODULE_BROKER_CONFIG", {}))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, broker_config: dict[str, str]) -> Iterator[ManagedBroker]:
    """One running broker for a whole test module (tests use unique topic names)."""
    base = tmp_path_factory.mktemp("broker")
    process: ManagedBroker
    if broker_kind() == "tansu":
        process = TansuProcess(log_dir=base / "logs")
    else:
        process = BrokerProcess(data_dir=base / "data", config=broker_config or None)
    process.start()
    try:
        yield process
    finally:
        process.stop()


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
    """Silence kafka-python's own deprecated importlib.resources calls (noise in every report)."""
    config.addinivalue_line("filterwarnings", "ignore:read_text is deprecated:DeprecationWarning")
    config.addinivalue_line("filterwarnings", "ignore:open_text is deprecated:DeprecationWarning")
