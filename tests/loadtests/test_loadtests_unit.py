"""The load generator's parts without a server: the workload, the figures, Prometheus reading."""

from __future__ import annotations

import json

import pytest

from agentgate.agents import prometheus
from agentgate.loadtests import vllm_bench
from agentgate.loadtests.metrics import SLO, RequestRecord, percentile, summarize, token_rate_series
from agentgate.loadtests.workload import Arrivals, Conversation, WorkloadConfig, system_prompt


def _play(config: WorkloadConfig, seed: int, agent: int) -> list[list[dict]]:
    conv, sent = Conversation(config, seed, agent, 0), []
    while not conv.done:
        sent.append(json.loads(json.dumps(conv.messages)))
        calls = conv.tool_calls() if conv.turn < config.turns - 1 else []
        conv.add_reply(f"reply {conv.turn}", calls)
    return sent


def test_conversations_are_seeded_and_grow_turn_by_turn():
    config = WorkloadConfig(turns=4)
    first = _play(config, 7, 3)
    assert first == _play(config, 7, 3) and first != _play(config, 8, 3) and first != _play(config, 7, 4)
    assert len(first) == 4
    for before, after in zip(first, first[1:]):
        assert after[: len(before)] == before  # each turn resends the conversation so far, then more
        assert len(after) in (len(before) + 2,)  # the reply and the tool results
    assert first[0][0] == {"role": "system", "content": system_prompt()}  # shared by every agent
    assert _play(config, 9, 0)[0][0] == first[0][0]
    results = json.loads(first[1][-1]["content"].removeprefix("<tool_response>").removesuffix("</tool_response>"))
    assert 1 <= len(results) <= 4


def test_request_options_ask_for_fixed_length_greedy_replies():
    options = Conversation(WorkloadConfig(reply_tokens=32), 0, 0, 0).request_options()
    assert options == {"max_tokens": 32, "min_tokens": 32, "ignore_eos": True, "temperature": 0.0}
    openai = Conversation(WorkloadConfig(format="openai"), 0, 0, 0)
    assert openai.request_options()["tools"] and openai.request_options()["tool_choice"] == "none"
    calls = openai.tool_calls()
    openai.add_reply("ok", calls)
    assert openai.messages[2]["tool_calls"][0]["id"] == calls[0].id and openai.messages[3]["role"] == "tool"


def test_config_validation_and_arrivals():
    with pytest.raises(ValueError):
        WorkloadConfig(min_calls=3, max_calls=2)
    with pytest.raises(ValueError):
        WorkloadConfig(format="xml")
    gaps = Arrivals(4.0, 1).gaps()
    sample = [next(gaps) for _ in range(4000)]
    assert 0.23 < sum(sample) / len(sample) < 0.27  # mean 1/rate
    assert [next(Arrivals(4.0, 1).gaps()) for _ in range(2)] == [sample[0]] * 2


def _record(ttft: float, gaps: list[float], start: float = 0.0, status: str = "ok", prompt: int = 100) -> RequestRecord:
    times, t = [], start + ttft
    for gap in [0.0, *gaps]:
        t += gap
        times.append(t)
    return RequestRecord(
        0,
        0,
        0,
        start,
        end=times[-1],
        ttft=ttft,
        token_times=times,
        prompt_tokens=prompt,
        completion_tokens=len(times),
        status=status,
        finish_reason="length",
    )


def test_summary_percentiles_throughput_and_goodput():
    assert percentile([3, 1, 2], 50) == 2 and percentile([1, 2], 50) == 1.5 and percentile([], 50) is None
    records = [
        _record(0.5, [0.1] * 9),
        _record(1.0, [0.1] * 9),
        _record(3.0, [0.1] * 9),
        _record(0.2, [0.5] * 9),
        _record(0.1, [0.1] * 3, status="aborted"),
    ]
    s = summarize(records, window=10.0, slo=SLO(ttft=2.0, tpot=0.2))
    assert s["requests"]["ok"] == 4 and s["requests"]["aborted"] == 1
    assert s["throughput"]["output_tokens_per_s"] == pytest.approx(4.0)  # 40 tokens of ok requests in 10 s
    assert s["goodput"]["requests_per_s"] == pytest.approx(0.2) and s["goodput"]["fraction"] == 0.5
    assert s["latency_s"]["ttft"]["p50"] == pytest.approx(0.75)
    assert s["latency_s"]["tpot"]["max"] == pytest.approx(0.5)
    assert s["latency_s"]["itl"]["count"] == 36
    series = token_rate_series(records, end=8.0)
    assert sum(v for _, v in series) == 44  # every token, aborted ones too


def test_vllm_bench_figures_match_its_arithmetic():
    """vLLM bench's keys and numbers (vllm/benchmarks/serve.py: numpy's mean, median, population std and
    linear percentiles, in ms), checked against numpy, its own arithmetic."""
    np = pytest.importorskip("numpy")
    records = [
        _record(0.5, [0.125] * 7),  # binary fractions: token times fall in the 1 s buckets exactly
        _record(1.0, [0.25] * 3),
        _record(3.0, [0.25] * 3, start=1.0),
        _record(0.25, [], start=2.0),  # one token: no TPOT, no ITL, TPOT 0 for goodput
        _record(0.1, [0.1] * 3, status="aborted"),
    ]
    ok = records[:4]
    slo = SLO(ttft=2.0, tpot=0.15)
    result = vllm_bench.result_json(
        records,
        8.0,
        slo,
        model_id="org/model",
        request_rate=None,
        max_concurrency=4,
        percentile_metrics=("ttft", "tpot", "itl", "e2el"),
        percentiles=(50, 99, 99.9),
        date="20260101-000000",
    )
    assert result["completed"] == 4 and result["failed"] == 1 and result["num_prompts"] == 5
    assert result["total_output_tokens"] == 8 + 4 + 4 + 1 and result["output_throughput"] == pytest.approx(17 / 8)
    assert result["request_throughput"] == pytest.approx(4 / 8)
    # Good: TTFT <= 2 s and TPOT <= 150 ms: the first (125 ms) and the one-token request.
    assert result["request_goodput"] == pytest.approx(2 / 8)
    ttft = np.array([r.ttft for r in ok]) * 1000
    tpot = np.array([0.125, 0.25, 0.25]) * 1000  # (E2EL - TTFT) / (tokens - 1)
    itl = np.array([0.125] * 7 + [0.25] * 6) * 1000
    e2el = np.array([r.e2e for r in ok]) * 1000
    for name, values in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2el", e2el)):
        assert result[f"mean_{name}_ms"] == pytest.approx(np.mean(values)), name
        assert result[f"median_{name}_ms"] == pytest.approx(np.median(values)), name
        assert result[f"std_{name}_ms"] == pytest.approx(np.std(values)), name
        for p, key in ((50, "p50"), (99, "p99"), (99.9, "p99.9")):
            assert result[f"{key}_{name}_ms"] == pytest.approx(np.percentile(values, p)), (name, key)
    # Second 1 holds the first request's last 4 tokens and the second's 4; three requests were active in it.
    assert result["max_output_tokens_per_s"] == 8 and result["max_concurrent_requests"] == 3
    setup = ("date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "request_rate", "burstiness")
    assert {*setup, "max_concurrency", "duration", "total_input_tokens", "total_token_throughput"} <= set(result)
    assert result["request_rate"] == "inf"


def test_prometheus_reading():
    text = """# HELP x
agentgate_requests_total{finish_reason="length"} 3.0
agentgate_requests_total{finish_reason="abort"} 2.0
agentgate_kv_cache_usage_ratio 0.25
h_bucket{le="0.1"} 1.0
h_bucket{le="1.0"} 3.0
h_bucket{le="+Inf"} 4.0
h_count 4.0
weird{path="a b"} 7 1700000000
"""
    s = prometheus.parse(text)
    assert prometheus.value(s, "agentgate_requests_total") == 5.0
    assert prometheus.value(s, "agentgate_requests_total", finish_reason="abort") == 2.0
    assert s['weird{path="a b"}'] == 7.0
    assert prometheus.histogram_quantile(s, "h", 0.5) == pytest.approx(0.1 + 0.9 * 0.5)
    assert prometheus.histogram_quantile(s, "h", 0.99) == 1.0
    before = prometheus.parse('h_bucket{le="0.1"} 1.0\nh_bucket{le="1.0"} 1.0\nh_bucket{le="+Inf"} 1.0')
    assert prometheus.histogram_quantile(prometheus.delta(s, before), "h", 0.5) == pytest.approx(0.775)


def test_a_stream_whose_text_says_error_ended_whole_and_one_with_an_error_event_did_not():
    """The soak counted streams whose text held the token "error" as ended by an error event (issue 50's
    5 of 19,392: each of their tails ends on finish_reason length and [DONE])."""
    from agentgate.loadtests.reliability.common import ended_whole

    chunk = '{"choices":[{"index":0,"delta":{"content":"%s"},"finish_reason":%s}]}'
    said = f"ta: {chunk % ('x', 'null')}\r\n\r\ndata: {chunk % ('error', 'null')}\r\n\r\n"
    whole = said + f"data: {chunk % ('s', chr(34) + 'length' + chr(34))}\r\n\r\ndata: [DONE]\r\n\r\n"
    assert ended_whole(whole)
    failed = said + 'data: {"error":{"message":"engine died","type":"server_error"}}\r\n\r\ndata: [DONE]\r\n\r\n'
    assert not ended_whole(failed)
    assert not ended_whole(said)  # no [DONE]


def test_cpu_attention_bench_prints_both_paths_and_their_ratio_per_case(capsys):
    from agentgate.loadtests import cpu_attention_bench

    assert cpu_attention_bench.main(["--rounds", "1", "--calls", "1"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "torch / compiled" in line]
    assert len(lines) == len(cpu_attention_bench.CASES)
    for line in lines:
        difference = float(line.rsplit("max diff ", 1)[1])
        assert difference < 1e-4, line  # the same attention, float32
