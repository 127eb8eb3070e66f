"""Speculative decoding on/off side by side, on agents that really call tools.

    python -m agentgate.loadtests.spec_bench [--agents 1,16] [--window 20] [--repeats 3]

Starts one `agentgate serve` per variant (same model and flags but
``--speculative``), then for each agent count runs the ``--format tools``
workload (`loadtests.tool_agents`) against each server in turn for
``--window`` seconds, ``--repeats`` times, alternating the variants. Each
repetition uses a fresh seed for every variant alike, so no server sees
the very conversations its suffix index already holds from an earlier
window. Prints, per agent count and variant, the median output tokens/s
over the repetitions, the acceptance rate and tokens per request-step (from
/metrics), and the on/off ratio. Run it alone, under the exclusive CPU lock.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from agentgate.loadtests.driver import RunConfig, Runner
from agentgate.loadtests.metrics import summarize
from agentgate.loadtests.report import server_view
from agentgate.loadtests.server import start_server
from agentgate.loadtests.workload import WorkloadConfig


def one_window(url: str, agents: int, window: float, seed: int, turns: int) -> dict[str, Any]:
    workload = WorkloadConfig(turns=turns, reply_tokens=24, tool_latency=(0.0, 0.0), format="tools")
    config = RunConfig(url=url, agents=agents, duration=window, seed=seed, workload=workload, metrics_interval=1.0)
    state = anyio.run(Runner(config).run)
    records = state.records
    end = max((r.end for r in records), default=state.now())
    summary = summarize(records, end, config.slo)
    view = server_view(state.samples)
    return {
        "tok_s": summary["throughput"]["output_tokens_per_s"],
        "acceptance": view.get("spec_acceptance_rate"),
        "tokens_per_step": view.get("tokens_per_step"),
        "ok": summary["requests"]["ok"],
        "errors": summary["requests"]["errors"],
        "tool_calls": sum(1 for r in records if r.turn < turns - 1 and r.ok),
    }


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m agentgate.loadtests.spec_bench", description=__doc__.split("\n")[0])
    p.add_argument("--agents", default="1,16", help="comma-separated agent counts")
    p.add_argument("--window", type=float, default=20.0, help="seconds per window")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--turns", type=int, default=4, help="turns per conversation (all but the last call a tool)")
    p.add_argument("--server-args", default="", help="flags both servers share (default: the default runner)")
    p.add_argument("--on", default="suffix", help="--speculative of the 'on' server")
    args = p.parse_args()
    log_dir = Path(tempfile.mkdtemp(prefix="spec-bench-"))
    common = shlex.split(args.server_args)
    variants = {"off": "off", "on": args.on}
    servers = {
        name: start_server([*common, "--speculative", mode], log_dir, log_name=f"{name}.log")
        for name, mode in variants.items()
    }
    try:
        for agents in (int(a) for a in args.agents.split(",")):
            one_window(servers["off"].url, agents, 3.0, seed=10_000, turns=args.turns)  # warm both alike
            one_window(servers["on"].url, agents, 3.0, seed=10_001, turns=args.turns)
            runs: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
            for repeat in range(args.repeats):
                order = list(variants) if repeat % 2 == 0 else list(reversed(variants))
                for name in order:
                    result = one_window(servers[name].url, agents, args.window, seed=repeat, turns=args.turns)
                    runs[name].append(result)
                    print(f"agents={agents} {name} run {repeat}: {result}", flush=True)
            medians = {name: statistics.median(r["tok_s"] for r in rs) for name, rs in runs.items()}
            on = runs["on"]
            acceptance = statistics.median(r["acceptance"] or 0.0 for r in on)
            per_step = statistics.median(r["tokens_per_step"] or 0.0 for r in on)
            print(
                f"agents={agents}: off {medians['off']:.1f} tok/s, on ({args.on}) {medians['on']:.1f} tok/s, "
                f"ratio {medians['on'] / medians['off']:.2f}x; acceptance {acceptance:.1%}, "
                f"{per_step:.2f} tokens per request-step (medians of {args.repeats} x {args.window:.0f} s)",
                flush=True,
            )
    finally:
        for server in servers.values():
            server.stop()
        time.sleep(0.1)


if __name__ == "__main__":
    main()
