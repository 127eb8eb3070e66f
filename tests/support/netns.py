"""Several "hosts" on one machine: Linux network namespaces joined by a bridge (iproute2, root).

    if why := Network.unavailable(): pytest.skip(why)
    net = Network.create()
    redis_host = net.host("redis")           # a namespace with eth0 at 10.231.0.2/24
    with net.inside(redis_host):             # this thread's sockets and children live there
        ...
    net.unplug(redis_host)                   # its cable pulled: peers see silence, not resets
    net.teardown()                           # kills every process in the namespaces, deletes them

The bridge lives in a namespace of its own (the "switch"), so the subnet is private to one run:
nothing is routed through the root namespace, and runs side by side do not meet. Every name
carries the creating process's id and a random tag; :meth:`Network.create` first removes what
a run that died (its process gone) left behind.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "agentgate-mh-"
CLONE_NEWNET = 0x40000000
NETNS_DIR = Path("/run/netns")
_libc = ctypes.CDLL(None, use_errno=True)


def ip(*args: str) -> str:
    """Run ``ip ARGS``; its stdout (CalledProcessError with its stderr when it fails)."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, ["ip", *args], done.stdout, done.stderr)
    return done.stdout


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def namespace_pids(name: str) -> list[int]:
    """The processes whose network namespace is ``name``."""
    try:
        return [int(p) for p in ip("netns", "pids", name).split()]
    except subprocess.CalledProcessError:
        return []


def _kill_processes(name: str) -> None:
    """SIGKILL every process in namespace ``name``."""
    for pid in namespace_pids(name):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _delete_namespace(name: str) -> None:
    _kill_processes(name)
    subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


def _remove_leftovers() -> None:
    """Delete the namespaces of runs whose process is gone (a killed pytest runs no finalizer)."""
    if not NETNS_DIR.is_dir():
        return
    for path in NETNS_DIR.glob(f"{PREFIX}*"):
        owner = path.name.removeprefix(PREFIX).split("-", 1)[0]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            _delete_namespace(path.name)


@dataclass(frozen=True)
class Host:
    """One namespace on the bridge: ``eth0`` at ``ip``; ``port``: its end in the switch."""

    name: str
    ip: str
    port: str


@dataclass
class Network:
    """Namespaces on one bridge, in the subnet ``{subnet}.0/24``."""

    subnet: str = "10.231.0"
    run: str = field(default_factory=lambda: f"{PREFIX}{os.getpid()}-{secrets.token_hex(2)}")
    hosts: list[Host] = field(default_factory=list)

    @property
    def switch(self) -> str:
        return f"{self.run}-switch"

    @staticmethod
    def unavailable() -> str | None:
        """Why namespaces cannot be made here (not root, no iproute2, no permission), or None."""
        if os.geteuid() != 0:
            return "needs root, to create network namespaces (CI runs as root)"
        if shutil.which("ip") is None:
            return "needs iproute2's `ip` command"
        probe = f"{PREFIX}{os.getpid()}-probe"
        try:
            ip("netns", "add", probe)
        except subprocess.CalledProcessError as exc:
            return f"`ip netns add` is not allowed here: {exc.stderr.strip()}"
        subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)
        return None

    @classmethod
    def create(cls, subnet: str = "10.231.0") -> Network:
        """The switch: a namespace holding the bridge."""
        _remove_leftovers()
        net = cls(subnet)
        ip("netns", "add", net.switch)
        try:
            ip("-n", net.switch, "link", "add", "br0", "type", "bridge")
            ip("-n", net.switch, "link", "set", "br0", "up")
        except BaseException:
            net.teardown()
            raise
        return net

    def host(self, name: str) -> Host:
        """A new namespace ``name`` plugged into the bridge, at the subnet's next address."""
        index = len(self.hosts) + 2
        host = Host(f"{self.run}-{name}", f"{self.subnet}.{index}", f"port{index}")
        ip("netns", "add", host.name)
        self.hosts.append(host)
        ip("link", "add", "eth0", "netns", host.name, "type", "veth", "peer", "name", host.port, "netns", self.switch)
        ip("-n", self.switch, "link", "set", host.port, "master", "br0", "up")
        ip("-n", host.name, "addr", "add", f"{host.ip}/24", "dev", "eth0")
        ip("-n", host.name, "link", "set", "eth0", "up")
        ip("-n", host.name, "link", "set", "lo", "up")
        return host

    def unplug(self, host: Host) -> None:
        """Take the host's switch port down: its packets, and those sent to it, go nowhere."""
        ip("-n", self.switch, "link", "set", host.port, "down")

    def plug(self, host: Host) -> None:
        ip("-n", self.switch, "link", "set", host.port, "up")

    def kill_processes(self, host: Host) -> None:
        """SIGKILL every process in the host's namespace (the host lost power)."""
        _kill_processes(host.name)

    @contextmanager
    def inside(self, host: Host) -> Iterator[None]:
        """Move this thread into the host's namespace: sockets it opens, threads and processes it
        starts live there (a socket stays in the namespace it was opened in)."""
        here = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            there = os.open(NETNS_DIR / host.name, os.O_RDONLY)
            try:
                _setns(there)
            finally:
                os.close(there)
            try:
                yield
            finally:
                _setns(here)
        finally:
            os.close(here)

    def teardown(self) -> None:
        """Kill every process in the namespaces and delete them (idempotent)."""
        for name in [h.name for h in self.hosts] + [self.switch]:
            _delete_namespace(name)
        self.hosts.clear()
