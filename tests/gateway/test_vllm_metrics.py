"""vLLM's metric names on the gateway's /metrics (``gateway.observation.vllm_metrics``): each is served with
vLLM's type, buckets and labels, and moves when requests run (in this process, a null engine
small enough that requests queue and blocks are taken for new content); every metric the
Grafana dashboard in ``deploy/grafana`` reads is served."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agentgate.agents import prometheus
from agentgate.engine.config import EngineConfig
from agentgate.engine.front.protocol import KV_RESIDENCY_BUCKETS
from agentgate.gateway.config.settings import Settings
from agentgate.gateway.observation.vllm_metrics import (
    ITL_BUCKETS,
    REQUEST_LATENCY_BUCKETS,
    TTFT_BUCKETS,
    build_1_2_5_buckets,
)
from tests.support.inprocess import InProcessGateway

# Two sequences at a time and a small cache: four requests make a queue and a visible KV usage.
SMALL_ENGINE = EngineConfig(runner="null", null_step_seconds=0.01, max_num_seqs=2, max_model_len=512, num_kv_blocks=64)
MODEL = "served-name"
PROMPT = list(range(100, 148))  # three full blocks of 16: a repeat finds them in the prefix cache
TOKENS = 30

GAUGES = ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"]
COUNTERS = [
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:request_success",
    "vllm:num_preemptions",  # served, but a null engine with room never preempts: checked for its type only
]
HISTOGRAMS = {
    "vllm:time_to_first_token_seconds": TTFT_BUCKETS,
    "vllm:inter_token_latency_seconds": ITL_BUCKETS,
    "vllm:e2e_request_latency_seconds": REQUEST_LATENCY_BUCKETS,
    "vllm:request_queue_time_seconds": REQUEST_LATENCY_BUCKETS,
    "vllm:request_prefill_time_seconds": REQUEST_LATENCY_BUCKETS,
    "vllm:request_decode_time_seconds": REQUEST_LATENCY_BUCKETS,
    "vllm:request_inference_time_seconds": REQUEST_LATENCY_BUCKETS,
    # build_1_2_5_buckets(max_model_len 512), written out: vLLM's 1, 2, 5, 10... up to it.
    "vllm:request_prompt_tokens": (1, 2, 5, 10, 20, 50, 100, 200, 500),
    "vllm:request_generation_tokens": (1, 2, 5, 10, 20, 50, 100, 200, 500),
    "vllm:kv_block_lifetime_seconds": KV_RESIDENCY_BUCKETS,
    "vllm:kv_block_idle_before_evict_seconds": KV_RESIDENCY_BUCKETS,
    "vllm:kv_block_reuse_gap_seconds": KV_RESIDENCY_BUCKETS,
}
# Served since issue 54, not on the Grafana dashboard (vLLM's example plots none of the residency ones).
NOT_PLOTTED = {
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:request_inference_time_seconds",
    "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens",
    "vllm:kv_block_lifetime_seconds",
    "vllm:kv_block_idle_before_evict_seconds",
    "vllm:kv_block_reuse_gap_seconds",
}
# vLLM's residency buckets (vllm/v1/metrics/loggers.py), written out as there.
VLLM_RESIDENCY = (
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1,
    2,
    5,
    10,
    20,
    30,
    60,
    120,
    300,
    600,
    1200,
    1800,
)


@pytest.fixture(scope="module")
def small() -> Iterator[InProcessGateway]:
    with InProcessGateway(Settings(served_model_name=(MODEL, "alias")), SMALL_ENGINE) as gw:
        yield gw


def _scrape(gw: InProcessGateway) -> tuple[str, prometheus.Samples]:
    text = gw.client.get("/metrics").text
    return text, prometheus.parse(text)


def _value(samples: prometheus.Samples, name: str, **labels: str) -> float:
    return prometheus.value(samples, name, model_name=MODEL, **labels)


def _complete(gw: InProcessGateway) -> None:
    body = {"prompt": PROMPT, "max_tokens": TOKENS, "ignore_eos": True}
    r = gw.client.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text


def test_vllm_series_have_vllm_types_buckets_and_labels(small):
    _complete(small)
    text, samples = _scrape(small)
    for name in GAUGES:
        assert f"# TYPE {name} gauge" in text, name
    for name in COUNTERS:
        assert f"# TYPE {name}_total counter" in text, name  # as prometheus_client writes a counter's type
        assert _value(samples, f"{name}_total") > 0 or name in ("vllm:prefix_cache_hits", "vllm:num_preemptions"), name
    for name, buckets in HISTOGRAMS.items():
        assert f"# TYPE {name} histogram" in text, name
        bounds = {float(b) for b in re.findall(rf'^{re.escape(name)}_bucket{{.*le="([^"]+)"', text, re.M)}
        assert bounds == {*buckets, float("inf")}, name
    engine = small.state.pool.addresses[0]
    for key in samples:
        if key.startswith("vllm:"):
            _, labels = prometheus.split(key)
            assert labels["model_name"] == MODEL and labels["engine"] == engine, key
    # vLLM's finish reasons: a request that ran to max_tokens is a "length".
    assert _value(samples, "vllm:request_success_total", finished_reason="length") >= 1


def test_buckets_are_vllms():
    assert build_1_2_5_buckets(100) == (1, 2, 5, 10, 20, 50, 100)  # the example of vLLM's docstring
    assert build_1_2_5_buckets(4096)[-3:] == (500, 1000, 2000) and build_1_2_5_buckets(1) == (1,)
    assert KV_RESIDENCY_BUCKETS == VLLM_RESIDENCY


def test_vllm_series_move_under_load(small):
    _complete(small)  # the prompt's blocks are cached: the load's prompts hit them
    _, before = _scrape(small)
    peak = dict.fromkeys(GAUGES, 0.0)
    with ThreadPoolExecutor(4) as pool:
        requests = [pool.submit(_complete, small) for _ in range(4)]
        deadline = time.monotonic() + 20
        while not all(r.done() for r in requests) and time.monotonic() < deadline:
            _, during = _scrape(small)
            for name in GAUGES:
                peak[name] = max(peak[name], _value(during, name))
            time.sleep(0.02)
        for r in requests:
            r.result()
    _, after = _scrape(small)
    assert peak["vllm:num_requests_running"] == 2, peak  # max_num_seqs
    assert peak["vllm:num_requests_waiting"] >= 1 and 0 < peak["vllm:kv_cache_usage_perc"] <= 1, peak
    assert _value(after, "vllm:num_requests_running") == 0 and _value(after, "vllm:num_requests_waiting") == 0

    def moved(name: str, **labels: str) -> float:
        return _value(after, name, **labels) - _value(before, name, **labels)

    assert moved("vllm:prompt_tokens_total") == 4 * len(PROMPT)
    assert moved("vllm:generation_tokens_total") == 4 * TOKENS
    assert moved("vllm:request_success_total", finished_reason="length") == 4
    assert moved("vllm:prefix_cache_queries_total") == 4 * len(PROMPT)
    assert moved("vllm:prefix_cache_hits_total") >= 4 * (len(PROMPT) - 16)  # all but the last block, at least
    for name in ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds"):
        assert moved(f"{name}_count") == 4, name
    assert moved("vllm:inter_token_latency_seconds_count") == 4 * (TOKENS - 1)
    assert moved("vllm:request_queue_time_seconds_count") == 4
    # Two of the four waited for a running pair to finish (~TOKENS steps of 10 ms).
    assert moved("vllm:request_queue_time_seconds_sum") >= 2 * TOKENS * 0.01 * 0.5
    # The engine's phases of each request: one prefill step, then TOKENS - 1 decode steps of 10 ms.
    for phase in ("prefill", "decode", "inference"):
        assert moved(f"vllm:request_{phase}_time_seconds_count") == 4, phase
    decode, inference = (moved(f"vllm:request_{p}_time_seconds_sum") for p in ("decode", "inference"))
    assert 4 * (TOKENS - 1) * 0.01 * 0.5 <= decode <= inference
    assert inference == pytest.approx(decode + moved("vllm:request_prefill_time_seconds_sum"))
    # Each request's tokens, in vLLM's 1-2-5 buckets: 48 prompt tokens (le 50, not 20), 30 generated.
    for kind, tokens in (("prompt", len(PROMPT)), ("generation", TOKENS)):
        name = f"vllm:request_{kind}_tokens"
        assert moved(f"{name}_count") == 4 and moved(f"{name}_sum") == 4 * tokens, kind
        assert moved(f"{name}_bucket", le="50.0") == 4 and moved(f"{name}_bucket", le="20.0") == 0, kind


def test_kv_residency_histograms_observe_blocks_taken_for_new_content(small):
    """A prompt served three times (its blocks hit twice), then prompts that need more blocks than
    the 64 of the pool: blocks are taken for new content, the shared prompt's among them."""
    _, before = _scrape(small)
    shared = list(range(2000, 2048))
    for _ in range(3):
        r = small.client.post("/v1/completions", json={"prompt": shared, "max_tokens": 1})
        assert r.status_code == 200, r.text
    for i in range(6):  # 13 blocks each: 78 > 64
        prompt = list(range(3000 + 200 * i, 3200 + 200 * i))
        r = small.client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 1})
        assert r.status_code == 200, r.text
    _, after = _scrape(small)

    def moved(name: str, **labels: str) -> float:
        return _value(after, name, **labels) - _value(before, name, **labels)

    ended = moved("vllm:kv_block_lifetime_seconds_count")
    assert ended >= 78 - 64, ended
    assert moved("vllm:kv_block_idle_before_evict_seconds_count") == ended  # each ended life has both
    assert 0 < moved("vllm:kv_block_idle_before_evict_seconds_sum") <= moved("vllm:kv_block_lifetime_seconds_sum")
    # The shared prompt's 2 full blocks below its last token were hit twice: a gap each.
    assert moved("vllm:kv_block_reuse_gap_seconds_count") >= 2
    for name in ("vllm:kv_block_lifetime_seconds", "vllm:kv_block_reuse_gap_seconds"):
        counts = [_value(after, f"{name}_bucket", le=b) for b in (*(f"{float(x)}" for x in VLLM_RESIDENCY), "+Inf")]
        assert counts == sorted(counts) and counts[-1] == _value(after, f"{name}_count"), name


DASHBOARD = Path(__file__).parents[2] / "deploy" / "grafana" / "agentgate-vllm.json"
# PromQL words that are neither functions (followed by a parenthesis) nor metric names.
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "and", "or", "unless"}


def _exprs(node: object) -> Iterator[str]:
    """Every PromQL expression in the dashboard: panel targets' ``expr`` and variables' queries."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                yield value
            else:
                yield from _exprs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _exprs(item)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (label_values(metric, label) included)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)  # strings: label values, legends
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range selectors
    expr = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", expr)  # grouping labels
    expr = re.sub(r"label_values\(\s*([\w:]+)\s*,[^)]*\)", r"\1", expr)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][\w:]*", expr):
        word, rest = match.group(), expr[match.end() :].lstrip()
        if word not in _KEYWORDS and not rest.startswith("(") and not word.startswith("$"):
            names.add(word)
    return names


def test_metric_names_of_promql():
    expr = 'histogram_quantile(0.9, sum by(le) (rate(vllm:x_bucket{model_name="$m"}[$__rate_interval]))) / y_total'
    assert metric_names(expr) == {"vllm:x_bucket", "y_total"}
    assert metric_names("label_values(vllm:num_requests_running, model_name)") == {"vllm:num_requests_running"}


def test_every_metric_the_grafana_dashboard_reads_is_served(small):
    _complete(small)
    _, samples = _scrape(small)
    served = {prometheus.split(key)[0] for key in samples}
    exprs = list(_exprs(json.loads(DASHBOARD.read_text())))
    read = set().union(*(metric_names(e) for e in exprs))
    plotted = set(HISTOGRAMS) - NOT_PLOTTED
    assert len(exprs) >= 20 and {f"{n}_bucket" for n in plotted} | set(GAUGES) <= read
    assert read - served == set(), "the dashboard reads metrics /metrics does not serve"
    for name in read:
        assert any(key == name or key.startswith(name + "{") and MODEL in key for key in samples), name
