"""`python -m agentgate.loadtests` end to end against a live gateway (null runner): closed loop with an
abort storm (client disconnects) and a pause, open loop with server-side aborts."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.http import engine_idle, wait_for
from tests.support.servers import ADMIN_KEY, REPO


def _run(server, out, *flags: str) -> dict:
    command = [
        sys.executable,
        "-m",
        "agentgate.loadtests",
        "--url",
        server.url,
        "--admin-key",
        ADMIN_KEY,
        "--out",
        str(out),
        "--no-progress",
        "--metrics-interval",
        "0.5",
        *flags,
    ]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "agentgate load test" in done.stdout and "report:" in done.stdout
    return json.loads((out / "report.json").read_text())


def test_closed_loop_with_an_abort_storm_and_a_pause(loadtest_server, tmp_path):
    # Formatted by hand: each flag beside its value, as on a command line.
    report = _run(loadtest_server, tmp_path, "--agents", "6", "--turns", "3", "--duration", "4", "--reply-tokens", "8",
                  "--tool-latency", "0.01,0.05", "--abort-every", "1", "--abort-fraction", "0.5",
                  "--pause-at", "2:0.5:keep", "--seed", "3")  # fmt: skip
    s = report["summary"]
    assert s["requests"]["ok"] > 10 and s["requests"]["errors"] == 0 and s["requests"]["truncated"] == 0
    assert s["requests"]["aborted"] >= 1, "the abort storms hit nothing"
    assert s["tokens"]["completion"]["p50"] == 8 and s["tokens"]["completion"]["max"] == 8
    assert set(s["tokens"]["prompt_mean_by_turn"]) <= {"0", "1", "2"}
    prompts = s["tokens"]["prompt_mean_by_turn"]
    assert prompts["0"] < prompts["1"] < prompts["2"]  # the conversations grow
    kinds = [e["kind"] for e in report["events"]]
    assert "pause" in kinds and "resume" in kinds and "abort_storm" in kinds
    server = report["server_view"]
    assert server["prefix_cache_hit_rate"] > 0.3  # the shared system prompt and the resent conversations
    assert server["finished_by_reason"].get("disconnect", 0) + server["finished_by_reason"].get("abort", 0) >= 1
    assert report["cpu"]["client_cpu_s"] > 0 and report["cpu"]["client_cores"] > 0
    assert len(report["requests"]) == s["requests"]["total"]
    plots = report["plots"]
    if plots:  # matplotlib installed
        assert {p.rsplit("/", 1)[1] for p in plots} == {"latency_cdf.png", "throughput.png"}
        assert all((tmp_path / p.rsplit("/", 1)[1]).stat().st_size > 10_000 for p in plots)
    else:
        assert any("matplotlib" in n for n in report["notes"])
    wait_for(lambda: engine_idle(loadtest_server.url), timeout=10, message="the server to be idle after the run")


def test_open_loop_with_server_side_aborts(loadtest_server, tmp_path):
    # Formatted by hand: each flag beside its value, as on a command line.
    report = _run(loadtest_server, tmp_path, "--mode", "open", "--rate", "8", "--turns", "2", "--duration", "3",
                  "--reply-tokens", "6", "--abort-every", "1", "--abort-via", "server", "--no-plots",
                  "--save-result", "--metric-percentiles", "50,90,99")  # fmt: skip
    s = report["summary"]
    # vLLM bench's result JSON, under its file name: its keys, from the same requests.
    saved = Path(report["vllm_bench_result"])
    assert saved.parent == tmp_path and re.fullmatch(
        r"agentgate-8\.0qps-concurrency256-.+-\d{8}-\d{6}\.json", saved.name
    )
    bench = json.loads(saved.read_text())
    assert bench["completed"] == s["requests"]["ok"] and bench["request_rate"] == 8.0
    assert bench["total_output_tokens"] == s["throughput"]["output_tokens"]
    for name in ("ttft", "tpot", "itl"):
        assert {f"{k}_{name}_ms" for k in ("mean", "median", "std", "p50", "p90", "p99")} <= set(bench), name
    assert bench["p50_ttft_ms"] == pytest.approx(1000 * s["latency_s"]["ttft"]["p50"])
    assert "mean_e2el_ms" not in bench  # not asked for (vLLM bench's default: ttft,tpot,itl)
    assert report["config"]["mode"] == "open" and report["run"]["conversations"] >= 10
    assert s["requests"]["ok"] >= 10 and s["requests"]["errors"] == 0
    assert not [e for e in report["events"] if e["kind"] == "abort_failed"]
    assert report["plots"] == []
