"""The modules of oncestream.log import each other without cycles (issue 10: recovery in its own
module broke the producer_state <-> transactions cycle). Imports under TYPE_CHECKING count too:
they are the same dependency, only hidden from the interpreter."""

from __future__ import annotations

import ast
from pathlib import Path

import oncestream.log

PACKAGE = "oncestream.log"


def _log_imports(path: Path) -> set[str]:
    """The oncestream.log modules ``path`` imports, at any depth of its syntax tree."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == PACKAGE:
                found.update(f"{PACKAGE}.{alias.name}" for alias in node.names)
            elif node.module.startswith(PACKAGE + "."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith(PACKAGE + "."))
    return found


def test_log_modules_form_no_import_cycle() -> None:
    directory = Path(oncestream.log.__file__).parent
    graph = {
        f"{PACKAGE}.{path.stem}": _log_imports(path) for path in directory.glob("*.py") if path.stem != "__init__"
    }
    cycles = []

    def visit(module: str, stack: list[str]) -> None:
        if module in stack:
            cycles.append(" -> ".join([*stack[stack.index(module):], module]))
            return
        for imported in sorted(graph.get(module, ())):
            visit(imported, [*stack, module])

    for module in sorted(graph):
        visit(module, [])
    assert cycles == []
    assert f"{PACKAGE}.producer_state" in graph[f"{PACKAGE}.recovery"]
