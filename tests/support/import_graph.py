"""An import-linter contract type: no import cycle between any two modules of the package.

import-linter's own ``acyclic_siblings`` squashes each package into one node and compares
siblings, so it misses a cycle between a package's ``__init__`` and one of its own modules. This
contract looks at the module graph itself (grimp's, which counts imports under ``TYPE_CHECKING``
and inside functions too) and reports every strongly connected component with one shortest cycle
through it and the line of each import on that cycle.

Registered in pyproject.toml (``[tool.importlinter] contract_types``) and run by ``make lint``
(``lint-imports``, which puts the repository root on ``sys.path``).
"""

from __future__ import annotations

import itertools
from collections import deque

import grimp
from importlinter import Contract, ContractCheck, fields, output
from importlinter.application import contract_utils
from importlinter.application.contract_utils import AlertLevel


def strongly_connected_components(graph: grimp.ImportGraph) -> list[list[str]]:
    """The components of more than one module (each a cycle or several), modules sorted."""
    modules = sorted(graph.modules)
    imports = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in modules:
        if root in index:
            continue
        # Tarjan's algorithm, iterative: the package has hundreds of modules and deep chains.
        work = [(root, 0)]
        while work:
            module, next_child = work.pop()
            if next_child == 0:
                index[module] = low[module] = len(index)
                stack.append(module)
                on_stack.add(module)
            children = imports[module]
            if next_child < len(children):
                work.append((module, next_child + 1))
                child = children[next_child]
                if child not in index:
                    work.append((child, 0))
                elif child in on_stack:
                    low[module] = min(low[module], index[child])
                continue
            if low[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[module])
    return sorted(components)


def shortest_cycle(graph: grimp.ImportGraph, component: list[str]) -> list[str]:
    """One shortest cycle through the component's first module (first module repeated last)."""
    members = set(component)
    start = component[0]
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        module = queue.popleft()
        for child in sorted(graph.find_modules_directly_imported_by(module) & members):
            if child == start:
                path = [module]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if child not in came_from:
                came_from[child] = module
                queue.append(child)
    raise ValueError(f"{start} is on no cycle of {component}")


class AcyclicModulesContract(Contract):
    """``type = "acyclic_modules"``: no module of ``containers`` is on an import cycle."""

    type_name = "acyclic_modules"

    containers = fields.ListField(subfield=fields.StringField())
    ignore_imports = fields.SetField(subfield=fields.ImportExpressionField(), required=False)
    unmatched_ignore_imports_alerting = fields.EnumField(AlertLevel, default=AlertLevel.ERROR)

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        removal = contract_utils.remove_ignored_imports_and_report(
            graph=graph,
            ignore_imports=self.ignore_imports,  # type: ignore[arg-type]
            unmatched_alerting=self.unmatched_ignore_imports_alerting,  # type: ignore[arg-type]
        )
        prefixes: tuple[str, ...] = tuple(self.containers)  # type: ignore[arg-type]
        cycles = []
        for component in strongly_connected_components(graph):
            if any(m == p or m.startswith(p + ".") for m in component for p in prefixes):
                cycle = shortest_cycle(graph, component)
                steps = []
                for importer, imported in itertools.pairwise(cycle):
                    lines = sorted(d["line_number"] for d in graph.get_import_details(importer=importer, imported=imported))
                    steps.append((importer, imported, lines))
                cycles.append((component, steps))
        return ContractCheck(kept=not cycles, warnings=list(removal.warnings),
                             ignored_import_count=removal.ignored_import_count, metadata={"cycles": cycles})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for component, steps in check.metadata["cycles"]:
            output.print_error(f"{len(component)} modules import each other: {', '.join(component)}")
            output.print_error("for example:")
            for importer, imported, lines in steps:
                where = ", ".join(f"l.{n}" for n in lines)
                output.print_error(f"  {importer} -> {imported} ({where})", bold=False)
            output.new_line()
