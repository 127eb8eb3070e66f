"""The gateway is a client of the engine: importing it loads no torch and no engine core."""

import subprocess
import sys

from tests.support.imports import find_cycle, package_imports

FORBIDDEN = ["torch"] + [f"agentgate.engine.{m}" for m in ("core", "scheduler", "runner", "models", "llm")]


def _loaded_after(statement: str) -> list[str]:
    code = f"import sys\n{statement}\nprint(','.join(m for m in {FORBIDDEN!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return [m for m in out.stdout.strip().split(",") if m]


def test_importing_the_app_loads_no_torch_and_no_engine_core():
    assert _loaded_after("import agentgate.gateway.http.app") == []


def test_importing_the_cli_loads_no_torch():
    assert _loaded_after("import agentgate.gateway.cli") == []


def test_the_check_itself_sees_torch_when_it_is_imported():
    assert "torch" in _loaded_after("import agentgate.engine.core")


def _gateway_imports() -> dict[str, set[str]]:
    return package_imports("agentgate.gateway")


def test_no_import_cycle_inside_the_gateway_not_even_for_type_checking():
    graph = _gateway_imports()
    assert len(graph) > 30 and "agentgate.gateway.dispatch" in graph["agentgate.gateway.http.routes.openai"]
    assert find_cycle(graph) is None, "import cycle: " + " -> ".join(find_cycle(graph) or [])


def test_the_request_context_is_a_leaf():
    assert _gateway_imports()["agentgate.gateway.context"] == set()
