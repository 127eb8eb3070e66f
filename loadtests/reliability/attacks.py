"""What a client can do to a server, with the server's answer measured:

- ``fanout``: one completion request of 2,000 prompts and one of n=128 x 200
  prompts (both refused with 400 before the engine), then a small request's
  latency beside an accepted n=128 request;
- ``bodies``: five 5 MB chat bodies at a time for ``--seconds``, with a
  ``/health`` probe every 20 ms beside them (p50/p99), against the default
  body limit (413 before reading) and a 16 MiB one (parsed, then refused by
  the prompt's character bound before tokenizing);
- ``storm``: 300 streams that disconnect after a few events; then running
  requests, KV usage, gateway requests in flight and gateway memory against
  the baseline.

    python -m agentgate.loadtests.reliability.attacks fanout bodies storm
"""

from __future__ import annotations

import argparse
import json
import time

import anyio
import httpx

from agentgate.loadtests.reliability.common import median, percentile, report, rss_mb, serve

CHAT = "/v1/chat/completions"


async def fanout(url: str) -> dict:
    async with httpx.AsyncClient(timeout=120) as client:
        started = time.monotonic()
        wide = await client.post(f"{url}/v1/completions", json={"prompt": ["hi"] * 2000, "max_tokens": 4})
        wide_s = time.monotonic() - started
        deep = await client.post(f"{url}/v1/completions", json={"prompt": ["hi"] * 200, "n": 128, "max_tokens": 4})
        small_alone = []
        for _ in range(5):
            t = time.monotonic()
            await client.post(f"{url}{CHAT}", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8})
            small_alone.append(time.monotonic() - t)
        beside, accepted = [], []
        async with anyio.create_task_group() as tasks:

            async def big() -> None:
                r = await client.post(
                    f"{url}{CHAT}",
                    json={
                        "messages": [{"role": "user", "content": "hi"}],
                        "n": 128,
                        "max_tokens": 64,
                        "ignore_eos": True,
                    },
                )
                accepted.append(r.status_code)

            tasks.start_soon(big)
            await anyio.sleep(0.2)
            for _ in range(5):
                t = time.monotonic()
                await client.post(
                    f"{url}{CHAT}", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
                )
                beside.append(time.monotonic() - t)
    return {
        "2000 prompts": f"{wide.status_code} {wide.json()['error']['code']} in {wide_s * 1000:.0f} ms",
        "200 prompts x n=128": f"{deep.status_code} {deep.json()['error']['code']}",
        "n=128 chat": accepted,
        "small request alone, median s": round(median(small_alone), 3),
        "small request beside n=128, median s": round(median(beside), 3),
    }


async def bodies(url: str, seconds: float) -> dict:
    text = "x" * (5 * 1024 * 1024)
    body = json.dumps({"messages": [{"role": "user", "content": text}], "max_tokens": 4}).encode()
    statuses: dict[int, int] = {}
    probes: list[float] = []
    stop = anyio.Event()

    async def attacker(client: httpx.AsyncClient) -> None:
        while not stop.is_set():
            try:
                r = await client.post(f"{url}{CHAT}", content=body, headers={"content-type": "application/json"})
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            except httpx.HTTPError:
                statuses[0] = statuses.get(0, 0) + 1

    async def probe(client: httpx.AsyncClient) -> None:
        while not stop.is_set():
            t = time.monotonic()
            await client.get(f"{url}/health")
            probes.append((time.monotonic() - t) * 1000)
            await anyio.sleep(0.02)

    async with httpx.AsyncClient(timeout=60) as attackers, httpx.AsyncClient(timeout=10) as prober:
        async with anyio.create_task_group() as tasks:
            for _ in range(5):
                tasks.start_soon(attacker, attackers)
            tasks.start_soon(probe, prober)
            await anyio.sleep(seconds)
            stop.set()
    return {
        "bodies answered": dict(sorted(statuses.items())),
        "health probes": len(probes),
        "health p50 ms": round(percentile(probes, 0.5), 1),
        "health p99 ms": round(percentile(probes, 0.99), 1),
        "health max ms": round(max(probes), 1),
    }


def _gauges(url: str) -> dict[str, float]:
    from agentgate.agents import prometheus

    m = prometheus.parse(httpx.get(f"{url}/metrics", timeout=10).text)
    names = (
        "agentgate_requests_running",
        "agentgate_requests_waiting",
        "agentgate_kv_cache_usage_ratio",
        "agentgate_gateway_requests_in_flight",
    )
    return {n: m.get(n, float("nan")) for n in names}


async def storm(url: str, pid: int, streams: int) -> dict:
    baseline, rss_before = _gauges(url), rss_mb(pid)
    body = {"messages": [{"role": "user", "content": "go"}], "max_tokens": 900, "stream": True, "ignore_eos": True}

    async def leave_early(client: httpx.AsyncClient) -> None:
        async with client.stream("POST", f"{url}{CHAT}", json=body) as response:
            events = 0
            async for _ in response.aiter_lines():
                events += 1
                if events >= 6:
                    return

    started = time.monotonic()
    limits = httpx.Limits(max_connections=streams)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client, anyio.create_task_group() as tasks:
        for _ in range(streams):
            tasks.start_soon(leave_early, client)
    settled = None
    while time.monotonic() - started < 60:
        now = _gauges(url)
        if (
            now["agentgate_requests_running"] == 0
            and now["agentgate_gateway_requests_in_flight"] == 0
            and now["agentgate_kv_cache_usage_ratio"] == 0
        ):
            settled = time.monotonic() - started
            break
        await anyio.sleep(0.05)
    return {
        "streams": streams,
        "baseline": baseline,
        "after": _gauges(url),
        "back to baseline after s": settled,
        "gateway rss MB before/after": (round(rss_before, 1), round(rss_mb(pid), 1)),
    }


async def run(args: argparse.Namespace) -> None:
    for name in args.runs:
        configs = [()] if name != "bodies" else [(), ("--max-body-bytes", str(16 * 1024 * 1024))]
        for flags in configs:
            server = await anyio.to_thread.run_sync(lambda f=flags: serve(*f))
            try:
                if name == "fanout":
                    figures = await fanout(server.url)
                elif name == "bodies":
                    figures = await bodies(server.url, args.seconds)
                else:
                    figures = await storm(server.url, server.pid, args.streams)
            finally:
                await anyio.to_thread.run_sync(server.stop)
            report(f"{name} {' '.join(flags) or '(defaults)'}", figures)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", choices=("fanout", "bodies", "storm"))
    parser.add_argument("--seconds", type=float, default=20.0, help="bodies: how long the attack lasts")
    parser.add_argument("--streams", type=int, default=300, help="storm: streams that disconnect")
    anyio.run(run, parser.parse_args())


if __name__ == "__main__":
    main()
