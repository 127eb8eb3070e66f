"""NVIDIA AIPerf, an external benchmark client, against a real ``agentgate serve`` on the default model:
a short streaming chat profile (concurrency 2), its exported metrics read back and checked against
what the server counted. AIPerf needs a tokenizer directory: transformers saves one from the GGUF.

It costs more than 60 s on 2 cores: 50 s of its own (the tokenizer saved from the GGUF, AIPerf's
start, the requests; measured beside other load), on top of AIPerf's virtualenv (``loadtests/
aiperf_setup.sh``, about 3.5 minutes to install from the registry once). So the ``aiperf`` marker keeps
it out of the default run: ``pytest -m aiperf tests/loadtests/test_aiperf.py`` (``AGENTGATE_AIPERF``
may name another ``aiperf`` executable)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from agentgate.agents import prometheus
from agentgate.engine.model_files.model_path import default_model_path
from tests.support.fixtures import idle_around
from tests.support.servers import REPO

pytestmark = pytest.mark.aiperf

REQUESTS, CONCURRENCY, INPUT_TOKENS, OUTPUT_TOKENS = 4, 2, 32, 8


def aiperf_executable() -> Path:
    path = Path(os.environ.get("AGENTGATE_AIPERF") or REPO / ".venv-aiperf" / "bin" / "aiperf")
    assert path.is_file(), f"no AIPerf at {path}: run loadtests/aiperf_setup.sh (or set AGENTGATE_AIPERF)"
    return path


def test_aiperf_profiles_the_default_model_and_its_figures_match_the_server(model_server, tmp_path):
    aiperf = aiperf_executable()
    from transformers import AutoTokenizer

    gguf = default_model_path()
    tokenizer = tmp_path / "tokenizer"
    AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(tokenizer)
    [model] = httpx.get(f"{model_server.url}/v1/models", timeout=10).json()["data"]
    out = tmp_path / "aiperf"
    with idle_around(model_server):
        before = prometheus.parse(httpx.get(f"{model_server.url}/metrics", timeout=10).text)
        # Formatted by hand: each flag beside its value, as on a command line.
        command = [str(aiperf), "profile", "--model", model["id"], "--tokenizer", str(tokenizer),
                   "--url", model_server.url, "--endpoint-type", "chat", "--streaming",
                   "--concurrency", str(CONCURRENCY), "--request-count", str(REQUESTS),
                   "--synthetic-input-tokens-mean", str(INPUT_TOKENS), "--synthetic-input-tokens-stddev", "0",
                   "--output-tokens-mean", str(OUTPUT_TOKENS), "--output-tokens-stddev", "0",
                   "--extra-inputs", "ignore_eos:true", "--extra-inputs", f"min_tokens:{OUTPUT_TOKENS}",
                   "--random-seed", "1", "--artifact-dir", str(out), "--ui-type", "none",
                   "--no-server-metrics", "--no-gpu-telemetry"]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        after = prometheus.parse(httpx.get(f"{model_server.url}/metrics", timeout=10).text)
    figures = json.loads((out / "profile_export_aiperf.json").read_text())
    print(
        f"AIPerf {figures['aiperf_version']}: "
        + ", ".join(
            f"{name} p50 {figures[name]['p50']:.1f} {figures[name]['unit']}"
            for name in ("time_to_first_token", "inter_token_latency", "request_latency")
        )
        + f", {figures['output_token_throughput']['avg']:.2f} output tokens/s"
    )
    assert figures["is_complete"] and not figures["was_cancelled"] and figures["error_summary"] == []
    assert figures["request_count"]["avg"] == REQUESTS and "error_request_count" not in figures
    for name in ("time_to_first_token", "inter_token_latency", "request_latency"):
        assert figures[name]["count"] == REQUESTS and 0 < figures[name]["p50"] <= figures[name]["max"], name
    assert figures["time_to_first_token"]["max"] < figures["request_latency"]["max"]
    assert figures["output_sequence_length"]["min"] == figures["output_sequence_length"]["max"] == OUTPUT_TOKENS
    # The server saw the same: AIPerf's requests, each with the tokens AIPerf counted.
    delta = prometheus.delta(after, before)
    assert prometheus.value(delta, "agentgate_requests_total", finish_reason="length") == REQUESTS
    assert prometheus.value(delta, "agentgate_generation_tokens_total") == REQUESTS * OUTPUT_TOKENS
