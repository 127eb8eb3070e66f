"""A package's import graph, read from its source, and the cycles in it."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path


def package_imports(package: str) -> dict[str, set[str]]:
    """Each module of ``package`` (e.g. ``agentgate.gateway``) -> the package's modules it names in an import:
    at the top, in a function, or under TYPE_CHECKING (``from package import module`` names the module)."""
    root = Path(importlib.import_module(package).__file__).parent
    modules = {package} | {info.name for info in pkgutil.walk_packages([str(root)], prefix=f"{package}.")}
    depth = package.count(".") + 1
    graph: dict[str, set[str]] = {}
    for name in modules:
        relative = Path(*name.split(".")[depth:])
        path = root / relative / "__init__.py" if (root / relative).is_dir() else root / relative.with_suffix(".py")
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                targets = [
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                    for a in node.names
                ]
            edges |= {t for t in targets if t in modules and t != name}
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (its modules in order, the first repeated at the end), or None."""
    visiting: list[str] = []
    done: set[str] = set()

    def visit(module: str) -> list[str] | None:
        if module in visiting:
            return visiting[visiting.index(module) :] + [module]
        if module in done:
            return None
        visiting.append(module)
        for imported in sorted(graph[module]):
            if (cycle := visit(imported)) is not None:
                return cycle
        visiting.pop()
        done.add(module)
        return None

    for module in sorted(graph):
        if (cycle := visit(module)) is not None:
            return cycle
    return None
