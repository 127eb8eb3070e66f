"""Agents as programs under KV pressure: retention and program scheduling against neither.

    python -m agentgate.loadtests.agent_programs [--agents 12] [--turns 5] [--rounds 2]

Each agent is one program (its ``user`` field) of ``--turns`` turns. Every turn but the last is
forced to call a tool (``tool_choice: required``); the agent then "runs" it for a latency drawn
from a log-normal (median ``--tool-median`` s, sigma ``--tool-sigma``, cut at ``--tool-max`` s)
and sends the conversation back with the call and its result, so the prompt grows turn by turn;
the last turn answers in text. All agents start together, and each agent's system prompt is its
own, so only its own earlier turns can be in the cache.

Three servers share the model and ``--num-kv-blocks`` (by default sized so that about half of the
agents' final conversations fit at once): ``off/fcfs`` (``--kv-retention off --scheduling-policy
fcfs``), ``auto/fcfs`` and ``auto/program`` (the defaults). Rounds alternate the servers, each
round with fresh conversations and fresh tool latencies that all servers see alike. Then the same
with ``--no-pressure-blocks`` (everything fits), for the throughput check.

Printed, per server, medians over rounds: job completion time (first request to last reply of a
program) p50/p90/p99, TTFT of returning turns p50/p90, the prefix-cache hit rate of returning
turns (cached over prompt tokens; "call hit": those that return from a call to a forced turn,
as the turn before did, leaving out the text answer), prompt tokens recomputed, output tokens per second, the
ratios against ``off/fcfs``, and the waits (``with_wait_figures``; the longest over rounds): the longest
wait for a first token, the engine's longest from a first pass to admission, the admissions after one
past the bound, and the bound in force. Run it alone: two cores are shared by everything on the machine.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shlex
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx

from agentgate.agents import AsyncClient, ChatResult
from agentgate.agents.errors import AgentGateError
from agentgate.agents.events import ContentDelta, ToolCallDelta, UsageEvent
from agentgate.loadtests.server import Server, scrape, start_server

VARIANTS = {
    "off/fcfs": ["--kv-retention", "off", "--scheduling-policy", "fcfs"],
    "auto/fcfs": ["--scheduling-policy", "fcfs"],
    "auto/program": [],
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search_docs",
            "description": "Search the runbooks for a query.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "maxLength": 40}},
                "required": ["query"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_metric",
            "description": "Read a service metric.",
            "parameters": {
                "type": "object",
                "properties": {
                    "service": {"type": "string", "maxLength": 24},
                    "metric": {"enum": ["latency", "errors", "load"]},
                },
                "required": ["service", "metric"],
                "additionalProperties": False,
            },
        },
    },
]
SERVICES = ["billing", "search", "checkout", "auth", "media", "ledger", "mailer", "gateway", "catalog", "reports"]
CALL_TOKENS = 48
ANSWER_TOKENS = 24
TOKENS_PER_BLOCK = 16


@dataclass
class Turn:
    start: float
    first_token: float | None = None
    end: float = 0.0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None


@dataclass
class Program:
    agent: int
    turns: list[Turn] = field(default_factory=list)

    @property
    def completion_time(self) -> float:
        return self.turns[-1].end - self.turns[0].start

    @property
    def ok(self) -> bool:
        return bool(self.turns) and all(t.error is None for t in self.turns)


def system_prompt(round_id: str, agent: int) -> str:
    """Long and the agent's own from its first token (no two agents share a cached block)."""
    rng = random.Random(f"{round_id}/{agent}/system")
    duties = ", ".join(rng.sample(SERVICES, len(SERVICES)))
    return (
        f"[{round_id} agent {agent}] You are an on-call assistant for the services {duties}. "
        "Investigate each alert step by step: look up the runbook, read the metrics that matter, "
        "and call exactly one tool per step until you know the cause. Keep every call short. " * 3
    )


def tool_result(rng: random.Random, name: str) -> str:
    if name == "search_docs":
        return json.dumps(
            {
                "titles": [f"runbook {rng.randrange(100)}", f"postmortem {rng.randrange(100)}"],
                "summary": "restart the worker pool, then check the queue depth and the error rate",
            }
        )
    return json.dumps(
        {
            "value": round(rng.uniform(0, 100), 1),
            "unit": "ms",
            "window": "5m",
            "trend": rng.choice(["up", "down", "flat"]),
        }
    )


def tool_latency(rng: random.Random, median: float, sigma: float, cap: float) -> float:
    return min(cap, rng.lognormvariate(math.log(median), sigma))


async def send_turn(
    client: AsyncClient, messages: list[dict[str, Any]], turn: Turn, t0: float, **options: Any
) -> ChatResult | None:
    """One greedy streamed turn, its first token, usage and end written into ``turn``; None, with
    ``turn.error`` set, where the request failed."""
    stream = client.chat_stream(messages, temperature=0, **options)
    try:
        async with stream:
            async for event in stream:
                if turn.first_token is None and isinstance(event, (ContentDelta, ToolCallDelta)):
                    turn.first_token = time.perf_counter() - t0
                elif isinstance(event, UsageEvent):
                    usage = event.usage
                    turn.prompt_tokens, turn.cached_tokens = usage.prompt_tokens, usage.cached_tokens
                    turn.completion_tokens = usage.completion_tokens
        result = stream.result()
    except AgentGateError as exc:
        turn.error = f"{type(exc).__name__}: {exc}"[:300]
        return None
    turn.end = time.perf_counter() - t0
    return result


async def run_program(client: AsyncClient, round_id: str, agent: int, args: argparse.Namespace, t0: float) -> Program:
    """One agent's turns; stops at its first error."""
    rng = random.Random(f"{round_id}/{agent}/tools")
    service = SERVICES[agent % len(SERVICES)]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system_prompt(round_id, agent)},
        {"role": "user", "content": f"Alert: {service} latency doubled in the last ten minutes. Find out why."},
    ]
    program = Program(agent)
    for number in range(args.turns):
        last = number == args.turns - 1
        turn = Turn(time.perf_counter() - t0)
        program.turns.append(turn)
        result = await send_turn(
            client,
            messages,
            turn,
            t0,
            tools=TOOLS,
            tool_choice="none" if last else "required",
            parallel_tool_calls=False,
            max_tokens=ANSWER_TOKENS if last else CALL_TOKENS,
            user=f"{round_id}-agent-{agent}",  # the program
        )
        if result is None:
            return program
        if last:
            break
        if not result.tool_calls:
            turn.error = "no tool call in a forced turn"
            return program
        messages.append(result.message())
        await anyio.sleep(tool_latency(rng, args.tool_median, args.tool_sigma, args.tool_max))
        for call in result.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": tool_result(rng, call.name)})
    return program


async def run_round(url: str, round_id: str, args: argparse.Namespace) -> dict[str, float]:
    limits = httpx.Limits(max_connections=args.agents + 4)
    async with AsyncClient(url, timeout=600, max_retries=0, limits=limits) as client:
        t0 = time.perf_counter()
        programs: list[Program] = []

        async def one(agent: int) -> None:
            programs.append(await run_program(client, round_id, agent, args, t0))

        async with anyio.create_task_group() as tasks:
            for agent in range(args.agents):
                tasks.start_soon(one, agent)
        wall = time.perf_counter() - t0
    return summarize(programs, wall)


def with_wait_figures(url: str, run: Callable[[], dict[str, float]]) -> dict[str, float]:
    """``run()``'s figures and the server's on its wait bound (/metrics): the bound in force at the
    end, the engine's longest wait from a request's first pass to its admission since it started (so
    over this and earlier rounds), and the admissions in this round after such a wait past the bound."""
    before = scrape(url)
    figures = run()
    after = scrape(url)
    past = "agentgate_waits_past_bound_total"
    return {
        **figures,
        "max_wait_s": after["agentgate_max_wait_seconds"],
        "longest_passed": after["agentgate_longest_wait_passed_seconds"],
        "past_bound": after[past] - before[past],
    }


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))] if ordered else float("nan")


def _hit_rate(turns: list[Turn]) -> float:
    prompt = sum(t.prompt_tokens for t in turns)
    return sum(t.cached_tokens for t in turns) / prompt if prompt else float("nan")


def summarize(programs: list[Program], wall: float) -> dict[str, float]:
    done = [p for p in programs if p.ok]
    returning = [t for p in done for t in p.turns[1:]]
    # Returning turns that return from a call (all but the text answer, which returns to the
    # same prompt too since issue 35: tool_choice no longer changes it; see docs/agent-programs.md).
    calls = [t for p in done for t in p.turns[1:-1]]
    jct = [p.completion_time for p in done]
    ttft = [t.first_token - t.start for t in returning if t.first_token is not None]
    every = [t for p in done for t in p.turns]
    return {
        "programs_ok": len(done),
        "programs_failed": len(programs) - len(done),
        "jct_p50": quantile(jct, 0.5),
        "jct_p90": quantile(jct, 0.9),
        "jct_p99": quantile(jct, 0.99),
        "return_ttft_p50": quantile(ttft, 0.5),
        "return_ttft_p90": quantile(ttft, 0.9),
        "return_hit_rate": _hit_rate(returning),
        "call_return_hit_rate": _hit_rate(calls),
        "recomputed_tokens": sum(t.prompt_tokens - t.cached_tokens for t in every),
        "output_tok_s": sum(t.completion_tokens for t in every) / wall,
        "final_prompt_tokens": statistics.median(p.turns[-1].prompt_tokens for p in done) if done else 0,
        # The longest any turn waited for its first token: an upper bound of its wait in the queue.
        "longest_wait": max((t.first_token - t.start for t in every if t.first_token is not None), default=0.0),
    }


# How a figure is taken over rounds where not by its median.
OVER_ROUNDS: dict[str, Callable[[list[float]], float]] = {"longest_wait": max, "longest_passed": max, "past_bound": sum}


def alternate_rounds(
    servers: dict[str, Server], rounds: int, label: str, run_one: Callable[[str, int, str], dict[str, float]]
) -> dict[str, dict[str, float]]:
    """``run_one(url, round, server name)`` on each server for ``rounds`` rounds, the order reversed every
    other round; each round printed; per server the medians (the longest waits: the largest; the
    waits past the bound: the sum)."""
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in servers}
    for number in range(rounds):
        order = list(servers) if number % 2 == 0 else list(reversed(servers))
        for name in order:
            result = run_one(servers[name].url, number, name)
            runs[name].append(result)
            print(f"{label} round {number} {name}: " + ", ".join(f"{k} {v:.3g}" for k, v in result.items()), flush=True)
    return {
        name: {key: OVER_ROUNDS.get(key, statistics.median)([r[key] for r in rs]) for key in rs[0]}
        for name, rs in runs.items()
    }


def compare(servers: dict[str, Server], label: str, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Alternate the servers for ``--rounds`` rounds; print each and the medians."""
    medians = alternate_rounds(
        servers,
        args.rounds,
        label,
        lambda url, number, _name: with_wait_figures(
            url, lambda: anyio.run(run_round, url, f"{label}-r{number}", args)
        ),
    )
    base = medians["off/fcfs"]
    print(f"\n{label}: medians of {args.rounds} rounds, {args.agents} agents x {args.turns} turns")
    print(
        f"{'server':<14}{'JCT p50':>9}{'p90':>8}{'p99':>8}{'ret TTFT p50':>14}{'p90':>8}{'ret hit':>9}{'call hit':>9}"
        f"{'recomputed':>12}{'tok/s':>8}{'JCT p50 x':>11}{'p99 x':>8}{'tok/s x':>9}{WAIT_HEADER}"
    )
    for name, m in medians.items():
        print(
            f"{name:<14}{m['jct_p50']:>8.1f}s{m['jct_p90']:>7.1f}s{m['jct_p99']:>7.1f}s"
            f"{m['return_ttft_p50']:>13.2f}s{m['return_ttft_p90']:>7.2f}s{m['return_hit_rate']:>9.1%}"
            f"{m['call_return_hit_rate']:>9.1%}"
            f"{m['recomputed_tokens']:>12.0f}{m['output_tok_s']:>8.1f}"
            f"{base['jct_p50'] / m['jct_p50']:>10.2f}x{m['jct_p99'] / base['jct_p99']:>7.2f}x"
            f"{m['output_tok_s'] / base['output_tok_s']:>8.2f}x{wait_columns(m)}",
            flush=True,
        )
    return medians


# The wait columns: the longest wait for a first token a client saw, the engine's longest wait from a
# first pass to admission, the admissions after such a wait past the bound, and the bound in force.
WAIT_HEADER = f"{'longest wait':>14}{'passed':>8}{'past':>6}{'bound':>8}"


def wait_columns(m: dict[str, float]) -> str:
    return f"{m['longest_wait']:>13.1f}s{m['longest_passed']:>7.1f}s{m['past_bound']:>6.0f}{m['max_wait_s']:>7.1f}s"


def default_blocks(args: argparse.Namespace) -> int:
    """About half of the agents' final conversations (estimated: system prompt, turns, replies)."""
    per_agent = 260 + (args.turns - 1) * (CALL_TOKENS + 70) + ANSWER_TOKENS
    return max(64, args.agents * per_agent // TOKENS_PER_BLOCK // 2)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m agentgate.loadtests.agent_programs", description=__doc__.split("\n")[0])
    p.add_argument("--agents", type=int, default=12)
    p.add_argument("--turns", type=int, default=5)
    p.add_argument("--rounds", type=int, default=2, help="rounds per server (alternating)")
    p.add_argument("--tool-median", type=float, default=1.0, help="median tool latency, seconds")
    p.add_argument("--tool-sigma", type=float, default=0.8, help="sigma of the log-normal tool latency")
    p.add_argument("--tool-max", type=float, default=10.0, help="longest tool latency, seconds")
    p.add_argument("--num-kv-blocks", type=int, default=None, help="KV pressure (default: about half fit)")
    p.add_argument("--no-pressure-blocks", type=int, default=4096, help="0: skip the no-pressure run")
    p.add_argument("--server-args", default="", help="flags every server shares")
    args = p.parse_args()
    log_dir = Path(tempfile.mkdtemp(prefix="agent-programs-"))
    common = [*shlex.split(args.server_args), "--max-model-len", "2048"]
    blocks = args.num_kv_blocks or default_blocks(args)
    print(
        f"KV pressure: {blocks} blocks of {TOKENS_PER_BLOCK} tokens for {args.agents} agents; tool latency "
        f"log-normal, median {args.tool_median} s, sigma {args.tool_sigma}, cut at {args.tool_max} s; "
        f"logs in {log_dir}",
        flush=True,
    )
    for label, num_blocks in (("pressure", blocks), ("no-pressure", args.no_pressure_blocks)):
        if not num_blocks:
            continue
        servers = {
            name: start_server(
                [*common, "--num-kv-blocks", str(num_blocks), *flags],
                log_dir,
                log_name=f"{label}-{name.replace('/', '-')}.log",
            )
            for name, flags in VARIANTS.items()
        }
        try:
            compare(servers, label, args)
        finally:
            for server in servers.values():
                server.stop()
            time.sleep(0.1)


if __name__ == "__main__":
    main()
