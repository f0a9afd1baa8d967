"""tests/conftest.py's choice of the interop suites that share a running single broker under the
default kind (``shares_a_running_broker``): the interop suites the cluster pass runs on shared
clusters, less those that restart or kill their broker, those with a cluster of their own and
those with a test on the module-wide broker that the cluster pass leaves out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import OWN_BROKER_MODULES, UNPROVEN_MODULES_KEY, shares_a_running_broker
from tests.support.cluster_kind import OWN_CLUSTER_MODULES

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def config(pytestconfig: pytest.Config) -> Iterator[pytest.Config]:
    """The session's config with one suite noted as unproven (as collection notes them)."""
    before = pytestconfig.stash.get(UNPROVEN_MODULES_KEY, frozenset())
    pytestconfig.stash[UNPROVEN_MODULES_KEY] = frozenset({"tests/interop/test_unproven_example.py"})
    yield pytestconfig
    pytestconfig.stash[UNPROVEN_MODULES_KEY] = before


def test_an_interop_suite_shares_unless_it_restarts_its_broker_or_is_unproven(config: pytest.Config) -> None:
    assert shares_a_running_broker(config, ROOT / "tests/interop/test_interop_roundtrip.py")
    assert shares_a_running_broker(config, ROOT / "tests/interop/sql/test_node_info.py")
    assert not shares_a_running_broker(config, ROOT / "tests/interop/test_unproven_example.py")
    for module in [*OWN_BROKER_MODULES, *OWN_CLUSTER_MODULES]:
        assert not shares_a_running_broker(config, ROOT / module), module


def test_suites_outside_interop_keep_their_own(config: pytest.Config) -> None:
    """The cluster pass runs tests/interop only: nothing proves the others fit to share."""
    for module in ("tests/console/test_console_pages.py", "tests/fuzz/test_fuzz_wire.py",
                   "tests/chaos/sql/test_node_sigterm.py"):
        assert not shares_a_running_broker(config, ROOT / module), module
