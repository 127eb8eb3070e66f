"""Helpers for the gateway tests: a live `agentgate serve` in a subprocess,
SSE parsing and /metrics reading."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
USER_KEY = "user-key-1"
USER_KEY_2 = "user-key-2"
ADMIN_KEY = "admin-key"
ALLOWED_ORIGIN = "http://allowed.example"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children(pid: int) -> list[int]:
    """Direct child processes of ``pid`` (Linux /proc)."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@dataclass
class LiveServer:
    """``agentgate serve`` running in a subprocess on a free port."""

    process: subprocess.Popen
    port: int
    log_path: Path
    headers: dict[str, str] = field(default_factory=dict)  # the user key, when the server has keys
    admin_headers: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def engine_pids(self) -> list[int]:
        """The engine process (spawned by multiprocessing); not its resource tracker."""
        return [c for c in children(self.process.pid) if "spawn_main" in cmdline(c)]

    def all_descendants(self) -> list[int]:
        pids, todo = [], [self.process.pid]
        while todo:
            for child in children(todo.pop()):
                pids.append(child)
                todo.append(child)
        return pids

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, as an init system would; returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL the server and its children (a killed gateway cannot stop its engine)."""
        for pid in [*self.all_descendants(), self.process.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait(10)


def start_server(log_dir: Path, *flags: str, env: dict[str, str] | None = None, timeout: float = 240.0) -> LiveServer:
    port = free_port()
    log_path = log_dir / f"server-{port}.log"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AGENTGATE_")}
    environment.update(env or {})
    environment["PYTHONUNBUFFERED"] = "1"
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "agentgate.gateway.cli", "serve", "--port", str(port), *flags],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment,
            cwd=REPO,
        )
    server = LiveServer(process, port, log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode} during start-up:\n{server.log()}")
        try:
            if httpx.get(f"{server.url}/health", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"the server did not become healthy within {timeout:.0f} s:\n{server.log()}")


# -- SSE -----------------------------------------------------------------------------


def parse_sse(raw: str) -> list[str]:
    """The data payloads of an SSE body, checking the framing: every event is
    `data: ...` lines ended by a blank line (comments allowed)."""
    assert raw.endswith("\r\n\r\n") or raw.endswith("\n\n"), f"the stream does not end an event: {raw[-80:]!r}"
    payloads = []
    for event in raw.replace("\r\n", "\n").split("\n\n"):
        if not event:
            continue
        data = []
        for line in event.split("\n"):
            if line.startswith(":"):
                continue  # keep-alive comment
            assert line.startswith("data: "), f"not an SSE data line: {line!r}"
            data.append(line[len("data: ") :])
        if data:
            payloads.append("\n".join(data))
    return payloads


def check_chat_stream(payloads: list[str], n: int = 1, usage: bool = False) -> dict:
    """Assert OpenAI's chat stream shape; return {index: text}, finish reasons and usage."""
    assert payloads[-1] == "[DONE]", payloads[-3:]
    chunks = [json.loads(p) for p in payloads[:-1]]
    texts: dict[int, str] = {}
    finish: dict[int, str] = {}
    seen_role: set[int] = set()
    usage_chunk = None
    for chunk in chunks:
        assert "error" not in chunk, chunk
        assert chunk["object"] == "chat.completion.chunk"
        assert chunk["id"].startswith("chatcmpl-")
        if not chunk["choices"]:
            assert usage and chunk["usage"] is not None, chunk
            usage_chunk = chunk["usage"]
            continue
        for choice in chunk["choices"]:
            i = choice["index"]
            assert i not in finish, f"choice {i} has a chunk after its finish chunk"
            if i not in seen_role:
                assert choice["delta"].get("role") == "assistant", f"the first chunk of choice {i} has no role"
                seen_role.add(i)
            texts[i] = texts.get(i, "") + (choice["delta"].get("content") or "")
            if choice["finish_reason"] is not None:
                finish[i] = choice["finish_reason"]
    assert sorted(finish) == list(range(n)), f"finish chunks for {sorted(finish)}, expected {n}"
    if usage:
        assert usage_chunk is not None and chunks[-1]["usage"] == usage_chunk, "the usage chunk must come last"
    return {"texts": texts, "finish": finish, "usage": usage_chunk}


# -- metrics -------------------------------------------------------------------------


def metrics(base_url: str) -> dict[str, float]:
    """Every sample of /metrics as name{labels} -> value."""
    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.05, message: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {message}")


def engine_idle(base_url: str) -> bool:
    m = metrics(base_url)
    return (
        m["agentgate_kv_cache_usage_ratio"] == 0.0
        and m["agentgate_requests_running"] == 0
        and m["agentgate_requests_waiting"] == 0
        and m["agentgate_gateway_requests_in_flight"] == 0
    )


# -- streaming clients ----------------------------------------------------------------


def chat_body(max_tokens: int = 16, stream: bool = True, **extra) -> dict:
    body = {
        "messages": [{"role": "user", "content": "Hello there"}],
        "max_tokens": max_tokens,
        "stream": stream,
        "ignore_eos": True,
    }
    body.update(extra)
    return body


class StreamRecorder:
    """Reads one SSE response, keeping the raw text and when each event came."""

    def __init__(self) -> None:
        self.raw = ""
        self.times: list[float] = []
        self.status: int | None = None
        self.headers: httpx.Headers | None = None

    @property
    def events(self) -> int:
        return len(self.times)

    def payloads(self) -> list[str]:
        return parse_sse(self.raw)

    async def run(self, client: httpx.AsyncClient, url: str, body: dict, headers: dict, stop_after: int | None = None):
        async with client.stream("POST", url, json=body, headers=headers) as response:
            self.status, self.headers = response.status_code, response.headers
            if response.status_code != 200:
                self.raw = (await response.aread()).decode()
                return self
            async for text in response.aiter_text():
                self.raw += text
                now = time.monotonic()
                while len(self.times) < self.raw.count("\r\n\r\n"):
                    self.times.append(now)
                if stop_after is not None and self.events >= stop_after:
                    return self  # leaving the block closes the connection mid-stream
        return self
