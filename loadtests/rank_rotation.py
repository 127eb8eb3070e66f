"""Rank rotation: a client that rotates its program id every request, beside five agents that
identify themselves (issue 50's figure).

    python -m agentgate.loadtests.rank_rotation [--turns 6] [--flood 6]

Six API keys on one null-runner server (real gateway, scheduler and HTTP; instant tokens, a few ms a
step) with few sequence slots, so requests queue. Five agents, a key each, run ``--turns`` turns one
after another under a constant ``user``; the sixth key keeps ``--flood`` requests in flight, each with
a fresh ``user`` (a new program every time: before the per-key account, each started at the top
rank). Printed per agent: its job completion time (first request to last reply), under
``--scheduling-policy program`` and ``fcfs``, with and without the flood, and the ratios. Run it
alone: two cores are shared by everything on the machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import anyio
import httpx

from agentgate.loadtests.server import start_server

AGENTS = [f"agent-key-{i}" for i in range(5)]
ROTATOR = "rotating-key"
FLAGS = ["--runner", "null", "--null-step-seconds", "0.01", "--max-num-seqs", "2", "--max-model-len", "1024",
         "--num-kv-blocks", "4096"]  # fmt: skip


def _body(user: str, tokens: int) -> dict:
    text = f"{user}: " + "step " * 40
    return {"messages": [{"role": "user", "content": text}], "max_tokens": tokens, "ignore_eos": True, "user": user}


async def _agent(client: httpx.AsyncClient, url: str, key: str, turns: int, jct: dict[str, float]) -> None:
    start = time.monotonic()
    for _ in range(turns):
        r = await client.post(url, json=_body(f"user-{key}", 24), headers={"Authorization": f"Bearer {key}"})
        r.raise_for_status()
    jct[key] = time.monotonic() - start


async def _flood(client: httpx.AsyncClient, url: str, done: anyio.Event) -> int:
    count = 0
    while not done.is_set():
        r = await client.post(url, json=_body(uuid.uuid4().hex, 48), headers={"Authorization": f"Bearer {ROTATOR}"})
        r.raise_for_status()
        count += 1
    return count


async def _round(base: str, turns: int, flood: int) -> dict[str, float]:
    url, jct = f"{base}/v1/chat/completions", {}
    done = anyio.Event()
    async with httpx.AsyncClient(timeout=300) as client:
        async with anyio.create_task_group() as floods:
            for _ in range(flood):
                floods.start_soon(_flood, client, url, done)
            await anyio.sleep(0.5 if flood else 0)  # the flood is running when the agents start
            async with anyio.create_task_group() as agents:
                for key in AGENTS:
                    agents.start_soon(_agent, client, url, key, turns, jct)
            done.set()
    return jct


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m agentgate.loadtests.rank_rotation", description=__doc__.split("\n")[0])
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--flood", type=int, default=6, help="the rotating key's requests in flight")
    args = p.parse_args()
    log_dir = Path(tempfile.mkdtemp(prefix="rank-rotation-"))
    env = {**os.environ, "AGENTGATE_API_KEY": ",".join([*AGENTS, ROTATOR])}
    results: dict[tuple[str, int], dict[str, float]] = {}
    for policy in ("program", "fcfs"):
        server = start_server([*FLAGS, "--scheduling-policy", policy], log_dir, env=env, log_name=f"{policy}.log")
        try:
            for flood in (0, args.flood):
                results[(policy, flood)] = anyio.run(_round, server.url, args.turns, flood)
        finally:
            server.stop()
    print(f"JCT of {args.turns} turns per agent (s); flood: {args.flood} rotating requests in flight; logs {log_dir}")
    for (policy, flood), jct in results.items():
        alone = results[(policy, 0)]
        row = "  ".join(f"{k[-1]}:{jct[k]:.2f}" for k in AGENTS)
        ratio = statistics.median(jct[k] / alone[k] for k in AGENTS)
        print(f"{policy:8s} flood={flood:2d}  {row}  median x{ratio:.2f} of alone")


if __name__ == "__main__":
    main()
