"""Session affinity pays off in the prefix cache: the real default model,
two engines behind `agentgate serve --engines 2`, a 10-turn agent session
that resends its growing conversation each turn."""

from __future__ import annotations

import httpx
import pytest

from tests.support.http import metrics, wait_for
from tests.support.servers import launch_serve, stop_all, wait_healthy

pytestmark = pytest.mark.slow

SYSTEM = "You are a careful assistant for a team of software agents. Answer briefly. " + " ".join(
    f"Rule {i}: keep answers short, cite the tool you would use, and never invent file names." for i in range(12)
)


def _prefix_counters(url: str) -> tuple[float, float]:
    m = metrics(url)
    return m["agentgate_prefix_cache_hits_tokens_total"], m["agentgate_prefix_cache_queries_tokens_total"]


def test_a_ten_turn_session_stays_on_one_engine_and_hits_the_prefix_cache(tmp_path):
    server = launch_serve(
        tmp_path,
        "model",
        "--runner",
        "sync",
        "--dtype",
        "float32",
        "--engines",
        "2",
        "--max-model-len",
        "2048",
        "--max-num-seqs",
        "8",
        "--redis-dir",
        str(tmp_path / "redis"),
    )
    try:
        wait_healthy(server, timeout=300)
        url = server.url
        headers = {"X-Session-Id": "ten-turns"}
        messages = [{"role": "system", "content": SYSTEM}]
        engines = set()
        start = None
        with httpx.Client(timeout=120) as client:
            for turn in range(1, 11):
                if turn == 2:
                    start = _prefix_counters(url)
                messages.append(
                    {
                        "role": "user",
                        "content": f"Step {turn}: which tool lists a directory?",
                    }
                )
                r = client.post(
                    f"{url}/v1/chat/completions",
                    headers=headers,
                    json={"messages": messages, "max_tokens": 4, "temperature": 0},
                )
                assert r.status_code == 200, r.text
                messages.append(
                    {
                        "role": "assistant",
                        "content": r.json()["choices"][0]["message"]["content"],
                    }
                )
                wait_for(
                    lambda t=turn: client.get(f"{url}/v1/sessions/ten-turns").json()["turns"] == t,
                    timeout=5,
                )
                engines.add(client.get(f"{url}/v1/sessions/ten-turns").json()["engine"])
            hits, queries = (now - then for now, then in zip(_prefix_counters(url), start, strict=True))
            session = client.get(f"{url}/v1/sessions/ten-turns").json()
        assert len(engines) == 1, f"the session moved between engines: {engines}"
        assert queries > 9 * 250, "turns 2-10 should have sent their whole conversation"
        assert hits / queries >= 0.9, f"prefix-cache hit rate from turn 2 on: {hits / queries:.3f}"
        assert session["turns"] == 10 and session["messages"] == messages
        print(f"prefix-cache hit rate, turns 2-10: {hits / queries:.3f} ({hits:.0f}/{queries:.0f} tokens)")
    finally:
        stop_all(server)
