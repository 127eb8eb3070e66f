"""The agent-programs benchmark's arithmetic: what a program's completion time, the returning
turns' hit rate and the recomputed tokens are, and the KV it sizes for "about half fit"."""

from __future__ import annotations

import argparse
import random

import httpx
import pytest

from agentgate.loadtests.agent_programs import (
    TOKENS_PER_BLOCK,
    Program,
    Turn,
    default_blocks,
    summarize,
    system_prompt,
    tool_latency,
    with_wait_figures,
)


def test_summary_of_programs():
    first = Program(0, [Turn(0.0, 0.5, 1.0, 300, 0, 40), Turn(2.0, 2.1, 2.5, 380, 320, 40)])
    second = Program(1, [Turn(0.0, 0.9, 1.5, 300, 0, 40), Turn(3.0, 3.4, 4.0, 390, 160, 20)])
    failed = Program(2, [Turn(0.0, error="500")])
    summary = summarize([first, second, failed], wall=4.0)
    assert summary["programs_ok"] == 2 and summary["programs_failed"] == 1
    assert summary["jct_p50"] == 2.5 and summary["jct_p99"] == 4.0
    assert summary["return_ttft_p50"] == pytest.approx(0.1) and summary["return_ttft_p90"] == pytest.approx(0.4)
    assert summary["return_hit_rate"] == pytest.approx((320 + 160) / (380 + 390))
    assert summary["recomputed_tokens"] == 300 + 60 + 300 + 230
    assert summary["output_tok_s"] == pytest.approx(140 / 4.0)


def test_about_half_of_the_final_conversations_fit():
    args = argparse.Namespace(agents=12, turns=5)
    blocks = default_blocks(args)
    final_tokens = 260 + 4 * (48 + 70) + 24
    assert blocks * TOKENS_PER_BLOCK == pytest.approx(12 * final_tokens / 2, rel=0.01)


def test_agents_share_no_prefix_and_tool_latencies_are_capped():
    prompts = [system_prompt("r0", agent) for agent in range(3)]
    assert len({p[:40] for p in prompts}) == 3  # different from the first block on
    assert system_prompt("r1", 0) != prompts[0]  # and from one round to the next
    rng = random.Random(0)
    latencies = [tool_latency(rng, 1.0, 0.8, 10.0) for _ in range(2000)]
    assert max(latencies) <= 10.0 and 0.8 < sorted(latencies)[1000] < 1.25


def test_the_wait_figures_are_read_from_the_server_around_a_round(loadtest_server):
    """The bound in force, the engine's longest wait from a first pass and the round's waits past the
    bound come from /metrics, beside the round's own figures."""

    def one_round() -> dict[str, float]:
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        for _ in range(3):
            httpx.post(f"{loadtest_server.url}/v1/chat/completions", json=body, timeout=60).raise_for_status()
        return {"programs_ok": 3.0}

    figures = with_wait_figures(loadtest_server.url, one_round)
    assert figures["programs_ok"] == 3.0 and figures["max_wait_s"] >= 10.0
    assert figures["past_bound"] == 0 and figures["longest_passed"] >= 0.0
