"""Time to first event: ``/v1/responses`` streaming against ``/v1/chat/completions``
streaming, on the same prompt, side by side against one ``agentgate serve``.

Each round sends the same request both ways, one after the other (the order
alternates between rounds), greedy, ``--max-tokens`` tokens, nothing else in
flight. Per API it records the time from sending the request to the first
event on the wire (``response.created``; chat's role chunk) and to the first
text event (``response.output_text.delta``; chat's first content delta), and
prints the medians and the responses/chat ratios. The prompt is the same
both ways, so after the warm-up both hit the prefix cache alike; responses
are not stored (``store: false``), chat's path has no Redis write either.

    python -m agentgate.loadtests.responses_ttfe                 # the default model, sync runner
    python -m agentgate.loadtests.responses_ttfe --rounds 40 --serve-args "--runner overlap"
"""

from __future__ import annotations

import argparse
import re
import shlex
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from agentgate.loadtests.server import start_server

PROMPT = "What is the capital of France?"


def first_events(client: httpx.Client, path: str, body: dict, text: re.Pattern[str]) -> tuple[float, float]:
    """(seconds to the first SSE event, seconds to the first event ``text`` matches)."""
    start = time.perf_counter()
    first = first_text = None
    with client.stream("POST", path, json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            now = time.perf_counter() - start
            first = now if first is None else first
            if text.search(line):
                first_text = now
                break
    if first is None or first_text is None:
        raise RuntimeError(f"{path}: no text event")
    return first, first_text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--max-tokens", type=int, default=4)
    parser.add_argument("--serve-args", default="--runner sync --dtype float32", help="flags of agentgate serve")
    args = parser.parse_args()
    chat = {
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": args.max_tokens,
        "temperature": 0,
        "stream": True,
    }
    responses = {
        "input": PROMPT,
        "max_output_tokens": args.max_tokens,
        "temperature": 0,
        "stream": True,
        "store": False,
    }
    ways = {
        "chat": ("/v1/chat/completions", chat, re.compile(r'"content":"[^"]')),
        "responses": ("/v1/responses", responses, re.compile(r'"type":"response\.output_text\.delta"')),
    }
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(shlex.split(args.serve_args), Path(tmp))
        try:
            with httpx.Client(base_url=server.url, timeout=120) as client:
                for path, body, marker in ways.values():  # warm-up: the prompt cached, the code paths hot
                    for _ in range(3):
                        first_events(client, path, body, marker)
                times: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
                for i in range(args.rounds):
                    for name in list(ways) if i % 2 == 0 else list(ways)[::-1]:
                        times[name].append(first_events(client, *ways[name]))
        finally:
            server.stop()
    print(f"{args.rounds} rounds, max_tokens {args.max_tokens}, serve {args.serve_args!r}")
    medians = {}
    for name, pairs in times.items():
        medians[name] = (statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs))
        print(f"{name:10s} first event {medians[name][0] * 1e3:8.2f} ms   first text {medians[name][1] * 1e3:8.2f} ms")
    print(
        f"responses/chat  first event {medians['responses'][0] / medians['chat'][0]:.3f}   "
        f"first text {medians['responses'][1] / medians['chat'][1]:.3f}"
    )


if __name__ == "__main__":
    main()
