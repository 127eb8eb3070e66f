"""A multi-turn trace in the Mooncake format replayed as agents: retention and program scheduling
against neither, under KV pressure.

    python -m agentgate.loadtests.trace_replay [--trace FILE] [--length-divisor 16] [--time-scale 1]

The trace (:mod:`loadtests.mooncake_trace`; by default the repository's synthetic agent trace,
:mod:`loadtests.synthetic_trace`) is scaled to this machine: lengths divided by
``--length-divisor`` N, times multiplied by ``--time-scale`` M (both printed). Each session is
one agent (one program, its ``user``): its first turn's prompt is the text its block hashes stand
for, so sessions that share hashes share a prefix; every turn but the last is offered the tools
and made to call one (``tool_choice: required``, at least 48 tokens of reply, what a call
takes); the next turn sends the conversation back with the live call and, as the tool's result,
what the trace's next prompt adds past this prompt and reply, after the trace's ``delay``; the
last turn answers in text (``tool_choice: none``, the trace's output length). A session of one
turn (a line without ``session_id``) is one request without tools.

The servers of :mod:`loadtests.agent_programs` (``off/fcfs``, ``auto/fcfs``, ``auto/program``)
share ``--num-kv-blocks`` (by default about half of the sessions' final conversations), rounds
alternating them, each round with its own block texts. Printed per server, medians over rounds:
the prefix-cache hit rate of returning turns, job completion time (a session's first send to its
last reply) p50/p99, TTFT p50/p99 over every turn, the waits as ``agent_programs`` prints them (the
longest for a first token, the engine's from a first pass, those past the bound, the bound in force),
and the ratios against ``off/fcfs``. Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import shlex
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx

from agentgate.agents import AsyncClient
from agentgate.engine.model_files.model_path import default_model_path
from agentgate.engine.text.tokenizer import load_tokenizer
from agentgate.loadtests.agent_programs import (
    CALL_TOKENS,
    TOKENS_PER_BLOCK,
    TOOLS,
    VARIANTS,
    WAIT_HEADER,
    Program,
    Turn,
    alternate_rounds,
    quantile,
    send_turn,
    wait_columns,
    with_wait_figures,
)
from agentgate.loadtests.agent_programs import summarize as summarize_programs
from agentgate.loadtests.mooncake_trace import (
    BLOCK_TOKENS,
    SYNTHETIC_TRACE,
    PromptText,
    TraceSession,
    read_trace,
)
from agentgate.loadtests.server import Server, start_server

TOOLS_PROMPT_TOKENS = 260  # the tools' part of the rendered prompt, about (agent_programs' estimate)


async def replay_session(
    client: AsyncClient, session: TraceSession, text: PromptText, program: str, t0: float
) -> Program:
    """One session's turns at the trace's times; stops at its first error."""
    record = Program(0)
    agentic = len(session.turns) > 1
    await anyio.sleep(max(0.0, t0 + session.start_s - time.perf_counter()))
    messages: list[dict[str, Any]] = [{"role": "user", "content": text.prompt(session.turns[0])}]
    for number, step in enumerate(session.turns):
        last = number == len(session.turns) - 1
        turn = Turn(time.perf_counter() - t0)
        record.turns.append(turn)
        options: dict[str, Any] = {"max_tokens": step.output_tokens if last else max(CALL_TOKENS, step.output_tokens)}
        if agentic:
            options.update(tools=TOOLS, tool_choice="none" if last else "required", parallel_tool_calls=False)
        result = await send_turn(client, messages, turn, t0, user=program, **options)
        if result is None:
            return record
        if last:
            break
        if not result.tool_calls:
            turn.error = "no tool call in a forced turn"
            return record
        following = session.turns[number + 1]
        due = turn.end + following.delay_s if following.delay_s is not None else (following.timestamp_s or 0.0)
        await anyio.sleep(max(0.0, t0 + due - time.perf_counter()))
        messages.append(result.message())
        call = result.tool_calls[0]
        messages.append({"role": "tool", "tool_call_id": call.id, "content": text.growth(step, following)})
    return record


async def run_round(url: str, sessions: list[TraceSession], text: PromptText, label: str) -> dict[str, float]:
    limits = httpx.Limits(max_connections=len(sessions) + 4)
    records: list[Program] = []
    async with AsyncClient(url, timeout=900, max_retries=0, limits=limits) as client:
        t0 = time.perf_counter()

        async def one(session: TraceSession) -> None:
            records.append(await replay_session(client, session, text, f"{label}-{session.session_id}", t0))

        async with anyio.create_task_group() as tasks:
            for session in sessions:
                tasks.start_soon(one, session)
        wall = time.perf_counter() - t0
    for record in records:
        for turn in record.turns:
            if turn.error is not None:
                print(f"{label}: a session failed at turn {record.turns.index(turn) + 1}: {turn.error}", flush=True)
    return summarize(records, wall)


def summarize(records: list[Program], wall: float) -> dict[str, float]:
    """agent_programs' figures, with TTFT p50/p99 over every turn of the sessions that ended well."""
    figures = summarize_programs(records, wall)
    ttft = [t.first_token - t.start for p in records if p.ok for t in p.turns if t.first_token is not None]
    return {**figures, "ttft_p50": quantile(ttft, 0.5), "ttft_p99": quantile(ttft, 0.99)}


def conversation_tokens(session: TraceSession) -> int:
    """A session's final conversation as served: its last prompt and reply, its calls' replies at a
    call's length and, for an agent, the tools' part of the prompt."""
    calls = sum(max(0, CALL_TOKENS - t.output_tokens) for t in session.turns[:-1])
    return session.final_tokens + calls + (TOOLS_PROMPT_TOKENS if len(session.turns) > 1 else 0)


def default_blocks(sessions: list[TraceSession]) -> int:
    """About half of the sessions' final conversations, and never less than the longest one with a
    quarter to spare (the estimate leaves out the template's markup; a server's context is at most
    its KV)."""
    half = sum(map(conversation_tokens, sessions)) // TOKENS_PER_BLOCK // 2
    longest = -(-max(map(conversation_tokens, sessions)) * 5 // 4 // TOKENS_PER_BLOCK)
    return max(64, half, longest)


def compare(servers: dict[str, Server], sessions: list[TraceSession], args: argparse.Namespace) -> None:
    tokenizer = load_tokenizer(default_model_path() if args.model is None else args.model)

    def one_round(url: str, number: int, name: str) -> dict[str, float]:
        label = f"trace-r{number}-{name}"  # each round's own block texts: no round hits another's cache
        text = PromptText(tokenizer, BLOCK_TOKENS // args.length_divisor, salt=label)
        return with_wait_figures(url, lambda: anyio.run(run_round, url, sessions, text, label))

    medians = alternate_rounds(servers, args.rounds, "trace", one_round)
    base = medians["off/fcfs"]
    print(f"\nmedians of {args.rounds} rounds, {len(sessions)} sessions")
    print(
        f"{'server':<14}{'ret hit':>9}{'JCT p50':>9}{'p99':>8}{'TTFT p50':>10}{'p99':>8}{'JCT p50 x':>11}"
        f"{'p99 x':>8}{WAIT_HEADER}{'failed':>8}"
    )
    for name, m in medians.items():
        print(
            f"{name:<14}{m['return_hit_rate']:>9.1%}{m['jct_p50']:>8.1f}s{m['jct_p99']:>7.1f}s"
            f"{m['ttft_p50']:>9.2f}s{m['ttft_p99']:>7.2f}s{base['jct_p50'] / m['jct_p50']:>10.2f}x"
            f"{m['jct_p99'] / base['jct_p99']:>7.2f}x{wait_columns(m)}"
            f"{m['programs_failed']:>8.0f}",
            flush=True,
        )


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m agentgate.loadtests.trace_replay", description=__doc__.split("\n")[0])
    p.add_argument("--trace", default=str(SYNTHETIC_TRACE), help="a Mooncake-format JSONL file")
    p.add_argument("--length-divisor", type=int, default=16, help="N: lengths / N (N divides 512)")
    p.add_argument("--time-scale", type=float, default=1.0, help="M: times x M")
    p.add_argument("--max-sessions", type=int, default=None, help="the first sessions only (by arrival)")
    p.add_argument("--rounds", type=int, default=2, help="rounds per server (alternating)")
    p.add_argument("--num-kv-blocks", type=int, default=None, help="KV pressure (default: about half fit)")
    p.add_argument("--model", default=None, help="a model path (default: the default model)")
    p.add_argument("--server-args", default="", help="flags every server shares")
    args = p.parse_args()
    sessions = read_trace(args.trace, args.length_divisor, args.time_scale)[: args.max_sessions]
    longest = max(map(conversation_tokens, sessions)) * 5 // 4
    blocks = args.num_kv_blocks or default_blocks(sessions)
    log_dir = Path(tempfile.mkdtemp(prefix="trace-replay-"))
    print(
        f"trace {args.trace}: {len(sessions)} sessions, {sum(len(s.turns) for s in sessions)} turns, scaled by "
        f"lengths / {args.length_divisor} (a block {BLOCK_TOKENS // args.length_divisor} tokens), times x "
        f"{args.time_scale}; KV {blocks} blocks of {TOKENS_PER_BLOCK} tokens; logs in {log_dir}",
        flush=True,
    )
    common = [*shlex.split(args.server_args), "--max-model-len", str(max(2048, longest + 64))]
    if args.model is not None:
        common += ["--model", args.model]
    servers = {
        name: start_server(
            [*common, "--num-kv-blocks", str(blocks), *flags], log_dir, log_name=f"{name.replace('/', '-')}.log"
        )
        for name, flags in VARIANTS.items()
    }
    try:
        compare(servers, sessions, args)
    finally:
        for server in servers.values():
            server.stop()


if __name__ == "__main__":
    main()
