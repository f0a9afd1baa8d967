"""The acyclic_modules import contract (tests/support/import_graph.py) that `make lint` runs:
it must see cycles hidden behind TYPE_CHECKING or inside a function, and a cycle between a
package's __init__ and its own module, which import-linter's acyclic_siblings does not."""

from __future__ import annotations

import textwrap
from pathlib import Path

import grimp
import pytest

from tests.support.import_graph import AcyclicModulesContract, shortest_cycle, strongly_connected_components


def _package(root: Path, name: str, files: dict[str, str]) -> grimp.ImportGraph:
    for relative, text in files.items():
        path = root / name / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return grimp.build_graph(name, cache_dir=None)


def _contract(**options: object) -> AcyclicModulesContract:
    return AcyclicModulesContract(name="no cycles", session_options={"root_packages": ["pkg_cycles"]},
                                  contract_options={"containers": ["pkg_cycles"], **options})


@pytest.fixture
def cyclic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> grimp.ImportGraph:
    monkeypatch.syspath_prepend(str(tmp_path))
    return _package(tmp_path, "pkg_cycles", {
        "__init__.py": """
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from pkg_cycles.sub.leaf import Leaf
        """,
        "sub/__init__.py": "",
        # A cycle between the root package's __init__ and a module below it.
        "sub/leaf.py": "import pkg_cycles\nclass Leaf: ...\n",
        # A three-module cycle closed by a function-local import.
        "a.py": "from pkg_cycles import b\n",
        "b.py": "from pkg_cycles import c\n",
        "c.py": "def late():\n    from pkg_cycles import a\n    return a\n",
        "d.py": "from pkg_cycles import a\n",  # imports the cycle, is not on it
    })


def test_every_cycle_is_one_component(cyclic: grimp.ImportGraph) -> None:
    assert strongly_connected_components(cyclic) == [
        ["pkg_cycles", "pkg_cycles.sub.leaf"],
        ["pkg_cycles.a", "pkg_cycles.b", "pkg_cycles.c"],
    ]
    assert shortest_cycle(cyclic, ["pkg_cycles.a", "pkg_cycles.b", "pkg_cycles.c"]) == [
        "pkg_cycles.a", "pkg_cycles.b", "pkg_cycles.c", "pkg_cycles.a"]


def test_the_contract_breaks_and_names_the_import_lines(cyclic: grimp.ImportGraph) -> None:
    check = _contract().check(cyclic, verbose=False)
    assert not check.kept
    steps = {(importer, imported): lines for _, cycle in check.metadata["cycles"] for importer, imported, lines in cycle}
    assert steps[("pkg_cycles.c", "pkg_cycles.a")] == [2]  # the function-local import
    assert steps[("pkg_cycles", "pkg_cycles.sub.leaf")] == [4]  # the TYPE_CHECKING import


def test_ignored_imports_break_the_cycles(cyclic: grimp.ImportGraph) -> None:
    check = _contract(ignore_imports=["pkg_cycles.c -> pkg_cycles.a", "pkg_cycles.sub.leaf -> pkg_cycles"]).check(
        cyclic, verbose=False)
    assert check.kept
