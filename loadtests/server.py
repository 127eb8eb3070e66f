"""Starting ``agentgate`` commands in subprocesses, and CPU accounting of processes (Linux /proc).

The one home of these mechanics: load runs start their server here, and the
test suites' live servers (``tests/support/servers.py``) are built on it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children(pid: int) -> list[int]:
    """Direct child processes of ``pid``."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    pids, todo = [pid], [pid]
    while todo:
        for child in children(todo.pop()):
            pids.append(child)
            todo.append(child)
    return pids


def alive(pid: int) -> bool:
    """Running (an exited process that is not reaped yet, a zombie, is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def tree_cpu_seconds(pid: int) -> float:
    return sum(cpu_seconds(p) for p in process_tree(pid))


def machine_busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, all cores (/proc/stat)."""
    try:
        values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError):
        return 0.0, 0.0
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    total = sum(values[:8])
    return (total - idle) / TICKS, total / TICKS


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and its descendants, the deepest first."""
    for p in reversed(process_tree(pid)):
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def stop_process(process: subprocess.Popen, timeout: float = 30.0) -> int | None:
    """SIGTERM, as an init system would; after ``timeout`` seconds SIGKILL to the process and its descendants."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            kill_tree(process.pid)
            process.wait(10)
    return process.returncode


@dataclass
class Server:
    """An ``agentgate`` command running in a subprocess (``port``: its HTTP port, 0 for an engine)."""

    process: subprocess.Popen
    port: int
    log_path: Path
    command: list[str]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 30.0) -> int | None:
        return stop_process(self.process, timeout)

    def kill(self) -> None:
        """SIGKILL it and its children (a killed gateway cannot stop its engine)."""
        kill_tree(self.pid)
        self.process.wait(10)


def launch(
    args: Sequence[str],
    log_path: Path,
    *,
    port: int = 0,
    env: Mapping[str, str] | None = None,
    cls: type[Server] = Server,
) -> Server:
    """``python -m agentgate.gateway.command.cli ARGS`` in the background, its output appended to
    ``log_path`` (not waited for: see :func:`wait_healthy`); ``env``: its whole environment."""
    command = [sys.executable, "-m", "agentgate.gateway.command.cli", *args]
    environment = dict(os.environ if env is None else env, PYTHONUNBUFFERED="1")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment)
    return cls(process, port, log_path, command)


def wait_healthy(*servers: Server, timeout: float = 600.0) -> None:
    """Wait until each server's /health answers 200; RuntimeError (with its log) when one
    exits or does not get there within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    for server in servers:
        while True:
            if server.process.poll() is not None:
                raise RuntimeError(
                    f"{server.log_path.name}: the server exited with {server.process.returncode}:\n"
                    + server.log()[-3000:]
                )
            try:
                if httpx.get(f"{server.url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(
                    f"{server.log_path.name}: not healthy within {timeout:.0f} s:\n" + server.log()[-3000:]
                )
            time.sleep(0.2)


def start_server(
    args: Sequence[str],
    log_dir: Path,
    timeout: float = 600.0,
    *,
    env: Mapping[str, str] | None = None,
    log_name: str | None = None,
    cls: type[Server] = Server,
) -> Server:
    """``agentgate serve ARGS`` on a free port of 127.0.0.1, once its /health answers 200; its
    output goes to ``log_dir / log_name`` (default ``server-<port>.log``)."""
    port = free_port()
    log_path = log_dir / (log_name or f"server-{port}.log")
    server = launch(["serve", "--port", str(port), *args], log_path, port=port, env=env, cls=cls)
    wait_healthy(server, timeout=timeout)
    return server


def scrape(url: str) -> dict[str, float]:
    """The server's ``/metrics``: each series (a labelled one by its whole name) -> its value."""
    values = {}
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values
