"""What the reliability runs share: a server to hit, its processes, steady
traffic whose every request is accounted for, and percentiles."""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx

from agentgate.loadtests.server import Server, children, start_server

# Formatted by hand: each flag beside its value, as on a command line.
NULL_ENGINE = ("--runner", "null", "--null-step-seconds", "0.01", "--max-num-seqs", "256", "--max-model-len", "1024",
               "--num-kv-blocks", "8192")  # fmt: skip
HANG_S = 60.0  # a request without an answer this long is hung
MAX_BROKEN_TAILS = 3  # broken streams whose ends a run prints


def serve(*flags: str, runner_flags: tuple[str, ...] = NULL_ENGINE) -> Server:
    """``agentgate serve`` on a free port (log in a temporary directory), once healthy."""
    log_dir = Path(tempfile.mkdtemp(prefix="agentgate-reliability-"))
    return start_server([*runner_flags, *flags], log_dir, timeout=600)


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def child_pids(server: Server, marker: str) -> list[int]:
    """The server's children whose command line holds ``marker`` (``spawn_main``: engines)."""
    return [p for p in children(server.pid) if marker in cmdline(p)]


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Outcomes:
    """Every request of a traffic run, by how it ended."""

    completed: int = 0
    errored: int = 0  # an error status (or a failed connection): answered, not lost silently
    broken: int = 0  # a 200 stream ended by an error event: in flight when something died
    hung: int = 0  # no end within HANG_S
    statuses: dict[int, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    broken_tails: list[str] = field(default_factory=list)  # the ends of the first broken streams, to read

    def summary(self) -> str:
        text = (
            f"{self.completed} completed, {self.broken} streams ended by an error event, {self.errored} refused "
            f"with an error status, {self.hung} hung; "
            f"statuses {dict(sorted(self.statuses.items()))}"
        )
        return text + "".join(f"\n    broken stream's end: {tail!r}" for tail in self.broken_tails)


def ended_whole(tail: str) -> bool:
    """Whether a chat stream whose last characters are ``tail`` ended whole: on ``data: [DONE]``, with
    no error event (a ``data:`` object with a top-level ``error``) among its last events. The text a
    model streamed may say "error" (``"content":"error"``): that is no error event."""
    if not tail.rstrip().endswith("data: [DONE]"):
        return False
    for line in tail.splitlines():
        if not line.startswith("data: {"):
            continue
        try:
            event = json.loads(line[len("data: ") :])
        except ValueError:  # the tail's first line, cut
            continue
        if isinstance(event, dict) and "error" in event:
            return False
    return True


async def one_stream(client: httpx.AsyncClient, url: str, body: dict, out: Outcomes) -> None:
    """One streaming chat request, its end recorded in ``out``."""
    started = time.monotonic()
    try:
        with anyio.fail_after(HANG_S):
            async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
                out.statuses[response.status_code] = out.statuses.get(response.status_code, 0) + 1
                if response.status_code != 200:
                    await response.aread()
                    out.errored += 1
                    return
                tail = ""
                async for text in response.aiter_text():
                    tail = (tail + text)[-2000:]
                if ended_whole(tail):
                    out.completed += 1
                    out.latencies.append(time.monotonic() - started)
                else:
                    out.broken += 1
                    if len(out.broken_tails) < MAX_BROKEN_TAILS:
                        out.broken_tails.append(tail[-400:])
    except TimeoutError:
        out.hung += 1
    except httpx.HTTPError:
        out.errored += 1  # the connection failed: the client knows


async def traffic(url: str, out: Outcomes, stop: anyio.Event, *, clients: int = 8, max_tokens: int = 64) -> None:
    """``clients`` loops of streaming chat requests until ``stop`` is set."""
    body = {
        "messages": [{"role": "user", "content": "Tell me about the sea."}],
        "max_tokens": max_tokens,
        "stream": True,
        "ignore_eos": True,
    }

    async def loop(client: httpx.AsyncClient) -> None:
        while not stop.is_set():
            await one_stream(client, url, body, out)

    async with httpx.AsyncClient(timeout=HANG_S + 10) as client, anyio.create_task_group() as tasks:
        for _ in range(clients):
            tasks.start_soon(loop, client)


async def wait_status(url: str, status: int, timeout: float) -> float | None:
    """Seconds until ``/health`` answers ``status`` (None: not within ``timeout``)."""
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=5) as client:
        while time.monotonic() - started < timeout:
            try:
                if (await client.get(f"{url}/health")).status_code == status:
                    return time.monotonic() - started
            except httpx.HTTPError:
                pass
            await anyio.sleep(0.05)
    return None


def report(name: str, figures: dict) -> None:
    """Print the run's figures as one JSON line (and a readable block)."""
    print(f"== {name}")
    for key, value in figures.items():
        print(f"  {key}: {value}")
    print(json.dumps({"run": name, **figures}, default=str))


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")
