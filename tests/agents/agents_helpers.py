"""Helpers for the agents/ and loadtests/ tests: a live `agentgate serve` on a free port,
/metrics reading, waiting, and a scripted OpenAI server (httpx.MockTransport) for unit tests."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]
USER_KEY = "agents-user-key"
ADMIN_KEY = "agents-admin-key"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LiveServer:
    process: subprocess.Popen
    port: int
    log_path: Path
    api_key: str | None = None
    admin_key: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 30.0) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def start_server(log_dir: Path, *flags: str, api_key: str | None = None, admin_key: str | None = None,
                 timeout: float = 300.0) -> LiveServer:  # fmt: skip
    port = free_port()
    log_path = log_dir / f"server-{port}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTGATE_")}
    env["PYTHONUNBUFFERED"] = "1"
    args = list(flags)
    if api_key:
        args += ["--api-key", api_key]
    if admin_key:
        args += ["--admin-key", admin_key]
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "agentgate.gateway.cli", "serve", "--port", str(port), *args],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO,
        )  # fmt: skip
    server = LiveServer(process, port, log_path, api_key, admin_key)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}:\n{server.log()}")
        try:
            if httpx.get(f"{server.url}/health", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"the server was not healthy within {timeout:.0f} s:\n{server.log()}")


def metrics(url: str) -> dict[str, float]:
    samples = {}
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def wait_for(predicate: Callable[[], bool], timeout: float = 15.0, message: str = "a condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {message}")


def engine_idle(url: str) -> bool:
    m = metrics(url)
    return (
        m["agentgate_kv_cache_usage_ratio"] == 0.0
        and m["agentgate_requests_running"] == 0
        and m["agentgate_requests_waiting"] == 0
        and m["agentgate_gateway_requests_in_flight"] == 0
    )


# -- a scripted OpenAI server -------------------------------------------------------------


def sse_body(chunks: list[dict[str, Any]], done: bool = True) -> bytes:
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\r\n\r\n" for c in chunks)
    return body + (b"data: [DONE]\r\n\r\n" if done else b"")


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, index: int = 0, **extra: Any) -> dict:
    choices = [] if delta is None else [{"index": index, "delta": delta, "finish_reason": finish}]
    return {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": choices, **extra}  # fmt: skip


def tool_call_chunks(calls: list[tuple[str, str, dict[str, Any]]], content: str = "") -> list[dict[str, Any]]:
    """The stream of an assistant turn that says ``content`` then calls ``calls`` [(id, name, args)],
    arguments in three fragments each, finishing with tool_calls."""
    out = [chunk({"role": "assistant", "content": ""})]
    if content:
        out += [chunk({"content": content[: len(content) // 2]}), chunk({"content": content[len(content) // 2 :]})]
    for i, (call_id, name, args) in enumerate(calls):
        text = json.dumps(args)
        out.append(chunk({"tool_calls": [{"index": i, "id": call_id, "type": "function",
                                          "function": {"name": name, "arguments": ""}}]}))  # fmt: skip
        third = max(1, len(text) // 3)
        for part in (text[:third], text[third : 2 * third], text[2 * third :]):
            out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": part}}]}))
    out.append(chunk({}, finish="tool_calls" if calls else "stop"))
    out.append(chunk(None, usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}))
    return out


def completion_json(content: str | None, calls: list[tuple[str, str, dict[str, Any]]] = ()) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for i, n, a in calls
        ]
    return {
        "id": "chatcmpl-x", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }  # fmt: skip


@dataclass
class ScriptedServer:
    """An httpx.MockTransport answering chat completions from a script of replies, recording requests."""

    replies: list[Callable[[dict[str, Any]], httpx.Response]] = field(default_factory=list)
    requests: list[httpx.Request] = field(default_factory=list)

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests]

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if not self.replies:
            return httpx.Response(500, json={"error": {"message": "script exhausted", "type": "test"}})
        return self.replies.pop(0)(json.loads(request.content) if request.content else {})

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handler)


def reply(content: str | None, calls: list[tuple[str, str, dict[str, Any]]] = (), status: int = 200,
          headers: dict[str, str] | None = None):  # fmt: skip
    """A scripted answer: streamed when the request asks for a stream, else JSON."""

    def answer(body: dict[str, Any]) -> httpx.Response:
        if status != 200:
            return httpx.Response(status, headers=headers, json={"error": {"message": "scripted", "type": "t"}})
        if body.get("stream"):
            return httpx.Response(200, headers={"content-type": "text/event-stream", **(headers or {})},
                                  content=sse_body(tool_call_chunks(list(calls), content or "")))  # fmt: skip
        return httpx.Response(200, headers=headers, json=completion_json(content, list(calls)))

    return answer
