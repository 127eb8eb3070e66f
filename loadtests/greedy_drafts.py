"""Drafted greedy replies against replies decoded token by token, over HTTP (issue 52).

Starts ``agentgate serve`` with its defaults (``--speculative auto`` on a CPU) and sends each of
``--prompts`` chat prompts twice, one after the other, so that the second send is drafted from the
first's reply; then a ``--speculative off`` server, once each. Prints how many replies of each send
equal the undrafted one, the tokens drafted and accepted, and the first prompts that differ.

    python -m agentgate.loadtests.greedy_drafts                  # 200 prompts, 48 tokens
    python -m agentgate.loadtests.greedy_drafts --prompts 20 -- --dtype bfloat16
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
from pathlib import Path

import httpx

from agentgate.loadtests.server import scrape, start_server

SUBJECTS = [
    "the planets",
    "honey bees",
    "the French Revolution",
    "prime numbers",
    "a CPU cache",
    "photosynthesis",
    "the Python language",
    "volcanoes",
    "the human heart",
    "chess openings",
    "the moon",
    "rain forests",
    "electric cars",
    "the Roman empire",
    "whales",
    "black holes",
    "coffee",
    "the internet",
    "glaciers",
    "jazz music",
]
FORMS = [
    "Name four facts about {}.",
    "Explain {} to a child.",
    "Write a short poem about {}.",
    "What is the most surprising thing about {}?",
    "Give me three questions a student might ask about {}.",
    "Summarize the history of {} in two sentences.",
    "List five words related to {}.",
    "Why do people find {} interesting?",
    "Describe {} in one paragraph.",
    "What is a common misconception about {}?",
]


def prompts(count: int) -> list[str]:
    """``count`` distinct prompts (at most 200): each form over each subject."""
    return [form.format(subject) for form, subject in itertools.islice(itertools.product(FORMS, SUBJECTS), count)]


def greedy_text(url: str, prompt: str, max_tokens: int) -> str:
    body = {"messages": [{"role": "user", "content": prompt}], "temperature": 0, "max_tokens": max_tokens}
    reply = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=300)
    reply.raise_for_status()
    return reply.json()["choices"][0]["message"]["content"]


def metric(url: str, name: str) -> float:
    values = scrape(url)
    return values.get(name, values.get(f"{name}_total", 0.0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("flags", nargs="*", help="more `agentgate serve` flags, for both servers (after --)")
    args = parser.parse_args()
    chosen = prompts(args.prompts)
    log_dir = Path(tempfile.mkdtemp(prefix="greedy-drafts-"))
    server = start_server(args.flags, log_dir, log_name="defaults.log")
    try:
        first = [greedy_text(server.url, p, args.max_tokens) for p in chosen]
        second = [greedy_text(server.url, p, args.max_tokens) for p in chosen]
        drafted = metric(server.url, "agentgate_spec_draft_tokens")
        accepted = metric(server.url, "agentgate_spec_accepted_tokens")
        auto_off = "speculative auto: off" in server.log()
    finally:
        server.stop()
    server = start_server([*args.flags, "--speculative", "off"], log_dir, log_name="off.log")
    try:
        plain = [greedy_text(server.url, p, args.max_tokens) for p in chosen]
    finally:
        server.stop()
    print(f"{len(chosen)} prompts, {args.max_tokens} tokens, flags {args.flags or 'none'}; logs in {log_dir}")
    print(f"defaults: {drafted:.0f} tokens drafted, {accepted:.0f} accepted; auto turned off at start: {auto_off}")
    print(f"first send  == --speculative off: {sum(a == b for a, b in zip(first, plain))}/{len(chosen)}")
    print(f"second send == --speculative off: {sum(a == b for a, b in zip(second, plain))}/{len(chosen)}")
    for prompt, a, b, c in zip(chosen, first, second, plain):
        if not a == b == c:
            print(f"differs: {prompt!r}\n  first:  {a!r}\n  second: {b!r}\n  off:    {c!r}")


if __name__ == "__main__":
    main()
