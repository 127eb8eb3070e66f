"""The README's examples, run exactly as written, checked for what the text around them promises.

- ``./scripts/serve.sh``, then the ``curl``: the server it starts answers what the README says;
- the offline Python block prints what the README says;
- ``./scripts/test.sh`` is this suite: what the text promises of it is that CI runs exactly it;
- every ``agentgate ...`` command that ``docs/`` shows parses, as written, with the real CLI (they
  name other hosts; the tests that start engines and gateways apart run the same forms on loopback,
  ``tests/support/servers.py``), and a doc whose commands no test runs (other hosts, a cluster) says
  so; the README's benchmarks are marked as long runs the tests skip, and each module it names exists.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from agentgate.gateway.command.cli import build_parser
from agentgate.gateway.config.flags import settings_from_args
from tests.support.answers import reference_chat
from tests.support.servers import clean_environment

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
FENCE = re.compile(r"^```(\w+)\n(.*?)^```\n", re.S | re.M)
SERVED = "http://127.0.0.1:8000"


def fenced_blocks() -> list[tuple[str, str, str]]:
    """(language, code, the README's text up to the next block or heading after it)."""
    matches = list(FENCE.finditer(README))
    blocks = []
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(README)
        after = README[match.end() : end].split("\n#", 1)[0]
        blocks.append((match.group(1), match.group(2), after))
    return blocks


def block(start: str) -> tuple[str, str]:
    """The code of the one block that starts with ``start``, and the text after it."""
    [found] = [(code, after) for _, code, after in fenced_blocks() if code.startswith(start)]
    return found


def promised(after: str, verb: str) -> str:
    """What the text after a block says it answers or prints (the first backticked span after ``verb``)."""
    match = re.search(rf"{verb} `([^`]+)`", after)
    assert match, f"the README says nothing after its example that says what it {verb}"
    return match.group(1)


def test_every_example_is_one_this_file_runs():
    runs = ("./scripts/serve.sh", "curl ", "./scripts/test.sh", "from agentgate.engine import LLM")
    unrun = [code for _, code, _ in fenced_blocks() if not code.startswith(runs)]
    assert not unrun, f"README examples no test runs (add them here): {unrun}"
    assert len(fenced_blocks()) == len(runs)


def _port_in_use(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow
def test_serve_then_the_curl_answers_what_the_readme_says(tmp_path):
    serve, _ = block("./scripts/serve.sh")
    curl, after = block("curl ")
    assert not _port_in_use(8000), "SET-UP: something already listens on 127.0.0.1:8000, where the README serves"
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen(
        ["bash", "-c", serve],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=clean_environment(),
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 420  # the set-up it runs first, then the model's load
        while not _ready():
            assert server.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the README's server did not come up in 7 minutes"
            time.sleep(1)
        # Greedy on the served default (int4 as stored), the answer holds with margin here.
        body = json.loads(shlex.split(curl.replace("\\\n", " "))[-1])
        reference_chat(SERVED, body["messages"], max_tokens=32)
        done = subprocess.run(["bash", "-c", curl], capture_output=True, text=True, timeout=120, check=True)
        reply = json.loads(done.stdout)
        assert reply["object"] == "chat.completion"
        assert reply["choices"][0]["message"]["content"] == promised(after, "answers")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


def _ready() -> bool:
    try:
        return httpx.get(f"{SERVED}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.slow
def test_the_offline_python_example_prints_what_the_readme_says(tmp_path):
    code, after = block("from agentgate.engine import LLM")
    # As a user runs it: a fresh interpreter of the installed package, outside the repository.
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=clean_environment()
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == promised(after, "prints") + "\n"


def test_the_test_command_is_exactly_what_ci_runs():
    code, after = block("./scripts/test.sh")
    assert "exactly what CI runs" in README.split(code)[0][-200:]
    steps = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    assert steps[-1] == code.strip()


def _commands(text: str) -> list[str]:
    """The complete ``agentgate ...`` commands a text shows in backticks (no placeholder words)."""
    found = re.findall(r"`(agentgate (?:serve|engine|gateway|generate)\b[^`]*)`", text)
    return [c for c in found if not re.search(r"\b(N|M|ADDR|KEY)\b|\.\.\.", c)]


@pytest.mark.parametrize("doc", sorted((ROOT / "docs").glob("*.md")), ids=lambda p: p.name)
def test_every_command_the_docs_show_parses_as_written(doc: Path):
    for command in _commands(doc.read_text()):
        args = build_parser().parse_args(shlex.split(command)[1:])
        settings = settings_from_args(args)  # the flags' values as the CLI checks them
        if args.command in ("serve", "engine"):
            settings.engine_config()
        if args.command in ("serve", "gateway"):
            settings.check_shared_state()


def test_docs_that_show_commands_the_tests_do_not_run_say_so():
    for doc in sorted((ROOT / "docs").glob("*.md")):
        text = doc.read_text()
        shows = re.search(r"^\s*(kubectl|podman|docker) ", text, re.M) or re.search(r"tcp://h\d", text)
        if shows:
            assert "the tests do not run" in text, f"{doc.name} shows commands no test runs without saying so"


def test_the_docs_show_the_split_deployment_commands():
    assert {c.split()[1] for c in _commands((ROOT / "docs" / "shared-state.md").read_text())} == {"engine", "gateway"}


def test_every_benchmark_the_readme_lists_is_marked_long_and_exists():
    section = README.split("## Benchmarks", 1)[1].split("\n## ", 1)[0]
    assert "the tests do not run them" in section
    modules = re.findall(r"`python -m (agentgate\.loadtests(?:\.\w+)?)", section)
    assert len(modules) >= 10
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    assert not missing, missing
