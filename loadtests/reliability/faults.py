"""Processes killed under load: the engine (``--kill engine``) or the embedded
redis-server (``--kill redis``), ``--times`` times, while ``--clients`` loops
of streaming requests run. Every request is accounted for: completed, ended
by an error event (in flight at the kill), refused with an error status
(sent while the engine was down), or hung (none should be).

    python -m agentgate.loadtests.reliability.faults --kill engine --times 10
    python -m agentgate.loadtests.reliability.faults --kill redis --times 5
"""

from __future__ import annotations

import argparse
import os
import signal
import time

import anyio
import httpx

from agentgate.loadtests.reliability.common import (
    NULL_ENGINE,
    Outcomes,
    child_pids,
    median,
    report,
    serve,
    traffic,
    wait_status,
)


async def kill_engine(url: str, server, times: int, settle: float) -> dict:
    downs, backs = [], []
    for _ in range(times):
        await anyio.sleep(settle)
        [engine] = child_pids(server, "spawn_main")
        killed = time.monotonic()
        os.kill(engine, signal.SIGKILL)
        seen_down = await wait_status(url, 503, 5)
        back = await wait_status(url, 200, 60)
        downs.append(seen_down)
        backs.append(None if back is None else time.monotonic() - killed)
    return {
        "kills": times,
        "back_s": [round(b, 2) if b is not None else None for b in backs],
        "back_s_median": round(median([b for b in backs if b is not None]), 2),
        "back_s_max": max((b for b in backs if b is not None), default=None),
        "never_back": sum(b is None for b in backs),
    }


async def kill_redis(url: str, server, times: int, settle: float) -> dict:
    backs = []
    async with httpx.AsyncClient(timeout=10) as client:
        r = await client.post(
            f"{url}/v1/chat/completions",
            headers={"X-Session-Id": "kept"},
            json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        )
        assert r.status_code == 200, r.text
        await anyio.sleep(1.5)  # appendfsync everysec
        for _ in range(times):
            await anyio.sleep(settle)
            [redis] = child_pids(server, "redis-server")
            killed = time.monotonic()
            os.kill(redis, signal.SIGKILL)
            back = None
            while time.monotonic() - killed < 30:
                if (await client.get(f"{url}/v1/sessions/kept")).status_code == 200:
                    back = time.monotonic() - killed
                    break
                await anyio.sleep(0.05)
            backs.append(back)
        kept = (await client.get(f"{url}/v1/sessions/kept")).json().get("turns")
    return {
        "kills": times,
        "sessions_back_s": [round(b, 2) if b is not None else None for b in backs],
        "sessions_back_s_max": max((b for b in backs if b is not None), default=None),
        "never_back": sum(b is None for b in backs),
        "session_turns_after": kept,
    }


async def run(args: argparse.Namespace) -> None:
    flags = ["--engine-max-restarts", str(args.times + 5)]
    runner = NULL_ENGINE if args.runner == "null" else ("--runner", args.runner, "--max-model-len", "2048")
    server = await anyio.to_thread.run_sync(lambda: serve(*flags, runner_flags=runner))
    out, stop = Outcomes(), anyio.Event()
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(lambda: traffic(server.url, out, stop, clients=args.clients, max_tokens=args.max_tokens))
            killer = kill_engine if args.kill == "engine" else kill_redis
            figures = await killer(server.url, server, args.times, args.settle)
            await anyio.sleep(args.settle)
            stop.set()
    finally:
        await anyio.to_thread.run_sync(server.stop)
    report(
        f"kill {args.kill} x{args.times} ({args.runner} runner, {args.clients} clients)",
        {**figures, "requests": out.summary(), "gateway_exit": server.process.returncode},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kill", choices=("engine", "redis"), default="engine")
    parser.add_argument("--times", type=int, default=10)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--settle", type=float, default=2.0, help="seconds of load before each kill")
    parser.add_argument("--runner", default="null", help="null (default) or sync/overlap (the real model)")
    anyio.run(run, parser.parse_args())


if __name__ == "__main__":
    main()
