"""Codex CLI and Claude Code, installed from the npm registry in the test run, each completing a
turn against a real ``agentgate serve`` at its defaults (docs/harnesses/), their requests
recorded through a proxy and checked against the captured fixtures that
tests/gateway/test_harness_requests.py replays in-process (issue 49).

Both run against the null runner (instant tokens, ``--null-reply-tokens`` so a reply ends as a
turn): the test is of the protocol. Cost: the npm install (~20 s, once per session, into the
session's temporary directory; no registry is a failure, not a skip: CI has it), then a few
seconds per CLI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway.test_harness_requests import CLAUDE, CODEX
from tests.support.recording_proxy import RecordingProxy
from tests.support.servers import LiveServer, start_server

CODEX_PACKAGE, CLAUDE_PACKAGE = "@openai/codex@0.171.0", "@anthropic-ai/claude-code@2.1.332"
MODEL = "SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def clis(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both CLIs from the npm registry (their native binaries ship inside registry packages)."""
    npm = shutil.which("npm")
    assert npm is not None, "npm is needed to install the agent CLIs"
    prefix = tmp_path_factory.mktemp("npm")
    subprocess.run(
        [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", CODEX_PACKAGE, CLAUDE_PACKAGE],
        check=True,
        timeout=300,
        capture_output=True,
    )
    return prefix / "node_modules" / ".bin"


@pytest.fixture(scope="module")
def harness_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The flags docs/harnesses/ name, on the null runner with a 32k context."""
    server = start_server(
        tmp_path_factory.mktemp("harness-server"),
        *("--runner", "null", "--max-model-len", "32768", "--null-reply-tokens", "16"),
        *("--max-tokens-overflow", "clamp", "--omit-unrunnable-tools"),
    )
    yield server
    server.stop()


def _run(command: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, env=env, cwd=cwd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )


def test_codex_exec_completes_a_turn(clis: Path, harness_server: LiveServer, tmp_path: Path):
    with RecordingProxy(harness_server.url) as proxy:
        home = tmp_path / "codex"
        home.mkdir()
        (home / "config.toml").write_text(
            f'model = "{MODEL}"\nmodel_provider = "agentgate"\n\n[model_providers.agentgate]\n'
            f'name = "agentgate"\nbase_url = "{proxy.url}/v1"\nwire_api = "responses"\n'
        )
        env = {**os.environ, "HOME": str(tmp_path), "CODEX_HOME": str(home)}
        done = _run([str(clis / "codex"), "exec", "--skip-git-repo-check", "Say hello."], env, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    posts = [e for e in proxy.exchanges if e["path"] == "/v1/responses"]
    assert posts and all(e["status"] == 200 for e in posts)
    sent = posts[0]
    assert sent["response_headers"]["x-agentgate-omitted-tools"] == "web_search"
    assert sorted(sent["body"]) == sorted(CODEX["body"])  # the fixture is what this version sends
    assert [t["type"] for t in sent["body"]["tools"]] == [t["type"] for t in CODEX["body"]["tools"]]


def test_claude_print_completes_a_turn(clis: Path, harness_server: LiveServer, tmp_path: Path):
    with RecordingProxy(harness_server.url) as proxy:
        env = {**os.environ, "HOME": str(tmp_path), "ANTHROPIC_BASE_URL": proxy.url, "ANTHROPIC_API_KEY": "local"}
        done = _run([str(clis / "claude"), "-p", "Say hello.", "--model", MODEL], env, tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    posts = [e for e in proxy.exchanges if e["path"] == "/v1/messages"]
    assert posts and all(e["status"] == 200 for e in posts)
    sent = posts[0]
    assert sent["headers"]["anthropic-beta"] == CLAUDE["headers"]["anthropic-beta"]
    assert sorted(sent["body"]) == sorted(CLAUDE["body"])
    assert [m["role"] for m in sent["body"]["messages"]] == ["user", "system"]
    assert json.dumps(sent["body"]["max_tokens"]) == "32000"  # served whole under --max-tokens-overflow clamp
