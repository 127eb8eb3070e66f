"""The gateway is a client of the engine: importing it loads no torch and no engine core. Inside,
it reads top down: no import cycle, HTTP only at its edge (gateway/http/), formats below
everything that drives them."""

import ast
import re
import subprocess
import sys
from pathlib import Path

from tests.support.imports import find_cycle, package_imports

FORBIDDEN = ["torch"] + [
    f"agentgate.engine.{m}" for m in ("core", "scheduler", "runner", "models", "layers", "loaders", "llm")
]


def _loaded_after(statement: str) -> list[str]:
    code = f"import sys\n{statement}\nprint(','.join(m for m in {FORBIDDEN!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return [m for m in out.stdout.strip().split(",") if m]


def test_importing_the_app_loads_no_torch_and_no_engine_core():
    assert _loaded_after("import agentgate.gateway.http.app") == []


def test_importing_the_cli_loads_no_torch():
    assert _loaded_after("import agentgate.gateway.command.cli") == []


def test_the_check_itself_sees_torch_when_it_is_imported():
    assert "torch" in _loaded_after("import agentgate.engine.runner.base")


def _sdk_loaded_after(statement: str) -> list[str]:
    """The modules of the ``mcp`` SDK (and its HTTP client) loaded after ``statement``, in a fresh interpreter."""
    code = f"import sys\n{statement}\nprint(','.join(m for m in sys.modules if m.split('.')[0] in ('mcp', 'httpx2')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return [m for m in out.stdout.strip().split(",") if m]


def test_an_app_with_no_mcp_server_configured_loads_no_mcp_sdk():
    """The SDK is most of the gateway's imports; only a first MCP call loads it (gateway.mcp.sdk)."""
    app = "create_app(Settings(), engines=[EngineTarget('ipc:///unused')])"
    imports = "from agentgate.gateway.config.settings import Settings\n"
    imports += "from agentgate.gateway.http.app import EngineTarget, create_app\n"
    assert _sdk_loaded_after(imports + app) == []
    assert _sdk_loaded_after("import agentgate.gateway.command.cli") == []


def test_the_check_sees_the_sdk_once_an_mcp_server_is_called():
    call = (
        "import anyio\nfrom agentgate.gateway.mcp.allowlist import McpServer\n"
        "from agentgate.gateway.mcp.client import McpEndpoint, McpFailure, list_tools\n"
        "try:\n    anyio.run(list_tools, McpEndpoint(McpServer('closed', 'http://127.0.0.1:9/mcp')), 5.0)\n"
        "except McpFailure:\n    pass"
    )
    assert "mcp.client.session" in _sdk_loaded_after(call)


def _gateway_imports() -> dict[str, set[str]]:
    return package_imports("agentgate.gateway")


def test_no_import_cycle_inside_the_gateway_not_even_for_type_checking():
    graph = _gateway_imports()
    assert len(graph) > 30 and "agentgate.gateway.dispatch" in graph["agentgate.gateway.http.routes.openai"]
    assert find_cycle(graph) is None, "import cycle: " + " -> ".join(find_cycle(graph) or [])


def test_the_request_context_is_a_leaf():
    assert _gateway_imports()["agentgate.gateway.context"] == set()


GATEWAY = Path(__file__).resolve().parents[2] / "gateway"
HTTP_LIBRARIES = ("starlette", "sse_starlette", "uvicorn")
# ASGI messages and scopes: their types ("http.disconnect", "websocket.receive", ...), a scope read.
ASGI = re.compile(r"""["'](?:http|websocket|lifespan)\.[a-z_.]+["']|\bscope\s*(?:\[|\.get\()|\bASGIApp\b""")


def _imported(tree: ast.AST) -> set[str]:
    """Every module ``tree`` imports, at the top, in a function or under TYPE_CHECKING."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_only_the_http_edge_knows_starlette_and_reads_asgi_messages():
    outside = [p for p in GATEWAY.rglob("*.py") if "http" not in p.relative_to(GATEWAY).parts[:1]]
    assert len(outside) > 40
    leaks = []
    for path in outside:
        text = path.read_text()
        for name in _imported(ast.parse(text)):
            if name.split(".")[0] in HTTP_LIBRARIES:
                leaks.append(f"{path.relative_to(GATEWAY)} imports {name}")
        leaks += [f"{path.relative_to(GATEWAY)} reads ASGI: {m.group(0)}" for m in ASGI.finditer(text)]
    assert leaks == []


def test_the_check_sees_starlette_in_the_edge():
    text = (GATEWAY / "http" / "sse.py").read_text()
    assert "starlette.types" in _imported(ast.parse(text)) and ASGI.search(
        (GATEWAY / "http" / "middleware.py").read_text()
    )


def _reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for module in graph[todo.pop()] - seen:
            seen.add(module)
            todo.append(module)
    return seen


def test_no_format_reaches_the_stream_the_chat_core_or_the_generation():
    """Formats write bytes from plain values and never call up: none imports, even through
    others, the HTTP edge, the chat core, dispatch or the generation."""
    graph = _gateway_imports()
    above = {f"agentgate.gateway.{m}" for m in ("chat", "dispatch", "generation", "choice", "lease")}
    formats = [m for m in graph if m.startswith("agentgate.gateway.formats")]
    assert len(formats) >= 4
    for module in formats:
        reached = _reaches(graph, module)
        assert not reached & above and not any(m.startswith("agentgate.gateway.http") for m in reached), module


API_PACKAGES = ("agentgate.gateway.responses_api", "agentgate.gateway.anthropic_api")
# What the APIs' types and items may stand on: each other, the plain errors and the tool-call values.
BELOW_API_TYPES = ("agentgate.gateway.api_types", "agentgate.gateway.errors", "agentgate.gateway.tools")


def _arrows_up_from_the_bottom(graph: dict[str, set[str]]) -> list[str]:
    """Each format that reaches an API package, and each module of api_types that reaches anything
    of the gateway but the modules below it, even through others or under TYPE_CHECKING."""
    arrows = []
    for module in graph:
        reached = _reaches(graph, module)
        if module.startswith("agentgate.gateway.formats"):
            arrows += [f"{module} -> {m}" for m in sorted(reached) if m.startswith(API_PACKAGES)]
        if module.startswith("agentgate.gateway.api_types"):
            arrows += [f"{module} -> {m}" for m in sorted(reached) if not m.startswith(BELOW_API_TYPES)]
    return arrows


def test_formats_stand_on_the_api_types_never_on_an_api_package():
    """Formats sit below the APIs that drive them, the APIs' types and items below the formats:
    no format imports the Responses or Messages API packages, and api_types imports nothing of
    the gateway above it."""
    graph = _gateway_imports()
    assert sum(m.startswith("agentgate.gateway.api_types.") for m in graph) >= 4
    assert _arrows_up_from_the_bottom(graph) == []


def test_the_check_sees_a_format_or_an_api_type_that_imports_up():
    graph = _gateway_imports()
    graph["agentgate.gateway.formats.responses"].add("agentgate.gateway.responses_api.items")
    graph["agentgate.gateway.api_types.response_items"].add("agentgate.gateway.translation")
    arrows = _arrows_up_from_the_bottom(graph)
    assert "agentgate.gateway.formats.responses -> agentgate.gateway.responses_api.items" in arrows
    assert "agentgate.gateway.api_types.response_items -> agentgate.gateway.translation" in arrows


def test_the_tool_loop_stands_under_both_apis_and_neither_api_reads_through_the_other():
    """The one tool loop (gateway.tool_loop) is rendered by each API and imports neither; the
    Responses and Messages API packages never reach each other."""
    graph = _gateway_imports()
    assert "agentgate.gateway.tool_loop.loop" in _reaches(graph, "agentgate.gateway.anthropic_api.mcp_loop")
    for module in graph:
        reached = _reaches(graph, module)
        if module.startswith("agentgate.gateway.tool_loop"):
            assert not any(m.startswith(API_PACKAGES) for m in reached), module
        for mine, other in (API_PACKAGES, API_PACKAGES[::-1]):
            if module.startswith(mine):
                assert not any(m.startswith(other) for m in reached), module


GATEWAY = Path(__file__).resolve().parents[2] / "gateway"


def _modules_naming_gateway_state(root: Path) -> list[str]:
    """Modules under ``root`` outside the HTTP edge (gateway/http/) and app_state.py that import
    ``GatewayState``, under TYPE_CHECKING or in a function included."""
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith("http/") or relative == "app_state.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and any(alias.name == "GatewayState" for alias in node.names):
                found.append(relative)
    return found


def test_nothing_below_the_routes_takes_the_gateway_state(tmp_path):
    """app_state.py's promise: routes hand each service what it needs, never GatewayState whole."""
    assert _modules_naming_gateway_state(GATEWAY) == []
    (tmp_path / "tool_loop").mkdir()
    (tmp_path / "tool_loop" / "loop.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from agentgate.gateway.app_state import GatewayState\n"
    )
    assert _modules_naming_gateway_state(tmp_path) == ["tool_loop/loop.py"]
