"""Steady traffic for ``--minutes``, the gateway's and the engine's resident
memory sampled every ``--every`` seconds; the slope of a least-squares line
through the samples after the first ``--warmup`` seconds, in MB per hour
(a leak shows as a slope well above zero).

    python -m agentgate.loadtests.reliability.soak --minutes 30
"""

from __future__ import annotations

import argparse
import time

import anyio

from agentgate.loadtests.reliability.common import NULL_ENGINE, Outcomes, child_pids, report, rss_mb, serve, traffic


def slope_mb_per_hour(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MB) samples, in MB per hour."""
    n = len(samples)
    if n < 2:
        return float("nan")
    mean_t = sum(t for t, _ in samples) / n
    mean_m = sum(m for _, m in samples) / n
    var = sum((t - mean_t) ** 2 for t, _ in samples)
    cov = sum((t - mean_t) * (m - mean_m) for t, m in samples)
    return cov / var * 3600 if var else float("nan")


async def run(args: argparse.Namespace) -> None:
    runner = NULL_ENGINE if args.runner == "null" else ("--runner", args.runner, "--max-model-len", "2048")
    server = await anyio.to_thread.run_sync(lambda: serve(runner_flags=runner))
    [engine] = child_pids(server, "spawn_main")
    out, stop = Outcomes(), anyio.Event()
    gateway, engine_mb = [], []
    started = time.monotonic()
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(lambda: traffic(server.url, out, stop, clients=args.clients, max_tokens=args.max_tokens))
            while time.monotonic() - started < args.minutes * 60:
                await anyio.sleep(args.every)
                t = time.monotonic() - started
                gateway.append((t, rss_mb(server.pid)))
                engine_mb.append((t, rss_mb(engine)))
            stop.set()
    finally:
        await anyio.to_thread.run_sync(server.stop)
    kept = [i for i, (t, _) in enumerate(gateway) if t >= args.warmup]
    report(
        f"soak {args.minutes} min ({args.runner} runner, {args.clients} clients)",
        {
            "requests": out.summary(),
            "gateway MB first/last": (round(gateway[kept[0]][1], 1), round(gateway[-1][1], 1)),
            "engine MB first/last": (round(engine_mb[kept[0]][1], 1), round(engine_mb[-1][1], 1)),
            "gateway slope MB/h": round(slope_mb_per_hour([gateway[i] for i in kept]), 2),
            "engine slope MB/h": round(slope_mb_per_hour([engine_mb[i] for i in kept]), 2),
            "samples": len(kept),
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--every", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=60.0, help="seconds left out of the slope")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--runner", default="null")
    anyio.run(run, parser.parse_args())


if __name__ == "__main__":
    main()
