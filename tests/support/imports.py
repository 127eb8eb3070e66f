"""A package's import graph, read from its source, and the cycles in it."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path


def package_imports(package: str) -> dict[str, set[str]]:
    """Each module of ``package`` (e.g. ``agentgate.gateway``) -> the package's modules it imports: at the
    top, in a function, or under TYPE_CHECKING (``from package import module`` names the module). Importing
    ``a.b.c`` runs ``a/b/__init__`` first, so it counts as an import of each package above ``c`` too, except
    the importing module's own packages (already loaded when it runs): a function-local import of
    ``mcp.allowlist`` in ``config/settings_checks.py`` imports ``mcp/__init__`` and all it imports."""
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
        parents = {p for t in edges for p in _packages_above(t) if p in modules} - _packages_above(name)
        graph[name] = edges | parents
    return graph


def _packages_above(module: str) -> set[str]:
    """The packages Python loads before ``module``, ``module`` included: ``a.b.c`` -> {a, a.b, a.b.c}."""
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1)}


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
