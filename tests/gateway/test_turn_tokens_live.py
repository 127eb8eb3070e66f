"""With the real default model: an agent program's returning turns find everything its
previous turn computed in the prefix cache (``cached_tokens``), its reply included, because
the prompt starts with the tokens that turn read and wrote (gateway.programs.turn_tokens), whatever
spelling the model chose for its tool call. Here it may not use the token ``search`` (a
logit bias), so it spells the tool's name in pieces the tokenizer would not choose, and the
reply re-rendered and tokenized would leave the cache at the name."""

from __future__ import annotations

import httpx

from tests.support.servers import launch_serve, stop_all, wait_healthy

BLOCK = 16  # the engine's default block size
SYSTEM = "You are an on-call agent. Look things up with your tools, one call per step."
QUERY = {"type": "object", "properties": {"query": {"type": "string", "maxLength": 24}}, "required": ["query"]}
TOOLS = [
    {"type": "function", "function": {"name": "search_docs", "description": "Search runbooks.", "parameters": QUERY}}
]


def test_returning_turns_hit_all_their_previous_turn_computed(tmp_path):
    # Formatted by hand: each flag beside its value, as on a command line.
    server = launch_serve(tmp_path, "model", "--runner", "sync", "--dtype", "float32", "--engines", "1",
                          "--max-model-len", "2048", "--redis-dir", str(tmp_path / "redis"))  # fmt: skip
    try:
        wait_healthy(server, timeout=300)
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Billing errors are up."}]
        computed, hits = [], []
        with httpx.Client(base_url=server.url, timeout=300) as client:
            [search] = client.post("/tokenize", json={"prompt": "search", "add_special_tokens": False}).json()["tokens"]
            body = {
                "tools": TOOLS,
                "tool_choice": "required",
                # One call, and room past the budget's last tokens: with parallel calls this model calls
                # again until the budget closes a call, which the reply now says (length, issue 35).
                "parallel_tool_calls": False,
                "max_tokens": 96,
                "temperature": 0,
                "user": "agent-1",
                "logit_bias": {str(search): -100},
            }
            for turn in range(3):
                r = client.post("/v1/chat/completions", json={"messages": messages, **body})
                assert r.status_code == 200, r.text
                usage, choice = r.json()["usage"], r.json()["choices"][0]
                assert choice["finish_reason"] == "tool_calls", choice
                hits.append(usage["prompt_tokens_details"]["cached_tokens"])
                # What this turn leaves in the cache: its prompt and its reply but the last (end) token.
                computed.append((usage["prompt_tokens"] + usage["completion_tokens"] - 1) // BLOCK * BLOCK)
                call = choice["message"]["tool_calls"][0]
                messages += [choice["message"], {"role": "tool", "tool_call_id": call["id"], "content": f"hit {turn}"}]
    finally:
        stop_all(server)
    assert hits[1:] == computed[:-1], f"hits {hits}, computed by the turn before {computed}"
