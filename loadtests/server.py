"""Starting ``agentgate serve`` for a run, and CPU accounting of processes (Linux /proc)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


def process_tree(pid: int) -> list[int]:
    pids, todo = [pid], [pid]
    while todo:
        for child in _children(todo.pop()):
            pids.append(child)
            todo.append(child)
    return pids


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


def stop_process(process: subprocess.Popen, timeout: float = 30.0) -> int | None:
    """SIGTERM, then after ``timeout`` seconds SIGKILL to the process and its descendants."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            for pid in reversed(process_tree(process.pid)):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            process.wait(10)
    return process.returncode


@dataclass
class Server:
    """``agentgate serve`` in a subprocess on a free port of 127.0.0.1."""

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

    def stop(self, timeout: float = 30.0) -> int | None:
        return stop_process(self.process, timeout)


def start_server(args: list[str], log_dir: Path, timeout: float = 600.0) -> Server:
    """Start ``agentgate serve ARGS`` and wait until /health answers 200."""
    port = free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / "server.log"
    command = [sys.executable, "-m", "agentgate.gateway.cli", "serve", "--port", str(port), *args]
    environment = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment)
    server = Server(process, port, log_path, command)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}; see {log_path}:\n"
                               + log_path.read_text(errors="replace")[-3000:])  # fmt: skip
        try:
            if httpx.get(f"{server.url}/health", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    server.stop()
    raise RuntimeError(f"the server was not healthy within {timeout:.0f} s; see {log_path}")
