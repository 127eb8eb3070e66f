"""agents/ is an HTTP client: it imports neither the engine nor the gateway (nor torch)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

AGENTS = Path(__file__).resolve().parents[2] / "agents"
FORBIDDEN = ("agentgate.engine", "agentgate.gateway", "torch")


def _forbidden(module: str) -> bool:
    return any(module == f or module.startswith(f + ".") for f in FORBIDDEN)


def test_no_module_of_agents_imports_engine_or_gateway():
    offenders = []
    for path in sorted(AGENTS.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if _forbidden(n)]
    assert not offenders, offenders


def test_importing_every_agents_module_loads_no_engine_or_gateway_module():
    modules = ["agentgate.agents"] + [
        "agentgate.agents." + ".".join(p.relative_to(AGENTS).with_suffix("").parts)
        for p in sorted(AGENTS.rglob("*.py"))
        if p.name != "__init__.py"
    ]
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "engine_or_torch = ('torch.', 'agentgate.engine', 'agentgate.gateway')\n"
        "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith(engine_or_torch))\n"
        "assert not bad, bad\n"
        "print(len(sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
