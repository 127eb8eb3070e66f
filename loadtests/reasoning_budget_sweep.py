"""Thinking budgets on the default model under a template that opens ``<think>\\n`` in the
generation prompt (``tests/gateway/thinking_template.jinja``): the model never closes the block by
itself, so every answer and every call exists only because the engine closed the thinking.

For budgets 8, 24 and 64: chat completions with ``thinking_token_budget`` (``max_tokens`` 96),
Messages with ``thinking: {"type": "enabled", "budget_tokens": N}`` (``max_tokens`` 96) and
Responses with ``reasoning.effort: high`` and a ``max_output_tokens`` whose high budget (3/4 of it,
docs/reasoning.md) is the budget, so little room is left for the answer there; streamed and not,
one request at a time, greedy, over three questions and a forced call (``tool_choice: required``,
Messages ``any``). Each reply is counted as:

- ``answer``: text after the thinking, the reply finished;
- ``call``: a whole tool call after the thinking;
- ``cut``: said to be cut (``length`` / ``max_tokens`` / ``incomplete``);
- ``refused``: a 400 (a budget with no room left for the forced call: printed with its message);
- ``other``: anything else (printed).

and its thinking tokens (the usage's ``reasoning_tokens``) are set against the budget.

Then the cost per token of the budget logic: the same rendered prompt decoded to 64 tokens
(``ignore_eos``) as a chat request (with its ThinkingSpec, budget 24: the engine's gate and the
gateway's splitter run) and as a completion of the same token ids (no ThinkingSpec), interleaved,
non-streamed; the wall time per output token of each, side by side.

    python -m agentgate.loadtests.reasoning_budget_sweep [--questions 1 --budgets 8 24 --reps 0]
"""

from __future__ import annotations

import argparse
import functools
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


class Refused(Exception):
    """A 400 (a budget with no room for the forced call, say): its message."""


def _post(client: httpx.Client, path: str, body: dict) -> dict:
    response = client.post(path, json=body)
    if response.status_code != 200:
        raise Refused(response.json()["error"]["message"])
    return response.json()


@functools.cache
def _served_model(client: httpx.Client) -> str:
    """The model's name, which Messages requests must carry."""
    return client.get("/v1/models").json()["data"][0]["id"]


def _sse(response: httpx.Response) -> list[dict]:
    if response.status_code != 200:
        raise Refused(json.loads(response.read())["error"]["message"])
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
        reply = _post(client, "/v1/chat/completions", body)
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


def messages(client: httpx.Client, ask: str, budget: int, stream: bool, forced: bool) -> tuple[str, int]:
    """(outcome, thinking tokens) of one Messages request."""
    body: dict = {
        "model": _served_model(client),
        "messages": [{"role": "user", "content": ask}],
        "max_tokens": MAX_TOKENS,
        "thinking": {"type": "enabled", "budget_tokens": budget},
        "temperature": 0,
        "stream": stream,
    }
    if forced:
        tool = {"name": WEATHER["name"], "description": WEATHER["description"], "input_schema": WEATHER["parameters"]}
        body |= {"tools": [tool], "tool_choice": {"type": "any"}}
    if not stream:
        reply = _post(client, "/v1/messages", body)
        kinds, stop, usage = [b["type"] for b in reply["content"]], reply["stop_reason"], reply["usage"]
    else:
        with client.stream("POST", "/v1/messages", json=body) as r:
            events = _sse(r)
        kinds = [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"]
        delta = next(e for e in events if e["type"] == "message_delta")
        stop, usage = delta["delta"]["stop_reason"], delta["usage"]
    tokens = usage.get("output_tokens_details", {}).get("thinking_tokens", 0)
    if stop == "max_tokens":
        return "cut", tokens
    if stop == "tool_use" and "tool_use" in kinds:
        return "call", tokens
    if stop == "end_turn" and "text" in kinds:
        return "answer", tokens
    return f"other:{stop}", tokens


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
        reply = _post(client, "/v1/responses", body)
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


APIS = {"chat": chat, "messages": messages, "responses": responses}


def sweep(client: httpx.Client, apis: list[str], budgets: list[int], questions: list[str]) -> None:
    print(
        f"{'api':10} {'budget':>6} {'stream':>6} {'n':>3} {'answer':>6} {'call':>4} {'cut':>4} {'refused':>7}"
        f" {'other':>5} {'think tokens (min/mean/max)':>28} {'over budget+3':>13}"
    )
    for api in apis:
        send = APIS[api]
        for budget in budgets:
            for stream in (False, True):
                outcomes: Counter[str] = Counter()
                thinking = []
                for forced in (False, True):
                    for ask in questions if not forced else ["What is the weather in Paris?"]:
                        try:
                            outcome, tokens = send(client, ask, budget, stream, forced)
                        except Refused as refused:
                            outcome, tokens = f"refused:{refused}", 0
                        outcomes[outcome.split(":")[0]] += 1
                        if outcome.startswith(("other", "refused")):
                            print(f"  {api} budget {budget} stream {stream} forced {forced}: {outcome}")
                        else:
                            thinking.append(tokens)
                over = sum(t > budget + 3 for t in thinking)  # the end tag is 3 tokens of this tokenizer
                spread = f"{min(thinking)}/{statistics.mean(thinking):.1f}/{max(thinking)}" if thinking else "-"
                print(
                    f"{api:10} {budget:>6} {str(stream):>6} {sum(outcomes.values()):>3} {outcomes['answer']:>6}"
                    f" {outcomes['call']:>4} {outcomes['cut']:>4} {outcomes['refused']:>7} {outcomes['other']:>5}"
                    f" {spread:>28} {over:>13}"
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
    parser.add_argument("--reps", type=int, default=8, help="pairs of requests timed for the cost per token (0: none)")
    parser.add_argument("--apis", nargs="+", choices=list(APIS), default=list(APIS), help="APIs swept")
    parser.add_argument("--budgets", nargs="+", type=int, default=list(BUDGETS), help="thinking budgets swept")
    parser.add_argument(
        "--questions", type=int, default=len(QUESTIONS), help=f"questions asked (1 to {len(QUESTIONS)}), each budget"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as logs:
        server = start_server(["--chat-template", str(TEMPLATE)], Path(logs))
        try:
            with httpx.Client(base_url=server.url, timeout=300) as client:
                sweep(client, args.apis, args.budgets, QUESTIONS[: max(1, args.questions)])
                if args.reps > 0:
                    cost(client, args.reps)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
