"""The gateway is a client of the engine: importing it loads no torch and no engine core."""

import subprocess
import sys

FORBIDDEN = ["torch"] + [f"agentgate.engine.{m}" for m in ("core", "scheduler", "runner", "models", "llm")]


def _loaded_after(statement: str) -> list[str]:
    code = f"import sys\n{statement}\nprint(','.join(m for m in {FORBIDDEN!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return [m for m in out.stdout.strip().split(",") if m]


def test_importing_the_app_loads_no_torch_and_no_engine_core():
    assert _loaded_after("import agentgate.gateway.app") == []


def test_importing_the_cli_loads_no_torch():
    assert _loaded_after("import agentgate.gateway.cli") == []


def test_the_check_itself_sees_torch_when_it_is_imported():
    assert "torch" in _loaded_after("import agentgate.engine.core")


def _gateway_imports() -> dict[str, set[str]]:
    """Each gateway module -> the gateway modules it names in an import: at the top, in a
    function, or under TYPE_CHECKING (``from package import module`` names the module)."""
    import ast
    import pkgutil
    from pathlib import Path

    import agentgate.gateway as gateway

    root = Path(gateway.__file__).parent
    modules = {"agentgate.gateway"} | {
        info.name for info in pkgutil.walk_packages([str(root)], prefix="agentgate.gateway.")
    }
    graph: dict[str, set[str]] = {}
    for name in modules:
        relative = Path(*name.split(".")[2:])
        path = root / relative / "__init__.py" if (root / relative).is_dir() else root / relative.with_suffix(".py")
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                           for a in node.names]  # fmt: skip
            edges |= {t for t in targets if t in modules and t != name}
        graph[name] = edges
    return graph


def test_no_import_cycle_inside_the_gateway_not_even_for_type_checking():
    graph = _gateway_imports()
    assert len(graph) > 30 and "agentgate.gateway.dispatch" in graph["agentgate.gateway.routes.openai"]
    visiting: list[str] = []
    done: set[str] = set()

    def visit(module: str) -> None:
        if module in visiting:
            cycle = visiting[visiting.index(module):] + [module]
            raise AssertionError("import cycle: " + " -> ".join(cycle))
        if module in done:
            return
        visiting.append(module)
        for imported in sorted(graph[module]):
            visit(imported)
        visiting.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)


def test_the_request_context_is_a_leaf():
    assert _gateway_imports()["agentgate.gateway.context"] == set()
