"""Several hosts on one machine (issue 27): Redis, two engines, two gateways and the client each
in a network namespace of their own, joined by a bridge (``tests/support/netns.py``; root, as CI
is). Every process binds its namespace's own address, engines are found through the Redis
registry, and all traffic crosses the bridge; a host is taken away by pulling its cable (its
switch port down: peers see silence, as when a machine vanishes, not a refused connection) and
killing its processes.

The client is the test itself: its thread moves into the client's namespace for each test, so
every socket it opens (httpx, redis) lives there and reaches the others only through the bridge;
that keeps the streams' timing and assertions in one process, where a client subprocess would
have to report them back. Gateways listen beyond loopback, so they run with an API key, an admin
key (operator routes: ``/v1/requests``) and one ``--key-digest-secret`` (sessions are filed under
the key's digest, which every gateway must compute alike). Engines listen beyond loopback too, so
engines and gateways hold CurveZMQ keys (``agentgate keys``, ``--engine-curve-dir``): every engine
found through Redis is dialled with them.

The cluster is shared by the module's tests; each leaves it whole (hosts back) as it found it.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx
import pytest
import redis

from agentgate.engine.front.client import HEARTBEAT_TIMEOUT_S
from agentgate.engine.front.socket_keys import make_keys
from agentgate.gateway.context import client_id
from agentgate.gateway.engines.registry import ENGINE_TTL_S
from agentgate.loadtests.server import launch
from tests.support.http import StreamRecorder, chat_body, parse_sse, wait_for
from tests.support.netns import Host, Network
from tests.support.servers import (
    ADMIN_KEY,
    NULL_ENGINE,
    USER_KEY,
    LiveServer,
    RedisServer,
    bearer,
    clean_environment,
    wait_healthy,
)

pytestmark = pytest.mark.slow

ENGINE_PORT = 5555
GATEWAY_PORT = 8000
USER = bearer(USER_KEY)
ADMIN = bearer(ADMIN_KEY)
# Formatted by hand: each flag beside its value, as on a command line.
GATEWAY_FLAGS = ("--host", "0.0.0.0", "--port", str(GATEWAY_PORT), "--api-key", USER_KEY, "--admin-key", ADMIN_KEY,
                 "--key-digest-secret", "multi-host-test-secret")  # fmt: skip
LONG = 900  # tokens (of 1024 a sequence): ~9 s at 10 ms a step, still running when a host goes


@dataclass
class HostedServer(LiveServer):
    """An ``agentgate`` process in a namespace, reached at its host's address."""

    ip: str = ""

    @property
    def url(self) -> str:
        return f"http://{self.ip}:{self.port}"


@dataclass
class Hosts:
    """The cluster: its network, its hosts, and the processes serving on them now."""

    net: Network
    log_dir: Path
    redis_host: Host
    engine_hosts: list[Host]
    gateway_hosts: list[Host]
    client: Host
    redis: RedisServer
    engines: list[HostedServer] = field(default_factory=list)
    gateways: list[HostedServer] = field(default_factory=list)
    launched: list[subprocess.Popen] = field(default_factory=list)  # every process started, to reap

    def engine_address(self, i: int) -> str:
        return f"tcp://{self.engine_hosts[i].ip}:{ENGINE_PORT}"

    @property
    def curve_flags(self) -> tuple[str, str]:
        """The CurveZMQ keys every engine and gateway holds (made by the fixture)."""
        return "--engine-curve-dir", str(self.log_dir / "curve")

    def start_engine(self, i: int) -> HostedServer:
        args = ["engine", "--address", self.engine_address(i), "--redis-url", self.redis.url, *self.curve_flags]
        return self._start(self.engine_hosts[i], f"engine-{i}", [*args, *NULL_ENGINE], port=0)

    def start_gateway(self, i: int) -> HostedServer:
        args = ["gateway", "--redis-url", self.redis.url, *self.curve_flags, *GATEWAY_FLAGS]
        return self._start(self.gateway_hosts[i], f"gateway-{i}", args, port=GATEWAY_PORT)

    def _start(self, host: Host, name: str, args: list[str], port: int) -> HostedServer:
        with self.net.inside(host):  # the process is born in the host's namespace
            server = launch(args, self.log_dir / f"{name}.log", port=port, env=clean_environment(), cls=HostedServer)
        server.ip = host.ip
        self.launched.append(server.process)
        return server

    def take_away(self, host: Host) -> float:
        """Pull the host's cable, then kill its processes (so their FINs go nowhere); when it went."""
        self.net.unplug(host)
        self.net.kill_processes(host)
        return time.monotonic()

    def wait_serving(self, engines: int, timeout: float) -> None:
        """Until every live gateway's /health says ``engines`` engines serve (from the client's host)."""
        for gateway in self.gateways:
            if gateway.process.poll() is None:
                wait_for(
                    lambda g=gateway: _serving(g) == engines,
                    timeout=timeout,
                    interval=0.2,
                    message=f"{gateway.ip} to serve {engines} engines",
                )


def _serving(gateway: HostedServer) -> int:
    """How many engines the gateway's /health says serve (-1 when it does not answer)."""
    try:
        return httpx.get(f"{gateway.url}/health", timeout=5).json().get("engines_serving", -1)
    except httpx.HTTPError:
        return -1


@pytest.fixture(scope="module")
def hosts(tmp_path_factory) -> Iterator[Hosts]:
    if why := Network.unavailable():
        pytest.skip(f"multi-host test: {why}")
    net = Network.create()
    launched: list[subprocess.Popen] = []
    try:
        log_dir = tmp_path_factory.mktemp("multi-host")
        make_keys(log_dir / "curve")
        redis_host, e0, e1, g0, g1, client = (net.host(n) for n in ("redis", "e0", "e1", "g0", "g1", "client"))
        with net.inside(redis_host):
            store = RedisServer(log_dir / "redis", host=redis_host.ip).start()
        launched.append(store.process)
        cluster = Hosts(net, log_dir, redis_host, [e0, e1], [g0, g1], client, store, launched=launched)
        cluster.engines = [cluster.start_engine(0), cluster.start_engine(1)]
        cluster.gateways = [cluster.start_gateway(0), cluster.start_gateway(1)]
        with net.inside(client):
            wait_healthy(*cluster.gateways, timeout=180)
            cluster.wait_serving(2, timeout=30)
        yield cluster
    finally:
        net.teardown()  # kills every process in the namespaces, Redis included
        for process in launched:
            process.wait(10)


@pytest.fixture(autouse=True)
def on_the_client_host(hosts: Hosts) -> Iterator[None]:
    with hosts.net.inside(hosts.client):
        yield


# -- talking to the gateways ------------------------------------------------------------------


def _conversation(sid: str, turns: int) -> list[dict]:
    """A growing agent conversation; the session's name opens it, so no two sessions share a prefix block."""
    messages = [{"role": "system", "content": f"Session {sid}. You plan, then call tools. " * 25}]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"Step {turn}: go on."})
        if turn < turns - 1:
            messages.append({"role": "assistant", "content": f"Done with step {turn}."})
    return messages


async def _turn(client: httpx.AsyncClient, gateway: HostedServer, sid: str, turn: int) -> httpx.Response:
    body = chat_body(3, stream=False, messages=_conversation(sid, turn + 1))
    return await client.post(f"{gateway.url}/v1/chat/completions", json=body, headers={**USER, "X-Session-Id": sid})


async def _bound_engine(client: httpx.AsyncClient, gateway: HostedServer, sid: str) -> str:
    """The engine the session is bound to (written by the gateway's background writer: waited for)."""
    with anyio.fail_after(5):
        while True:
            r = await client.get(f"{gateway.url}/v1/sessions/{sid}", headers=USER)
            assert r.status_code == 200, r.text
            if r.json()["engine"]:
                return r.json()["engine"]
            await anyio.sleep(0.05)


async def _stateless(client: httpx.AsyncClient, gateway: HostedServer) -> httpx.Response:
    return await client.post(f"{gateway.url}/v1/chat/completions", json=chat_body(3, stream=False), headers=USER)


async def _engines_in_flight(client: httpx.AsyncClient, gateway: HostedServer, ids: set[str]) -> dict[str, str]:
    """request id -> engine of the requests ``ids`` (the cluster-wide registry in Redis), once all are listed."""
    with anyio.fail_after(10):
        while True:
            r = await client.get(f"{gateway.url}/v1/requests", headers=ADMIN)
            assert r.status_code == 200, r.text
            listed = {client_id(item["id"]): item["engine"] for item in r.json()["data"]}  # filed under the key
            found = {request_id: engine for request_id, engine in listed.items() if request_id in ids}
            if set(found) == ids:
                return found
            await anyio.sleep(0.05)


def _ending(recorder: StreamRecorder) -> dict:
    """The last event before ``[DONE]`` of a stream: its error body, or its finish chunk."""
    payloads = parse_sse(recorder.raw)
    assert payloads[-1] == "[DONE]", payloads[-3:]
    return json.loads(payloads[-2])


async def _started(recorders: list[StreamRecorder], timeout: float = 30) -> None:
    with anyio.fail_after(timeout):
        while any(r.events < 2 for r in recorders):
            refused = [r.raw for r in recorders if r.status not in (None, 200)]
            assert not refused, refused
            await anyio.sleep(0.02)


# -- the tests ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_sessions_keep_their_engine_and_its_prefix_across_both_gateways(hosts: Hosts):
    """Four sessions, each turn through the other gateway: a session stays on the engine of its
    first turn, and every later turn finds its conversation in that engine's prefix cache."""
    a, b = hosts.gateways
    bound: dict[str, str] = {}
    async with httpx.AsyncClient(timeout=30) as client:
        for sid in ("s0", "s1", "s2", "s3"):
            previous_prompt = 0
            for turn in range(4):
                gateway = (a, b)[(turn + int(sid[1])) % 2]
                r = await _turn(client, gateway, sid, turn)
                assert r.status_code == 200, r.text
                usage = r.json()["usage"]
                cached = usage["prompt_tokens_details"]["cached_tokens"]
                if turn == 0:
                    assert cached == 0, usage  # its own prefix: nothing cached anywhere yet
                else:
                    assert cached >= previous_prompt - 32, (sid, turn, usage)  # all but the last blocks
                previous_prompt = usage["prompt_tokens"]
                engine = await _bound_engine(client, gateway, sid)
                assert bound.setdefault(sid, engine) == engine, f"{sid} moved at turn {turn}"
    assert set(bound.values()) == {hosts.engine_address(0), hosts.engine_address(1)}, bound  # both engines used


@pytest.mark.anyio
async def test_an_engine_host_lost_then_back(hosts: Hosts):
    """An engine's host goes (cable and processes): its streams end with an error event within the
    heartbeat timeout, the other engine's streams finish, requests sent meanwhile are answered
    (none hangs), and new requests, its sessions' too, go to the other engine. Back, the engine
    registers again and gets traffic without a gateway restart."""
    a, b = hosts.gateways
    async with httpx.AsyncClient(timeout=httpx.Timeout(60, read=30)) as client:
        r = await _turn(client, a, "lost-engine", 0)
        assert r.status_code == 200, r.text
        victim = await _bound_engine(client, a, "lost-engine")
        lost = [hosts.engine_address(i) for i in (0, 1)].index(victim)
        survivor = hosts.engine_address(1 - lost)

        streams = {f"long-{i}": StreamRecorder() for i in range(8)}
        async with anyio.create_task_group() as tasks:
            for i, (rid, recorder) in enumerate(streams.items()):
                tasks.start_soon(
                    recorder.run,
                    client,
                    f"{(a, b)[i % 2].url}/v1/chat/completions",
                    chat_body(LONG),
                    {**USER, "X-Request-Id": rid},
                )
            await _started(list(streams.values()))
            placed = await _engines_in_flight(client, a, set(streams))
            assert set(placed.values()) == {victim, survivor}, placed  # least loaded: both take some

            gone = hosts.take_away(hosts.engine_hosts[lost])
            answered: dict[str, tuple[int, float]] = {}

            async def meanwhile(gateway: HostedServer) -> None:
                started = time.monotonic()
                response = await _stateless(client, gateway)
                answered[gateway.ip] = (response.status_code, time.monotonic() - started)

            for gateway in (a, b):
                tasks.start_soon(meanwhile, gateway)
        for rid, recorder in streams.items():
            ending = _ending(recorder)
            if placed[rid] == victim:
                assert "error" in ending, (rid, ending)
                assert recorder.times[-1] - gone < HEARTBEAT_TIMEOUT_S + 3, (rid, recorder.times[-1] - gone)
            else:
                assert ending["choices"][0]["finish_reason"] == "length", (rid, ending)
        for ip, (status, took) in answered.items():  # routed before the loss was known: answered, not hung
            assert status in (200, 502, 503) and took < HEARTBEAT_TIMEOUT_S + 3, (ip, status, took)

        hosts.wait_serving(1, timeout=ENGINE_TTL_S + 5)
        for gateway in (a, b):
            assert (await _stateless(client, gateway)).status_code == 200
        r = await _turn(client, b, "lost-engine", 1)  # its engine is gone: the session moves
        assert r.status_code == 200, r.text
        assert await _bound_engine(client, b, "lost-engine") == survivor

        hosts.net.plug(hosts.engine_hosts[lost])
        hosts.engines[lost] = hosts.start_engine(lost)
        hosts.wait_serving(2, timeout=120)
        fresh = {f"fresh-{i}": StreamRecorder() for i in range(6)}
        async with anyio.create_task_group() as tasks:
            for i, (rid, recorder) in enumerate(fresh.items()):
                tasks.start_soon(
                    recorder.run,
                    client,
                    f"{(a, b)[i % 2].url}/v1/chat/completions",
                    chat_body(200),
                    {**USER, "X-Request-Id": rid},
                )
            await _started(list(fresh.values()))
            assert victim in (await _engines_in_flight(client, b, set(fresh))).values()  # back in service
        assert all(_ending(r)["choices"][0]["finish_reason"] == "length" for r in fresh.values())


@pytest.mark.anyio
async def test_the_redis_host_away(hosts: Hosts):
    """Redis's host unreachable for 12 s (the issue's 10 s, and past the engines' record TTL, so
    their records surely expire meanwhile): requests without a session keep working through both
    gateways, session requests fail fast with a 503; once it is back everything works again,
    sessions as they were, without restarting anything, and no gateway drops an engine whose
    record expired only because Redis was away (it did, before ``gateway.engines.discovery``'s grace)."""
    a, b = hosts.gateways
    async with httpx.AsyncClient(timeout=30) as client:
        r = await _turn(client, a, "through-outage", 0)
        assert r.status_code == 200, r.text
        engine = await _bound_engine(client, a, "through-outage")

        hosts.net.unplug(hosts.redis_host)
        away_until = time.monotonic() + ENGINE_TTL_S + 2
        turn = 1
        while time.monotonic() < away_until:
            for gateway in (a, b):
                r = await _stateless(client, gateway)
                assert r.status_code == 200, (gateway.ip, r.text)
                started = time.monotonic()
                r = await _turn(client, gateway, "through-outage", turn)
                took = time.monotonic() - started
                assert r.status_code == 503 and r.json()["error"]["code"] == "redis_unavailable", r.text
                assert took < 3, f"a session request took {took:.1f} s to fail"  # two 1 s socket timeouts at most
            await anyio.sleep(0.5)
        hosts.net.plug(hosts.redis_host)

        back = time.monotonic()
        announced = redis.Redis.from_url(hosts.redis.url, socket_timeout=2)
        try:
            # Until the engines have announced themselves again, and a little after: both gateways
            # keep both engines and serve, and session requests come back within seconds.
            renewed = None
            while renewed is None or time.monotonic() - renewed < 2:
                for gateway in (a, b):
                    assert _serving(gateway) == 2, gateway.ip
                    assert (await _stateless(client, gateway)).status_code == 200, gateway.ip
                if renewed is None and _announced(announced) == 2:
                    renewed = time.monotonic()
                assert time.monotonic() - back < 15, "the engines did not announce themselves again"
                await anyio.sleep(0.2)
        finally:
            announced.close()
        for gateway in (a, b):
            with anyio.fail_after(10):
                while (r := await _turn(client, gateway, "through-outage", turn)).status_code != 200:
                    await anyio.sleep(0.2)
            turn += 1
            assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
        assert await _bound_engine(client, b, "through-outage") == engine  # the session as it was
    assert all(server.process.poll() is None for server in hosts.engines + hosts.gateways)  # nothing restarted


def _announced(db: redis.Redis) -> int:
    """How many engine records the registry holds (0 while Redis cannot be read)."""
    try:
        return len(db.keys("agentgate:engine:*"))
    except redis.RedisError:
        return 0


@pytest.mark.anyio
async def test_a_gateway_host_lost_leaves_the_other_gateways_clients_alone(hosts: Hosts):
    """Gateway A's host goes mid-stream: B's streams finish untouched, and B serves new requests
    and sessions (their prefix still cached on their engine). A's host back, A serves them too."""
    a, b = hosts.gateways
    async with httpx.AsyncClient(timeout=httpx.Timeout(30, read=5)) as client:
        r = await _turn(client, a, "gateway-lost", 0)
        assert r.status_code == 200, r.text
        on_b = [StreamRecorder() for _ in range(4)]
        on_a = [StreamRecorder() for _ in range(2)]
        failed_on_a: list[BaseException] = []

        async def through_a(recorder: StreamRecorder) -> None:
            try:
                await recorder.run(client, f"{a.url}/v1/chat/completions", chat_body(LONG), USER)
            except httpx.HTTPError as exc:
                failed_on_a.append(exc)

        async with anyio.create_task_group() as tasks:
            for recorder in on_b:
                tasks.start_soon(recorder.run, client, f"{b.url}/v1/chat/completions", chat_body(500), USER)
            for recorder in on_a:
                tasks.start_soon(through_a, recorder)
            await _started(on_b + on_a)
            hosts.take_away(hosts.gateway_hosts[0])
            r = await _turn(client, b, "gateway-lost", 1)
            assert r.status_code == 200, r.text
            assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
            assert (await _stateless(client, b)).status_code == 200
        assert all(_ending(r)["choices"][0]["finish_reason"] == "length" for r in on_b)
        assert len(failed_on_a) == 2  # A's clients see their connection go silent (their read timeout)

        hosts.net.plug(hosts.gateway_hosts[0])
        hosts.gateways[0] = a = hosts.start_gateway(0)
        wait_healthy(a)  # nothing in flight: blocking the loop is harmless
        hosts.wait_serving(2, timeout=30)  # until then a session of the engine it lacks would move
        r = await _turn(client, a, "gateway-lost", 2)
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
