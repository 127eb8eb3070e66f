"""Thinking budgets on the default model under a template that opens ``<think>\\n`` in the
generation prompt (``tests/gateway/thinking_template.jinja``): the model never closes the block by
itself, so every answer and every call exists only because the engine closed the thinking.

For budgets 8, 24 and 64: chat completions with ``thinking_token_budget`` (``max_tokens`` 96) and
Responses with ``reasoning.effort: high`` and a ``max_output_tokens`` whose high budget (3/4 of it,
docs/reasoning.md) is the budget, so little room is left for the answer there; streamed and not,
one request at a time, greedy, over three questions and a forced call (``tool_choice: required``).
Each reply is counted as:

- ``answer``: text after the thinking, the reply finished;
- ``call``: a whole tool call after the thinking;
- ``cut``: said to be cut (``length`` / ``incomplete``);
- ``other``: anything else (printed).

and its thinking tokens (the usage's ``reasoning_tokens``) are set against the budget.

Then the cost per token of the budget logic: the same rendered prompt decoded to 64 tokens
(``ignore_eos``) as a chat request (with its ThinkingSpec, budget 24: the engine's gate and the
gateway's splitter run) and as a completion of the same token ids (no ThinkingSpec), interleaved,
non-streamed; the wall time per output token of each, side by side.

    python -m agentgate.loadtests.reasoning_budget_sweep
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

from agentgate.loadtests.server import start_server

TEMPLATE = Path(__file__).resolve().parents[1] / "tests" / "gateway" / "thinking_template.jinja"
QUESTIONS = [
    "What is the capital of France?",
    "Name a primary color.",
    "How many legs does a spider have?",
]
WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
BUDGETS = (8, 24, 64)
MAX_TOKENS = 96


def _sse(response: httpx.Response) -> list[dict]:
    return [
        json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ") and line != "data: [DONE]"
    ]


def chat(client: httpx.Client, ask: str, budget: int, stream: bool, forced: bool) -> tuple[str, int]:
    """(outcome, reasoning tokens) of one chat request."""
    body: dict = {
        "messages": [{"role": "user", "content": ask}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "thinking_token_budget": budget,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    if forced:
        body |= {"tools": [{"type": "function", "function": WEATHER}], "tool_choice": "required"}
    if not stream:
        reply = client.post("/v1/chat/completions", json=body).json()
        choice = reply["choices"][0]
        message, finish = choice["message"], choice["finish_reason"]
        content, calls = message.get("content"), message.get("tool_calls")
        tokens = reply["usage"]["completion_tokens_details"]["reasoning_tokens"]
    else:
        with client.stream("POST", "/v1/chat/completions", json=body) as r:
            chunks = _sse(r)
        content, calls, finish = "", [], None
        for chunk in chunks:
            for c in chunk.get("choices", []):
                content += c["delta"].get("content") or ""
                calls += c["delta"].get("tool_calls") or []
                finish = c.get("finish_reason") or finish
        tokens = chunks[-1]["usage"]["completion_tokens_details"]["reasoning_tokens"]
    if finish == "length":
        return "cut", tokens
    if calls and finish == "tool_calls":
        return "call", tokens
    if content and finish == "stop" and "<think>" not in content and "</think>" not in content:
        return "answer", tokens
    return f"other:{finish}", tokens


def responses(client: httpx.Client, ask: str, budget: int, stream: bool, forced: bool) -> tuple[str, int]:
    """(outcome, reasoning tokens) of one Responses request: ``effort: high`` with
    ``max_output_tokens`` such that its budget (3 * max / 4) is ``budget``."""
    body: dict = {
        "input": ask,
        "max_output_tokens": budget * 4 // 3 + 1,
        "reasoning": {"effort": "high"},
        "temperature": 0,
        "store": False,
        "stream": stream,
    }
    if forced:
        body |= {"tools": [{"type": "function", **WEATHER}], "tool_choice": "required"}
    if not stream:
        reply = client.post("/v1/responses", json=body).json()
    else:
        with client.stream("POST", "/v1/responses", json=body) as r:
            reply = [e for e in _sse(r) if e["type"] in ("response.completed", "response.incomplete")][-1]["response"]
    tokens = reply["usage"]["output_tokens_details"]["reasoning_tokens"]
    kinds = [item["type"] for item in reply["output"]]
    if reply["status"] == "incomplete":
        return "cut", tokens
    if "function_call" in kinds:
        return "call", tokens
    if "message" in kinds:
        return "answer", tokens
    return f"other:{reply['status']}", tokens


def sweep(client: httpx.Client) -> None:
    print(
        f"{'api':10} {'budget':>6} {'stream':>6} {'n':>3} {'answer':>6} {'call':>4} {'cut':>4} {'other':>5}"
        f" {'think tokens (min/mean/max)':>28} {'over budget+3':>13}"
    )
    for api, send in (("chat", chat), ("responses", responses)):
        for budget in BUDGETS:
            for stream in (False, True):
                outcomes: Counter[str] = Counter()
                thinking = []
                for forced in (False, True):
                    for ask in QUESTIONS if not forced else ["What is the weather in Paris?"]:
                        outcome, tokens = send(client, ask, budget, stream, forced)
                        outcomes[outcome.split(":")[0]] += 1
                        if outcome.startswith("other"):
                            print("  other:", api, budget, stream, ask, outcome)
                        thinking.append(tokens)
                over = sum(t > budget + 3 for t in thinking)  # the end tag is 3 tokens of this tokenizer
                spread = f"{min(thinking)}/{statistics.mean(thinking):.1f}/{max(thinking)}"
                print(
                    f"{api:10} {budget:>6} {str(stream):>6} {len(thinking):>3} {outcomes['answer']:>6}"
                    f" {outcomes['call']:>4} {outcomes['cut']:>4} {outcomes['other']:>5} {spread:>28} {over:>13}"
                )


def cost(client: httpx.Client, reps: int) -> None:
    messages = [{"role": "user", "content": QUESTIONS[0]}]
    ids = client.post("/tokenize", json={"messages": messages}).json()["tokens"]
    common = {"max_tokens": 64, "temperature": 0, "ignore_eos": True}
    times: dict[str, list[float]] = {"chat + ThinkingSpec": [], "completion, none": []}
    for _ in range(reps):
        for name, path, body in (
            ("chat + ThinkingSpec", "/v1/chat/completions", {"messages": messages, "thinking_token_budget": 24}),
            ("completion, none", "/v1/completions", {"prompt": ids}),
        ):
            start = time.perf_counter()
            reply = client.post(path, json={**body, **common}).json()
            times[name].append((time.perf_counter() - start) / reply["usage"]["completion_tokens"])
    with_spec, without = (statistics.median(t) * 1000 for t in times.values())
    print(f"\nper output token (median of {reps}, 64 tokens each, one at a time):")
    print(f"  chat with ThinkingSpec (budget 24): {with_spec:.2f} ms")
    print(f"  completion without:                 {without:.2f} ms")
    print(f"  ratio: {with_spec / without:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=8, help="pairs of requests timed for the cost per token")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as logs:
        server = start_server(["--chat-template", str(TEMPLATE)], Path(logs))
        try:
            with httpx.Client(base_url=server.url, timeout=300) as client:
                sweep(client)
                cost(client, args.reps)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
