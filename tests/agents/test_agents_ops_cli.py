"""`agentgate ops` against a live gateway (null runner): status, pause/resume, abort, keys."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import httpx
import pytest

from agentgate.agents.ops_cli import main as ops
from tests.support.http import metrics, wait_for
from tests.support.servers import ADMIN_KEY, REPO, USER_KEY

BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 900, "ignore_eos": True, "stream": True}


def run_ops(capsys, server, *args: str, key: str | None = ADMIN_KEY) -> tuple[int, str, str]:
    flags = ["--url", server.url] + (["--admin-key", key] if key else [])
    code = ops([*flags, *args])
    out = capsys.readouterr()
    return code, out.out, out.err


class Streams:
    """Long streams in threads, each remembering its last finish reason."""

    def __init__(self, server, ids: list[str]) -> None:
        self.finish: dict[str, str | None] = {}
        self.threads = [threading.Thread(target=self._run, args=(server, i), daemon=True) for i in ids]
        for t in self.threads:
            t.start()

    def _run(self, server, request_id: str) -> None:
        headers = {"Authorization": f"Bearer {USER_KEY}", "X-Request-Id": request_id}
        reason = None
        with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=BODY, headers=headers, timeout=60) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    choices = json.loads(line[6:])["choices"]
                    if choices and choices[0]["finish_reason"]:
                        reason = choices[0]["finish_reason"]
        self.finish[request_id] = reason

    def join(self) -> None:
        for t in self.threads:
            t.join(30)


def test_status_shows_health_pause_state_and_load(null, capsys):
    code, out, _ = run_ops(capsys, null, "status")
    assert code == 0 and "ok" in out and "running" in out and "KV cache" in out and "1 alive / 1" in out
    streams = Streams(null, ["st-1", "st-2"])
    wait_for(lambda: metrics(null.url)["agentgate_requests_running"] == 2, timeout=15, message="two running streams")
    code, out, _ = run_ops(capsys, null, "status", "--json")
    status = json.loads(out)
    assert code == 0 and status["healthy"] and status["paused"] is False and status["engines"] == 1
    assert status["running"] == 2 and status["kv_usage"] > 0 and status["gateway_in_flight"] == 2
    code, out, _ = run_ops(capsys, null, "--json", "abort", "--all")
    assert code == 0 and json.loads(out)["all"] is True
    streams.join()
    assert streams.finish == {"st-1": "abort", "st-2": "abort"}


def test_pause_keep_freezes_and_resume_continues(null, capsys):
    streams = Streams(null, ["pz-1"])
    wait_for(lambda: metrics(null.url)["agentgate_requests_running"] == 1, timeout=15, message="a running stream")
    code, out, _ = run_ops(capsys, null, "pause", "--mode", "keep")
    assert code == 0 and "paused" in out and "keep" in out
    code, out, _ = run_ops(capsys, null, "status", "--json")
    assert json.loads(out)["paused"] is True
    tokens = metrics(null.url)["agentgate_generation_tokens_total"]
    code, out, _ = run_ops(capsys, null, "resume")
    assert code == 0 and "resumed" in out
    code, out, _ = run_ops(capsys, null, "status")
    assert "running" in out and "paused" not in out
    code, _, _ = run_ops(capsys, null, "abort", "pz-1")
    streams.join()
    assert code == 0 and streams.finish == {"pz-1": "abort"}
    assert metrics(null.url)["agentgate_generation_tokens_total"] >= tokens


def test_abort_by_id_reports_what_was_in_flight(null, capsys):
    streams = Streams(null, ["ab-1", "ab-2"])
    wait_for(lambda: metrics(null.url)["agentgate_requests_running"] == 2, timeout=15, message="two running streams")
    code, out, _ = run_ops(capsys, null, "abort", "ab-1", "ab-nope")
    assert code == 0 and "aborted ab-1" in out and "not in flight: ab-nope" in out
    code, out, _ = run_ops(capsys, null, "abort", "ab-nope")
    assert code == 1
    code, out, _ = run_ops(capsys, null, "abort", "ab-2")
    streams.join()
    assert streams.finish == {"ab-1": "abort", "ab-2": "abort"}


def test_keys_and_usage_errors(null, capsys):
    code, _, err = run_ops(capsys, null, "pause", key=None)
    assert code == 1 and "admin key" in err
    code, _, err = run_ops(capsys, null, "resume", key=USER_KEY)
    assert code == 1 and "HTTP 403" in err
    with pytest.raises(SystemExit) as info:
        ops(["--url", null.url, "abort", "x", "--all"])
    assert info.value.code == 2
    capsys.readouterr()
    code, _, err = run_ops(capsys, null, "status", key=ADMIN_KEY)
    assert code == 0


def test_unreachable_server(capsys):
    code = ops(["--url", "http://127.0.0.1:9", "status"])
    assert code == 1 and "unreachable" in capsys.readouterr().out


def test_the_agentgate_console_script_dispatches_ops(null):
    env = dict(os.environ, AGENTGATE_ADMIN_KEY=ADMIN_KEY, AGENTGATE_URL=null.url)
    done = subprocess.run(
        [sys.executable, "-m", "agentgate.gateway.command.cli", "ops", "status", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["healthy"] is True
    helped = subprocess.run(
        [sys.executable, "-m", "agentgate.gateway.command.cli", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert "ops" in helped.stdout


def test_sessions_commands(null, capsys):
    """Sessions come with issue 8; until then the command says so plainly."""
    code, out, err = run_ops(capsys, null, "sessions", "list")
    if code == 1 and "no /v1/sessions routes" in err:
        pytest.skip("this gateway has no sessions yet (issue 8)")
    assert code == 0
