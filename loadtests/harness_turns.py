"""The harnesses' first two turns (issue 49's figures): Codex CLI's and Claude Code's captured first
requests (``tests/gateway/harness_requests/``), each sent to a server started as its docs page says,
then a second turn that resends the first with the reply and one more user message, as the
harnesses do. Prints per harness the first request's input tokens and time to first token, and the
share of the second turn's prompt the prefix cache served.

Codex runs on the default model as its docs page says (``--disable multi_agent``: its first
request, 6,549 tokens, then fits the 8,192-token context). Claude Code's does not fit it (about
12,000 tokens as served), so it runs on the null runner with a 32k context: its figures are of the
protocol and the prefix cache, not of a model.

    python -m agentgate.loadtests.harness_turns                     # both
    python -m agentgate.loadtests.harness_turns --harness codex
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from agentgate.loadtests.server import start_server

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "gateway" / "harness_requests"
SERVE_ARGS = {
    "codex": ["--omit-unrunnable-tools"],
    "claude-code": ["--runner", "null", "--max-model-len", "32768", "--max-tokens-overflow", "clamp"]
    + ["--null-reply-tokens", "16"],
}


def _sse_events(response: httpx.Response) -> list[tuple[float, dict[str, Any]]]:
    """(seconds since the first byte was asked for, payload) of each SSE data line."""
    events = []
    for line in response.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            events.append((time.perf_counter(), json.loads(line[6:])))
    return events


def codex_turn(client: httpx.Client, body: dict[str, Any]) -> tuple[float, dict[str, Any], list[dict[str, Any]]]:
    """(seconds to the first output event, usage, output items) of a streamed Responses request."""
    start = time.perf_counter()
    with client.stream("POST", "/v1/responses", json=body) as r:
        if r.status_code != 200:
            raise SystemExit(f"/v1/responses answered {r.status_code}: {r.read().decode()}")
        events = _sse_events(r)
    first = next(t for t, e in events if e["type"] in ("response.output_text.delta", "response.output_item.added"))
    [completed] = [e["response"] for _, e in events if e["type"] in ("response.completed", "response.incomplete")]
    return first - start, completed["usage"], completed["output"]


def claude_turn(client: httpx.Client, headers: dict[str, str], body: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """(seconds to the first content block delta, usage) of a streamed Messages request."""
    start = time.perf_counter()
    with client.stream("POST", "/v1/messages", json=body, headers=headers) as r:
        if r.status_code != 200:
            raise SystemExit(f"/v1/messages answered {r.status_code}: {r.read().decode()}")
        events = _sse_events(r)
    first = next(t for t, e in events if e["type"] == "content_block_delta")
    usage = next(e["message"]["usage"] for _, e in events if e["type"] == "message_start")
    usage |= next(e["usage"] for _, e in events if e["type"] == "message_delta")
    return first - start, usage


def codex(client: httpx.Client, max_tokens: int) -> dict[str, float]:
    captured = json.loads((FIXTURES / "codex_0.171.0_first_request.json").read_text())["body"]
    body = copy.deepcopy(captured) | {"max_output_tokens": max_tokens}
    # What `codex exec --disable multi_agent` sends (docs/harnesses/codex.md): the default request,
    # 9,223 tokens with its multi_agent_v1 namespace, does not fit the default model's 8,192.
    body["tools"] = [tool for tool in body["tools"] if tool["type"] != "namespace"]
    ttft, usage, output = codex_turn(client, body)
    again = copy.deepcopy(body)
    again["input"] += [*output, {"type": "message", "role": "user", "content": "Thanks. Now say goodbye."}]
    ttft2, usage2, _ = codex_turn(client, again)
    cached = usage2.get("input_tokens_details", {}).get("cached_tokens", 0)
    return {
        "input tokens": usage["input_tokens"],
        "TTFT s": ttft,
        "second turn input tokens": usage2["input_tokens"],
        "second turn TTFT s": ttft2,
        "second turn cached share": cached / usage2["input_tokens"],
    }


def claude_code(client: httpx.Client, max_tokens: int) -> dict[str, float]:
    captured = json.loads((FIXTURES / "claude_code_2.1.332_first_request.json").read_text())
    headers = {k: v for k, v in captured["headers"].items() if k.lower() not in ("host", "content-length")}
    body = copy.deepcopy(captured["body"]) | {"max_tokens": max_tokens}
    ttft, usage = claude_turn(client, headers, body)
    again = copy.deepcopy(body)
    again["messages"] += [
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Thanks. Now say goodbye."},
    ]
    ttft2, usage2 = claude_turn(client, headers, again)
    prompt2 = usage2["input_tokens"] + usage2.get("cache_read_input_tokens", 0)
    return {
        "input tokens": usage["input_tokens"] + usage.get("cache_read_input_tokens", 0),
        "TTFT s": ttft,
        "second turn input tokens": prompt2,
        "second turn TTFT s": ttft2,
        "second turn cached share": usage2.get("cache_read_input_tokens", 0) / prompt2,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--harness", choices=["codex", "claude-code", "both"], default="both")
    parser.add_argument("--max-tokens", type=int, default=16, help="each turn's output bound")
    args = parser.parse_args()
    runs = {"codex": codex, "claude-code": claude_code}
    for name in runs if args.harness == "both" else [args.harness]:
        with tempfile.TemporaryDirectory() as tmp:
            server = start_server(SERVE_ARGS[name], Path(tmp))
            try:
                with httpx.Client(base_url=server.url, timeout=600) as client:
                    figures = runs[name](client, args.max_tokens)
            finally:
                server.stop()
        print(f"{name} (agentgate serve {' '.join(SERVE_ARGS[name])}):")
        for label, value in figures.items():
            print(f"  {label:32s} {value:.3f}" if isinstance(value, float) else f"  {label:32s} {value}")


if __name__ == "__main__":
    main()
