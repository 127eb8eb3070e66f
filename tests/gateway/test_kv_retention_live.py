"""KV retention with the real default model: an agent program whose turn ended in a tool
call comes back after other traffic has swept a small KV cache, and finds its conversation
in the cache (``cached_tokens``) only when retention keeps it."""

from __future__ import annotations

import httpx
import pytest

from tests.support.servers import launch_serve, stop_all, wait_healthy

pytestmark = pytest.mark.slow

SYSTEM = "You are an agent that uses tools. " + " ".join(
    f"Rule {i}: call the search tool before you answer, and quote what it returned." for i in range(24)
)
QUERY = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
TOOLS = [{"type": "function", "function": {"name": "search", "description": "search the web", "parameters": QUERY}}]


def sweep(client: httpx.Client, url: str) -> None:
    """Traffic of no program, each prompt different, through the whole cache."""
    for i in range(4):
        lines = (f"Line {i}-{j}: the value of item {j * 7 + i} is {j * 13}." for j in range(30))
        text = f"Document {i}. " + " ".join(lines)
        r = client.post(
            f"{url}/v1/chat/completions",
            json={"messages": [{"role": "user", "content": text}], "max_tokens": 1, "temperature": 0},
        )
        assert r.status_code == 200, r.text


@pytest.mark.parametrize("retention", ["60", "off"])
def test_a_program_returning_after_a_tool_call_hits_its_pinned_conversation(tmp_path, retention):
    # 96 blocks of 16 tokens: the conversation takes ~42, each sweep prompt ~35, four of them all.
    # Formatted by hand: each flag beside its value, as on a command line.
    server = launch_serve(tmp_path, "model", "--runner", "sync", "--dtype", "float32", "--engines", "1",
                          "--num-kv-blocks", "96", "--max-model-len", "1536", "--kv-retention", retention,
                          "--redis-dir", str(tmp_path / "redis"))  # fmt: skip
    try:
        wait_healthy(server, timeout=300)
        url = server.url
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is the capital of Peru?"}]
        body = {
            "tools": TOOLS,
            "tool_choice": "required",
            "parallel_tool_calls": False,
            "max_tokens": 96,
            "temperature": 0,
            "user": "agent-7",
        }
        with httpx.Client(timeout=300) as client:
            first = client.post(f"{url}/v1/chat/completions", json={"messages": messages, **body})
            assert first.status_code == 200, first.text
            reply = first.json()["choices"][0]
            assert reply["finish_reason"] == "tool_calls", reply
            history_tokens = first.json()["usage"]["prompt_tokens"]
            sweep(client, url)
            call = reply["message"]["tool_calls"][0]
            messages += [
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": call["id"], "content": "Lima."},
            ]
            back = client.post(f"{url}/v1/chat/completions", json={"messages": messages, **body, "tool_choice": "auto"})
            assert back.status_code == 200, back.text
            cached = back.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
            metrics = client.get(f"{url}/metrics").text
    finally:
        stop_all(server)
    if retention == "off":
        assert cached < history_tokens // 2, "the sweep should have evicted an unkept conversation"
    else:
        retained = [line for line in metrics.splitlines() if line.startswith("agentgate_kv_retention")]
        # The forced first turn's prompt ends a little differently from the history re-rendered.
        assert cached >= 0.9 * history_tokens, f"{cached} of {history_tokens} history tokens hit: {retained}"
        assert "agentgate_kv_retention_returning_hits_tokens_total" in metrics
