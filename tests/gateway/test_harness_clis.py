"""Codex CLI and Claude Code, installed from the npm registry in the test run, each completing a
turn against a real ``agentgate serve`` at its defaults (docs/harnesses/), their requests
recorded through a proxy and checked against the captured fixtures that
tests/gateway/test_harness_requests.py replays in-process (issue 49); then a tool round trip each.

The turns run against the null runner (instant tokens, ``--null-reply-tokens`` so a reply ends as a
turn): the test is of the protocol. The round trips run against a gateway whose engine's replies
are scripted (``tests.support.scripted_engine``) by what the conversation holds: the model calls the
CLI's own tool (Codex's ``exec_command``, Claude Code's ``Read``) until that tool's output is in the
prompt, then answers; so each CLI runs the call the server parsed and sends its result back. Cost:
the npm install (~20 s, once per session, into the session's temporary directory; no registry is
a failure, not a skip: CI has it), then a few seconds per CLI.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentgate.engine.model_files.model_path import default_model_path
from agentgate.engine.sampling_params import SamplingParams
from agentgate.engine.text.tokenizer import load_tokenizer
from agentgate.gateway.config.settings import Settings
from tests.gateway.test_harness_requests import CLAUDE, CODEX
from tests.support.recording_proxy import RecordingProxy
from tests.support.scripted_engine import SCRIPTED_ENGINE, scripted_gateway, served_over_http
from tests.support.servers import LiveServer, start_server

CODEX_PACKAGE, CLAUDE_PACKAGE = "@openai/codex@0.171.0", "@anthropic-ai/claude-code@2.1.332"
MODEL = "SmolLM2-135M-Instruct"
EOS = 2
# The round trips: what each tool is asked, and what its output holds (never the call's own text)
CODEX_COMMAND, CODEX_OUTPUT = "printf 'round%s' trip-ok", "roundtrip-ok"
NOTE_TEXT = "the note says lighthouse-roundtrip"


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


@pytest.fixture(scope="module")
def note(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The file Claude Code's Read is asked for."""
    path = tmp_path_factory.mktemp("claude-workdir") / "note.txt"
    path.write_text(NOTE_TEXT + "\n")
    return path


@pytest.fixture(scope="module")
def scripted_url(note: Path) -> Iterator[str]:
    """A gateway at the harness flags with a 32k context, over an engine that calls the CLI's tool
    until the tool's output is in the prompt, then answers."""
    tokenizer = load_tokenizer(default_model_path())

    def reply(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False) + [EOS]

    def call(name: str, **arguments: str) -> list[int]:
        return reply("<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>")

    def model(prompt: list[int], _params: SamplingParams) -> list[int]:
        text = tokenizer.decode(prompt, skip_special_tokens=False)
        if CODEX_OUTPUT in text or NOTE_TEXT in text:
            return reply("Done: the tool said " + ("roundtrip-ok." if CODEX_OUTPUT in text else "lighthouse."))
        if '"exec_command"' in text:
            return call("exec_command", cmd=CODEX_COMMAND)
        return call("Read", file_path=str(note))

    settings = Settings(served_model_name=(MODEL,), omit_unrunnable_tools=True, max_tokens_overflow="clamp")
    engine = dataclasses.replace(SCRIPTED_ENGINE, max_model_len=32768, num_kv_blocks=8192)
    with scripted_gateway(settings, None, prompt_script=model, engine=engine) as gateway:
        with served_over_http(gateway) as url:
            yield url


def _codex_env(tmp_path: Path, url: str) -> dict[str, str]:
    home = tmp_path / "codex"
    home.mkdir()
    (home / "config.toml").write_text(
        f'model = "{MODEL}"\nmodel_provider = "agentgate"\n\n[model_providers.agentgate]\n'
        f'name = "agentgate"\nbase_url = "{url}/v1"\nwire_api = "responses"\n'
    )
    return {**os.environ, "HOME": str(tmp_path), "CODEX_HOME": str(home)}


def _run(command: list[str], env: dict[str, str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def test_codex_exec_completes_a_turn(clis: Path, harness_server: LiveServer, tmp_path: Path):
    with RecordingProxy(harness_server.url) as proxy:
        env = _codex_env(tmp_path, proxy.url)
        done = _run([str(clis / "codex"), "exec", "--skip-git-repo-check", "Say hello."], env, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    posts = [e for e in proxy.exchanges if e["path"] == "/v1/responses"]
    assert posts and all(e["status"] == 200 for e in posts)
    sent = posts[0]
    assert sent["response_headers"]["x-agentgate-omitted-tools"] == "web_search"
    assert sorted(sent["body"]) == sorted(CODEX["body"])  # the fixture is what this version sends
    assert [t["type"] for t in sent["body"]["tools"]] == [t["type"] for t in CODEX["body"]["tools"]]


@pytest.fixture(scope="module")
def model_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The default model at the flags docs/harnesses/codex.md names for it, greedy, on one thread (the
    engine's thread count otherwise follows the machine's load), so that the reply is the same alone and
    inside the suite for the same prompt (`fixed_workdir`)."""
    server = start_server(
        tmp_path_factory.mktemp("harness-model-server"),
        *("--omit-unrunnable-tools", "--max-tokens-default", "128", "--default-temperature", "0"),
        *("--cpu-threads", "1"),
    )
    yield server
    server.stop()


PROMPT = "Say hello."


@pytest.fixture
def fixed_workdir() -> Iterator[Path]:
    """One working directory, whatever pytest names its temporary ones: Codex writes its path into the
    prompt (with the date and the time zone), and a greedy reply of the small model moves with it."""
    workdir = Path("/tmp/agentgate-codex-default-model")
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir()
    yield workdir
    shutil.rmtree(workdir, ignore_errors=True)


def test_codex_exec_completes_a_turn_on_the_default_model(clis: Path, model_server: LiveServer, fixed_workdir: Path):
    """The real model reads Codex's whole prompt (without its namespace, as the docs say: 9,223
    tokens with it, past the model's 8,192) and its answer ends the turn. The prompt holds the date,
    so whether a greedy answer ends within the budget can change from one day to the next."""
    with RecordingProxy(model_server.url) as proxy:
        env = _codex_env(fixed_workdir, proxy.url) | {"TZ": "Etc/UTC"}
        command = [str(clis / "codex"), "exec", "--skip-git-repo-check", "--disable", "multi_agent", PROMPT]
        done = _run(command, env, fixed_workdir, timeout=240)  # the model reads the whole prompt on the CPU
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    posts = [e for e in proxy.exchanges if e["path"] == "/v1/responses"]
    assert len(posts) == 1 and posts[0]["status"] == 200
    assert "namespace" not in [t["type"] for t in posts[0]["body"]["tools"]]
    used = re.search(r"tokens used\s+([\d,]+)", done.stdout + done.stderr)
    assert used is not None and int(used.group(1).replace(",", "")) > 6000  # the whole prompt was read
    answer = done.stdout.strip()
    assert answer and "ERROR" not in done.stderr


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


def test_codex_runs_the_command_the_server_parsed_and_sends_its_output_back(
    clis: Path, scripted_url: str, tmp_path: Path
):
    with RecordingProxy(scripted_url) as proxy:
        env = _codex_env(tmp_path, proxy.url)
        done = _run([str(clis / "codex"), "exec", "--skip-git-repo-check", "Run the command."], env, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Done: the tool said roundtrip-ok." in done.stdout
    posts = [e for e in proxy.exchanges if e["path"] == "/v1/responses"]
    assert len(posts) == 2 and all(e["status"] == 200 for e in posts)
    items = posts[1]["body"]["input"]
    [called] = [i for i in items if i.get("type") == "function_call"]
    assert called["name"] == "exec_command" and json.loads(called["arguments"]) == {"cmd": CODEX_COMMAND}
    [output] = [i for i in items if i.get("type") == "function_call_output"]
    assert output["call_id"] == called["call_id"] and CODEX_OUTPUT in json.dumps(output["output"])


def test_claude_code_reads_the_file_the_server_asked_for_and_sends_it_back(clis: Path, scripted_url: str, note: Path):
    with RecordingProxy(scripted_url) as proxy:
        env = {**os.environ, "HOME": str(note.parent), "ANTHROPIC_BASE_URL": proxy.url, "ANTHROPIC_API_KEY": "local"}
        done = _run([str(clis / "claude"), "-p", "Read note.txt.", "--model", MODEL], env, note.parent)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Done: the tool said lighthouse." in done.stdout
    posts = [e for e in proxy.exchanges if e["path"] == "/v1/messages"]
    assert len(posts) == 2 and all(e["status"] == 200 for e in posts)
    messages = posts[1]["body"]["messages"]
    [use] = [b for m in messages if m["role"] == "assistant" for b in m["content"] if b["type"] == "tool_use"]
    assert use["name"] == "Read" and use["input"] == {"file_path": str(note)}
    results = [b for m in messages if m["role"] == "user" and isinstance(m["content"], list) for b in m["content"]]
    [result] = [b for b in results if b["type"] == "tool_result"]
    assert result["tool_use_id"] == use["id"] and NOTE_TEXT in json.dumps(result["content"])
