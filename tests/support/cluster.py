"""Two gateways and two engines (null-runner ones unless told) on one real ``redis-server``:
the replicas a test of shared state talks to (``tests/gateway/test_multi_cluster.py``,
``tests/gateway/test_program_affinity_live.py``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.servers import LiveServer, RedisServer, launch_engine, launch_gateway, stop_all, wait_healthy


@dataclass
class Cluster:
    tmp: Path
    redis: RedisServer
    engines: list[LiveServer]
    addresses: list[str]
    a: LiveServer
    b: LiveServer
    flags: list[str]

    def restart_a(self, *, kill: bool = False) -> None:
        """Stop gateway A (``kill``: SIGKILL, as a crash) and start it again at the same port, with the same flags."""
        if kill:
            self.a.kill()
        else:
            stop_all(self.a)
        self.a = launch_gateway(self.tmp, "gateway-a", self.addresses, self.redis.url, *self.flags, port=self.a.port)
        wait_healthy(self.a)


def run_cluster(
    tmp: Path, flags: list[str], engine_flags: Sequence[str] = (), *, b_reversed: bool = False
) -> Iterator[Cluster]:
    """The cluster, for a fixture to yield; stopped (Redis too) afterwards. ``engine_flags``: the
    engines' (default: a null runner); ``b_reversed``: gateway B lists the engines the other way
    round, so the two gateways' least-loaded choices differ."""
    redis = RedisServer(tmp / "redis").start()
    (e1, a1), (e2, a2) = launch_engine(tmp, "engine-1", *engine_flags), launch_engine(tmp, "engine-2", *engine_flags)
    a = launch_gateway(tmp, "gateway-a", [a1, a2], redis.url, *flags)
    b = launch_gateway(tmp, "gateway-b", [a2, a1] if b_reversed else [a1, a2], redis.url, *flags)
    c = Cluster(tmp, redis, [e1, e2], [a1, a2], a, b, flags)
    try:
        wait_healthy(a, b)
        yield c
    finally:
        stop_all(c.a, c.b, e1, e2)
        redis.stop()
