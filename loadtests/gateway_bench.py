"""Gateway overhead: the gateway in front of an instant engine vs a bare
Starlette + sse-starlette app emitting the same chunks.

    python -m agentgate.loadtests.gateway_bench [--streams 256] [--chunks 64]

Both servers run as subprocesses (uvicorn on 127.0.0.1, free ports); the
client (httpx, in this process) opens ``--streams`` concurrent streaming chat
completions of ``--chunks`` tokens against each, one after the other, and
prints streams/s, chunks/s and p50/p99 time to first chunk for each, and the
ratio gateway/bare. The gateway's engine uses the null runner (tokens without
a model, no step delay), so what is measured is everything around the model:
HTTP, validation, chat template, tokenizing, the ZMQ hop to the engine
process, scheduling, detokenizing, SSE. The bare app does none of it: it
yields pre-encoded chunks of the same shape.

Mind that client, gateway and engine share the machine's cores; on a small
machine the client's own parsing is part of both figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from agentgate.loadtests.metrics import percentile
from agentgate.loadtests.server import free_port, stop_process, tree_cpu_seconds

REPO = Path(__file__).resolve().parents[1]
MESSAGES = [{"role": "user", "content": "Tell me about the sea."}]
STREAMS_PER_CLIENT = 16


# -- the bare app (runs in its own process) --------------------------------------------


def bare_app(num_chunks: int):
    """Starlette + sse-starlette, emitting chat.completion.chunk events like the gateway's."""
    import msgspec
    from sse_starlette import EventSourceResponse
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.routing import Route

    def event(choice: dict) -> bytes:
        chunk = {
            "id": "chatcmpl-bare",
            "created": int(time.time()),
            "model": "bare",
            "choices": [choice],
            "object": "chat.completion.chunk",
            "usage": None,
        }
        return b"data: " + msgspec.json.encode(chunk) + b"\r\n\r\n"

    role = event({"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None})
    words = [
        event({"index": 0, "delta": {"content": f" word{i}"}, "logprobs": None, "finish_reason": None})
        for i in range(num_chunks - 1)
    ]
    last = event({"index": 0, "delta": {"content": " end"}, "logprobs": None, "finish_reason": "length"})

    async def chat(request: Request) -> EventSourceResponse:
        msgspec.json.decode(await request.body())

        async def stream():
            yield role
            for word in words:
                yield word
            yield last
            yield b"data: [DONE]\r\n\r\n"

        return EventSourceResponse(stream(), sep="\r\n")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def serve_bare(port: int, num_chunks: int) -> None:
    import uvicorn

    uvicorn.run(bare_app(num_chunks), host="127.0.0.1", port=port, log_level="warning", access_log=False)


# -- servers -----------------------------------------------------------------------------


def start(command: list[str], port: int, health: str, timeout: float = 180.0) -> subprocess.Popen:
    import httpx

    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTGATE_")}
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{command} exited: {process.stderr.read().decode()[-3000:]}")
        try:
            httpx.request(*health.split(" ", 1), timeout=2, json={"messages": MESSAGES, "max_tokens": 1})
            return process
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"{command} did not start")


# -- the client --------------------------------------------------------------------------


@dataclass
class Result:
    name: str
    streams: int
    seconds: float
    chunks: int
    ttfc: list[float]
    failures: int
    server_cpu: float = float("nan")  # seconds, the server's processes together

    @property
    def streams_per_s(self) -> float:
        return self.streams / self.seconds

    @property
    def chunks_per_s(self) -> float:
        return self.chunks / self.seconds

    def ttfc_percentile(self, q: float) -> float:
        """Time to first chunk, q in [0, 100]; nan when no stream succeeded."""
        value = percentile(self.ttfc, q)
        return float("nan") if value is None else value


async def drive(name: str, url: str, streams: int, num_chunks: int, server_pid: int | None = None) -> Result:
    import anyio
    import httpx

    body = {
        "model": None,
        "messages": MESSAGES,
        "max_tokens": num_chunks,
        "stream": True,
        "ignore_eos": True,
        "temperature": 0,
    }
    ttfc: list[float] = []
    counts: list[int] = []
    failures = 0
    limits = httpx.Limits(max_connections=STREAMS_PER_CLIENT + 8, max_keepalive_connections=STREAMS_PER_CLIENT + 8)

    async def one(client: httpx.AsyncClient) -> None:
        nonlocal failures
        started = time.monotonic()
        events, first, tail = 0, None, b""
        try:
            async with client.stream("POST", url, json=body) as response:
                if response.status_code != 200:
                    failures += 1
                    return
                async for raw in response.aiter_raw():
                    if first is None:
                        first = time.monotonic() - started
                    data = tail + raw
                    events += data.count(b"\r\n\r\n")
                    tail = data[-3:]
                if not data.endswith(b"data: [DONE]\r\n\r\n"):
                    failures += 1
        except httpx.HTTPError:
            failures += 1
            return
        ttfc.append(first or 0.0)
        counts.append(events - 1)  # [DONE] is not a chunk

    # Several clients with small pools: httpx scans its whole pool on every request event, so one
    # pool of 256 connections would make the client itself the slowest part of the run.
    clients = [
        httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(120.0), verify=False)
        for _ in range(-(-streams // STREAMS_PER_CLIENT))
    ]
    try:
        async with anyio.create_task_group() as tasks:  # warm-up: connections, caches, code paths
            for i in range(16):
                tasks.start_soon(one, clients[i % len(clients)])
        ttfc.clear(), counts.clear()
        failures = 0
        cpu_before = tree_cpu_seconds(server_pid) if server_pid else 0.0
        started = time.monotonic()
        async with anyio.create_task_group() as tasks:
            for i in range(streams):
                tasks.start_soon(one, clients[i % len(clients)])
        seconds = time.monotonic() - started
        server_cpu = tree_cpu_seconds(server_pid) - cpu_before if server_pid else float("nan")
    finally:
        for client in clients:
            await client.aclose()
    return Result(name, streams, seconds, sum(counts), ttfc, failures, server_cpu)


def report(results: list[Result]) -> float:
    header = ("server", "streams/s", "chunks/s", "chunks/stream", "TTFC p50", "TTFC p99", "server CPU/stream", "failed")
    print("{:<10} {:>10} {:>10} {:>14} {:>10} {:>10} {:>18} {:>7}".format(*header))
    for r in results:
        per_stream = r.chunks / max(1, r.streams - r.failures)
        ttfc = f"{r.ttfc_percentile(50) * 1000:>8.1f}ms {r.ttfc_percentile(99) * 1000:>8.1f}ms"
        cpu = f"{r.server_cpu / r.streams * 1000:>16.2f}ms"
        rates = f"{r.streams_per_s:>10.1f} {r.chunks_per_s:>10.0f} {per_stream:>14.1f}"
        print(f"{r.name:<10} {rates} {ttfc} {cpu} {r.failures:>7}")
    gateway, bare = results
    ratio = gateway.chunks_per_s / bare.chunks_per_s
    cpu_ratio = gateway.server_cpu / bare.server_cpu
    print(
        f"ratio gateway/bare: streams/s {gateway.streams_per_s / bare.streams_per_s:.2f}, chunks/s {ratio:.2f}"
        f" (target >= 0.7); server CPU per stream gateway/bare {cpu_ratio:.2f}x"
    )
    return ratio


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=256)
    parser.add_argument("--chunks", type=int, default=64)
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="measure each server this many times, alternating, and report the median ratio "
        "(use 3-5 on a shared machine)",
    )
    parser.add_argument("--bare-server", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_server:
        serve_bare(args.bare_server, args.chunks)
        return 0

    import anyio

    gateway_port, bare_port = free_port(), free_port()
    servers = []
    try:
        # Formatted by hand: each flag beside its value, as on a command line.
        servers.append(start(
            [sys.executable, "-m", "agentgate.gateway.command.cli", "serve", "--runner", "null",
             "--port", str(gateway_port),
             "--max-num-seqs", str(max(args.streams, 64)), "--max-model-len", "2048", "--max-waiting", "0",
             "--log-level", "warning"],
            gateway_port, f"GET http://127.0.0.1:{gateway_port}/health",
        ))  # fmt: skip
        servers.append(
            start(
                [
                    sys.executable,
                    "-m",
                    "agentgate.loadtests.gateway_bench",
                    "--bare-server",
                    str(bare_port),
                    "--chunks",
                    str(args.chunks),
                ],
                bare_port,
                f"POST http://127.0.0.1:{bare_port}/v1/chat/completions",
            )
        )
        urls = {
            "gateway": f"http://127.0.0.1:{gateway_port}/v1/chat/completions",
            "bare": f"http://127.0.0.1:{bare_port}/v1/chat/completions",
        }
        print(
            f"{args.streams} concurrent streams x {args.chunks} chunks, httpx client, {os.cpu_count()} CPUs "
            "(client, gateway, engine and bare app share them)"
        )
        ratios = []
        for round_ in range(args.rounds):
            order = ["gateway", "bare"] if round_ % 2 == 0 else ["bare", "gateway"]
            pids = {"gateway": servers[0].pid, "bare": servers[1].pid}
            results = {
                name: anyio.run(drive, name, urls[name], args.streams, args.chunks, pids[name]) for name in order
            }
            if args.rounds > 1:
                print(f"-- round {round_ + 1}")
            ratios.append(report([results["gateway"], results["bare"]]))
        if args.rounds > 1:
            print(
                f"median ratio gateway/bare over {args.rounds} rounds: {statistics.median(ratios):.2f} "
                f"(min {min(ratios):.2f}, max {max(ratios):.2f})"
            )
    finally:
        for server in servers:
            stop_process(server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
