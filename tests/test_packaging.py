"""Installed, the project is one import namespace, agentgate.*, and nothing else at the top level.

`agents` is the OpenAI Agents SDK's import name: a wheel that put our `agents/` at the top of
site-packages would merge with it and break `from agents import Runner`.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP_FOLDERS = ("engine", "gateway", "agents", "loadtests")


def test_every_package_folder_is_listed_under_the_agentgate_namespace():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {
        "agentgate." + ".".join(init.parent.relative_to(ROOT).parts)
        for top in TOP_FOLDERS
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert set(config["packages"]) == on_disk
    assert config["package-dir"] == {f"agentgate.{top}": top for top in TOP_FOLDERS}


@pytest.mark.slow
def test_the_wheel_installs_only_agentgate_and_imports_beside_the_agents_sdk(tmp_path: Path):
    pytest.importorskip("agents", reason="openai-agents is a test dependency")
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    [wheel] = tmp_path.glob("agentgate-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        tops = {name.split("/")[0] for name in names}
    static = "agentgate/gateway/static/"
    for page_file in (
        "index.html",
        "dashboard.html",
        "js/main.js",
        "js/dashboard/main.js",
        "vendor/marked/LICENSE",
        "vendor/dompurify/purify.es.js",
        "vendor/uplot/uPlot.esm.js",
    ):
        assert static + page_file in names, f"the wheel lacks {page_file}: the web pages would break once installed"
    assert "agentgate/loadtests/traces/agent_sessions.jsonl" in names, "the trace replay's default trace is missing"
    assert "agentgate/engine/kernels/decode_attention_cpu.c" in names, "the CPU kernel's source is missing"
    assert tops == {"agentgate", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info"}

    target = tmp_path / "site"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr
    assert not (target / "agents").exists()

    # Both import in one interpreter, from a folder outside the repository: the SDK from
    # site-packages, ours from the installed wheel.
    code = (
        "import agents, agentgate.agents, agentgate.engine.front.protocol\n"
        "from agents import Runner, Agent\n"
        "from agentgate.agents import AsyncClient\n"
        "print(agents.__file__)\nprint(agentgate.agents.__file__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-P", "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    sdk_file, ours_file = done.stdout.split()
    assert "site-packages" in sdk_file and str(target) not in sdk_file
    assert ours_file.startswith(str(target))
