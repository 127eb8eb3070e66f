"""Gateway replicas are alive while their Redis heartbeat is (``gateway.state.redis_state``), on live
processes: two gateways with one hostname, each pid 1 of its own PID namespace (containers with
host networking), do not fail each other's background responses; once one is killed, its
responses are failed within the stated bound; a stored record that does not decode is logged
and skipped, and the gateways keep serving (``gateway.responses_api.store``)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import redis

from agentgate.gateway.responses_api.store import ORPHAN_SWEEP_S
from agentgate.gateway.state.redis_state import HEARTBEAT_S, REPLICA_TTL_S
from agentgate.loadtests.server import Server, children
from tests.support.http import wait_for
from tests.support.servers import RedisServer, clean_environment, free_port, launch_command, stop_all, wait_healthy

pytestmark = pytest.mark.slow

ENGINE = ("--runner", "null", "--null-step-seconds", "0.02", "--max-model-len", "4096", "--num-kv-blocks", "1024")
CORRUPT = "resp_corrupt"


def _unshare_unavailable() -> str | None:
    if shutil.which("unshare") is None:
        return "no unshare(1)"
    if os.geteuid() != 0:
        return "PID namespaces need root here"
    return None


def _gateway_in_own_pid_namespace(log_dir: Path, name: str, *flags: str) -> Server:
    """``agentgate gateway FLAGS`` as pid 1 of a new PID namespace (same hostname, same network)."""
    port = free_port()
    unshare = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
    command = [*unshare, sys.executable, "-m", "agentgate.gateway.command.cli", "gateway", "--port", str(port), *flags]
    log_path = log_dir / f"{name}.log"
    with open(log_path, "a") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=clean_environment({"PYTHONUNBUFFERED": "1"})
        )
    return Server(process, port, log_path, command)


def _namespace_pid(server: Server) -> tuple[int, int]:
    """(the gateway's pid here, its pid in its own namespace)."""
    [gateway] = children(server.pid)
    nspid = next(line for line in Path(f"/proc/{gateway}/status").read_text().splitlines() if line.startswith("NSpid"))
    return gateway, int(nspid.split()[-1])


def _status(gateway: Server, response_id: str) -> str:
    r = httpx.get(f"{gateway.url}/v1/responses/{response_id}", timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["status"]


def test_gateways_sharing_hostname_and_pid_1_keep_each_others_responses(tmp_path):
    if why := _unshare_unavailable():
        pytest.skip(why)
    store = RedisServer(tmp_path / "redis").start()
    db = redis.Redis.from_url(store.url, decode_responses=True)
    # A record of another version, left running by a replica long gone: the sweep must skip it.
    db.hset(f"agentgate:response:{CORRUPT}", mapping={"status": "in_progress", "record": "{not json", "owner": "x"})
    db.hset("agentgate:responses:running", CORRUPT, "gone-host:8000:1:ffffff")
    address = f"tcp://127.0.0.1:{free_port()}"
    engine = launch_command(tmp_path, "engine", "engine", "--address", address, *ENGINE)
    flags = ("--engine", address, "--redis-url", store.url, "--key-digest-secret", "liveness-test-secret")
    gateways = [_gateway_in_own_pid_namespace(tmp_path, f"gateway-{i}", *flags) for i in range(2)]
    a, b = gateways
    try:
        wait_healthy(*gateways, timeout=300)
        pids = [_namespace_pid(g) for g in gateways]
        assert [inner for _, inner in pids] == [1, 1], pids  # one hostname, pid 1 each: ids alike but for the port
        created = httpx.post(
            f"{a.url}/v1/responses",
            json={"input": "count", "background": True, "max_output_tokens": 3000},
            timeout=30,
        )
        assert created.status_code == 200, created.text
        response_id = created.json()["id"]
        replica = db.hget("agentgate:responses:running", response_id)
        assert replica is not None and replica.split(":")[2] == "1", replica

        time.sleep(2 * ORPHAN_SWEEP_S + 1)  # two sweeps by each gateway
        assert _status(b, response_id) == "in_progress"
        assert _status(a, response_id) == "in_progress"
        for g in gateways:  # the corrupt record: skipped, logged once, both serving
            assert httpx.get(f"{g.url}/health", timeout=10).status_code == 200
            skipped = [line for line in g.log().splitlines() if CORRUPT in line and "does not decode" in line]
            assert len(skipped) == 1, g.log()[-3000:]
        assert db.hget(f"agentgate:response:{CORRUPT}", "record") == "{not json"  # left alone

        killed_gateway, _ = pids[0]
        os.kill(killed_gateway, signal.SIGKILL)  # no clean stop: its heartbeat key is left to lapse
        killed = time.monotonic()
        bound = REPLICA_TTL_S + ORPHAN_SWEEP_S
        wait_for(lambda: _status(b, response_id) == "failed", timeout=bound + 5, message="the orphan failed")
        took = time.monotonic() - killed
        print(f"a killed replica's background response failed after {took:.1f} s (bound {bound:.0f} s)")
        assert took >= REPLICA_TTL_S - HEARTBEAT_S  # by the lapsed heartbeat, not by a guess about pids
    finally:
        for gateway in gateways:  # unshare ignores SIGTERM while it waits: the gateway itself is told
            for pid in children(gateway.pid):
                os.kill(pid, signal.SIGTERM)
        stop_all(*gateways, engine)
        db.close()
        store.stop()
