"""Two tenants, one attacking the other (issue 50): key A does to key B's work everything a client
can, and B to A's (each test runs both directions), streamed and whole. One live ``agentgate serve``
of the default model (SmolLM2-135M on the sync runner) with its embedded Redis, two user keys, an
admin key and ``--prefix-cache-isolation key``.

- Request and session ids: the attacker sends the victim's ``X-Request-Id`` and ``X-Session-Id``
  while the victim's request runs; its own request runs to its end (no 409 that tells it the id
  exists), its session is its own (no trace of the victim's request or words), and nothing it can
  do by that id ends the victim's request: dropping its own request of the id, deleting its
  session of the id, the operator routes (admin only: a user key's 403).
- Stored responses: the victim's, finished or running in the background, is a 404 to the attacker
  on every route (the cancel and DELETE of a running one leave it running), and a
  ``previous_response_id`` to it (HTTP, streamed or whole, a compaction, the WebSocket mode) is
  ``previous_response_not_found``.
- The prefix cache under ``--prefix-cache-isolation key``: the attacker's identical prompt gets no
  cached tokens from the victim's, while each key reuses its own
  (``usage.prompt_tokens_details.cached_tokens``).
- Attained service per key: a key that rotates its ``user``, ``prompt_cache_key`` or session id
  (the gateway's program tags, ``tenant_job``) does not outrank the other key. Deterministic, so on
  the engine core with the null runner (a live measurement would time a queue on two loaded cores).

Tested elsewhere, not here: on the null runner, an operator aborting one key's request by the id
``GET /v1/requests`` lists, one session id of two keys as two sessions for the admin, the 404's
words, ``cache_salt`` (``tests/gateway/test_tenants.py``); the grammar cache per salt
(``tests/engine/test_grammar_fairness.py``); user keys on admin routes
(``tests/gateway/test_gateway_auth_cors.py``); MCP URL dot segments and the client's ``Host``
(``tests/gateway/mcp/test_mcp_allowlist.py``); drafts per tenant
(``tests/engine/speculative/test_proposers.py::test_drafts_come_only_from_the_same_tenants_outputs``);
tool-gap laws and fabricated tool tails (``tests/engine/core/test_retention.py``); the key's rank
with memory (``tests/engine/core/test_program_scheduling.py``); the engine's own arrival clock
(``tests/engine/core/test_engine_process.py``); streams that fail (``tests/gateway/test_stream_failures.py``).
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest
from websockets.sync.client import connect

from agentgate.engine.sampling_params import SamplingParams
from agentgate.engine.scheduling.programs.table import SERVICE_QUANTUM
from agentgate.gateway.context import RequestContext, filed_id
from agentgate.gateway.dispatch import tenant_job
from agentgate.gateway.job import Job
from agentgate.gateway.programs.tags import program_tag
from agentgate.gateway.state.key_digests import key_digest
from tests.engine.core.test_program_scheduling import admission_order, big_core
from tests.engine.core.test_retention import history, run
from tests.support.http import parse_sse
from tests.support.servers import ADMIN_KEY, USER_KEY, USER_KEY_2, LiveServer, bearer, start_server

MODEL = "SmolLM2-135M-Instruct"
WS_TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")
LONG = 900  # a victim's request that runs while the attacker acts (it is ended by its own key)
SHORT = 4


@dataclass(frozen=True)
class Keys:
    """Who attacks whom: two API keys."""

    attacker_key: str
    victim_key: str

    @property
    def attacker(self) -> dict[str, str]:
        return bearer(self.attacker_key)

    @property
    def victim(self) -> dict[str, str]:
        return bearer(self.victim_key)


DIRECTIONS = [
    pytest.param(Keys(USER_KEY, USER_KEY_2), id="A-attacks-B"),
    pytest.param(Keys(USER_KEY_2, USER_KEY), id="B-attacks-A"),
]
STREAMED = [pytest.param(True, id="streamed"), pytest.param(False, id="whole")]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    flags = ["--runner", "sync", "--dtype", "float32", "--max-model-len", "1024", "--max-num-seqs", "4"]
    live = start_server(
        tmp_path_factory.mktemp("two-tenants"),
        *flags,
        *("--speculative", "off"),  # its start-up check takes most of a minute here; drafts are tested apart
        *("--prefix-cache-isolation", "key"),
        env={"AGENTGATE_API_KEY": f"{USER_KEY},{USER_KEY_2}", "AGENTGATE_ADMIN_KEY": ADMIN_KEY},
    )
    live.admin_headers = bearer(ADMIN_KEY)
    yield live
    live.stop()


def _unique(what: str) -> str:
    """An id no other test sends."""
    return f"{what}-{uuid.uuid4().hex[:10]}"


@dataclass
class Reply:
    """One chat completion's reply, read whole or from its stream."""

    status: int
    request_id: str | None  # the X-Request-Id it came back with
    finish: str | None = None
    text: str = ""
    usage: dict[str, Any] | None = None
    body: str = ""


async def chat(client: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str]) -> Reply:
    """POST a chat completion and read its reply to the end (as SSE when ``body["stream"]``)."""
    async with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response:
        raw = (await response.aread()).decode()
    reply = Reply(response.status_code, response.headers.get("X-Request-Id"), body=raw)
    if reply.status != 200:
        return reply
    if not body.get("stream"):
        whole = json.loads(raw)
        [choice] = whole["choices"]
        reply.finish, reply.text, reply.usage = choice["finish_reason"], choice["message"]["content"], whole["usage"]
        return reply
    for payload in parse_sse(raw)[:-1]:
        chunk = json.loads(payload)
        assert "error" not in chunk, chunk
        for choice in chunk["choices"]:
            reply.text += choice["delta"].get("content") or ""
            reply.finish = choice["finish_reason"] or reply.finish
        reply.usage = chunk.get("usage") or reply.usage
    return reply


def _body(max_tokens: int, stream: bool, content: str, role: str = "user") -> dict[str, Any]:
    """A chat request of ``max_tokens`` tokens (``ignore_eos``), its usage in its stream too."""
    extra = {"stream_options": {"include_usage": True}} if stream else {}
    messages = [{"role": role, "content": content}]
    return {"messages": messages, "max_tokens": max_tokens, "stream": stream, "ignore_eos": True, **extra}


async def in_flight(client: httpx.AsyncClient, server: LiveServer, request_id: str) -> list[str]:
    """The filed ids (``GET /v1/requests``, the admin's) of the requests in flight a client sent as ``request_id``."""
    r = await client.get("/v1/requests", headers=server.admin_headers)
    assert r.status_code == 200, r.text
    return [e["id"] for e in r.json()["data"] if e["id"].endswith(f".{request_id}")]


async def until_in_flight(client: httpx.AsyncClient, server: LiveServer, request_id: str, count: int) -> list[str]:
    """:func:`in_flight` once it lists ``count`` requests (at most a minute)."""
    with anyio.fail_after(60):
        while len(found := await in_flight(client, server, request_id)) != count:
            await anyio.sleep(0.05)
    return found


@pytest.mark.anyio
@pytest.mark.parametrize("stream", STREAMED)
@pytest.mark.parametrize("keys", DIRECTIONS)
async def test_the_victims_request_and_session_ids_are_its_own_whatever_the_attacker_sends(server, keys, stream):
    rid, session, secret = _unique("same-id"), _unique("same-session"), _unique("victim's words")
    same = {"X-Request-Id": rid, "X-Session-Id": session}
    victim: list[Reply] = []
    async with httpx.AsyncClient(base_url=server.url, timeout=120) as client, anyio.create_task_group() as tasks:

        async def run_victim() -> None:
            victim.append(await chat(client, _body(LONG, stream, secret), {**keys.victim, **same}))

        tasks.start_soon(run_victim)
        [victims] = await until_in_flight(client, server, rid, 1)

        # the attacker's own request of that id: served to its end, as a fresh id would be
        mine = await chat(client, _body(SHORT, stream, "Hello"), {**keys.attacker, "X-Request-Id": rid})
        assert mine.status == 200 and mine.request_id == rid, mine.body
        assert mine.finish == "length" and mine.usage["completion_tokens"] == SHORT
        await until_in_flight(client, server, rid, 1)  # the victim's alone again

        # one of both ids the attacker drops mid-way: its abort on disconnect ends its own request only
        async with anyio.create_task_group() as dropping:
            dropping.start_soon(chat, client, _body(LONG, stream, "Hello"), {**keys.attacker, **same})
            await until_in_flight(client, server, rid, 2)
            dropping.cancel_scope.cancel()  # the connection closes
        await until_in_flight(client, server, rid, 1)

        # its session of that id is its own: the victim's request and words are not in it
        r = await client.get(f"/v1/sessions/{session}", headers=keys.attacker)
        assert r.status_code == 200, r.text
        assert victims not in r.json()["requests_in_flight"] and secret not in r.text
        assert (await client.delete(f"/v1/sessions/{session}", headers=keys.attacker)).status_code == 200

        # the operator routes are the admin's: neither list nor abort for a user key, by either id
        assert (await client.get("/v1/requests", headers=keys.attacker)).status_code == 403
        assert (await client.get("/v1/sessions", headers=keys.attacker)).status_code == 403
        for request_id in (rid, victims):
            r = await client.post("/abort_requests", headers=keys.attacker, json={"request_ids": [request_id]})
            assert r.status_code == 403, r.text
            assert (await client.delete(f"/v1/requests/{request_id}", headers=keys.attacker)).status_code == 403

        assert not victim and await in_flight(client, server, rid) == [victims], "the attacker ended it"
        r = await client.get(f"/v1/sessions/{session}", headers=keys.victim)
        assert r.status_code == 200 and r.json()["requests_in_flight"] == [victims], r.text
        # the victim ends its own by its session (which aborts the session's requests)
        assert (await client.delete(f"/v1/sessions/{session}", headers=keys.victim)).status_code == 200
    [reply] = victim
    assert reply.status == 200 and reply.request_id == rid and reply.finish == "abort", reply.body


async def respond(client: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict]:
    """POST a response; (its status, the response: the whole reply's, a stream's last event's, or the error body)."""
    async with client.stream("POST", "/v1/responses", json=body, headers=headers) as r:
        raw = (await r.aread()).decode()
    if r.status_code != 200 or not body.get("stream"):
        return r.status_code, json.loads(raw)
    events = [json.loads(line.removeprefix("data: ")) for line in raw.splitlines() if line.startswith("data: ")]
    assert events[-1]["type"] in ("response.completed", "response.incomplete"), events[-1]
    return r.status_code, events[-1]["response"]


@pytest.mark.anyio
@pytest.mark.parametrize("stream", STREAMED)
@pytest.mark.parametrize("keys", DIRECTIONS)
async def test_the_victims_stored_responses_are_a_404_to_the_attacker_finished_or_running(server, keys, stream):
    secret = _unique("victim's words")
    async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
        status, finished = await respond(
            client, {"input": secret, "max_output_tokens": SHORT, "stream": stream}, keys.victim
        )
        assert status == 200 and finished["status"] in ("completed", "incomplete"), finished
        # one running in the background: held in place by an operator's pause (keep) while the attacker acts
        assert (await client.post("/pause?mode=keep", headers=server.admin_headers)).status_code == 200
        try:
            body = {"input": secret, "max_output_tokens": SHORT, "background": True}
            r = await client.post("/v1/responses", headers=keys.victim, json=body)
            assert r.status_code == 200, r.text
            running = r.json()
            for victims in (finished["id"], running["id"]):
                for method, path in [
                    ("GET", f"/v1/responses/{victims}"),
                    ("GET", f"/v1/responses/{victims}/input_items"),
                    ("POST", f"/v1/responses/{victims}/cancel"),
                    ("DELETE", f"/v1/responses/{victims}"),
                ]:
                    r = await client.request(method, path, headers=keys.attacker)
                    assert r.status_code == 404 and secret not in r.text, (method, path, r.text)
                body = {"input": "go on", "previous_response_id": victims, "max_output_tokens": SHORT, "stream": stream}
                status, error = await respond(client, body, keys.attacker)
                assert status == 400 and error["error"]["code"] == "previous_response_not_found", error
                body = {"model": MODEL, "previous_response_id": victims}
                r = await client.post("/v1/responses/compact", headers=keys.attacker, json=body)
                assert r.status_code == 400 and r.json()["error"]["code"] == "previous_response_not_found", r.text
            r = await client.get(f"/v1/responses/{running['id']}", headers=keys.victim)
            assert r.json()["status"] in ("queued", "in_progress"), r.text  # neither cancelled nor deleted
        finally:
            assert (await client.post("/resume", headers=server.admin_headers)).status_code == 200

        async def ended() -> dict:
            with anyio.fail_after(60):
                while (r := await client.get(f"/v1/responses/{running['id']}", headers=keys.victim)).json()[
                    "status"
                ] in (
                    "queued",
                    "in_progress",
                ):
                    await anyio.sleep(0.05)
            return r.json()

        assert (await ended())["status"] in ("completed", "incomplete")  # it ran to its own end
        r = await client.get(f"/v1/responses/{finished['id']}/input_items", headers=keys.victim)
        assert r.status_code == 200 and secret in r.text  # the attacker's DELETE deleted nothing


@pytest.mark.parametrize("keys", DIRECTIONS)
def test_over_the_websocket_mode_the_victims_response_is_not_the_attackers_to_continue(server, keys):
    def turn(headers: dict[str, str], **body: Any) -> dict[str, Any]:
        """One ``response.create`` on a new socket: its last event."""
        with connect(server.url.replace("http://", "ws://") + "/v1/responses", additional_headers=headers) as socket:
            socket.send(json.dumps({"type": "response.create", "max_output_tokens": SHORT, **body}))
            while (event := json.loads(socket.recv(timeout=60)))["type"] not in WS_TERMINAL:
                pass
        return event

    secret = _unique("victim's words")
    victims = turn(keys.victim, input=secret)["response"]["id"]
    assert turn(keys.victim, input="go on", previous_response_id=victims)["type"] != "error"  # its own: continued
    error = turn(keys.attacker, input="go on", previous_response_id=victims)
    assert error["type"] == "error" and error["error"]["code"] == "previous_response_not_found", error
    assert secret not in json.dumps(error)


@pytest.mark.anyio
@pytest.mark.parametrize("stream", STREAMED)
@pytest.mark.parametrize("keys", DIRECTIONS)
async def test_under_key_isolation_the_attacker_gets_no_cached_tokens_of_the_victims_prompt(server, keys, stream):
    # a system message of its own, opening with a fresh id: the template's default one is a prefix every request shares
    prompt = f"{uuid.uuid4()} " + " ".join(f"line {i} of an agent's system prompt." for i in range(5))
    async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:

        async def cached(headers: dict[str, str]) -> int:
            reply = await chat(client, _body(1, stream, prompt, role="system"), headers)
            assert reply.status == 200, reply.body
            return reply.usage["prompt_tokens_details"]["cached_tokens"]

        assert await cached(keys.victim) == 0
        assert await cached(keys.attacker) == 0  # the victim's prefix is not the attacker's to reuse (or time)
        assert await cached(keys.victim) > 0  # each key reuses its own
        assert await cached(keys.attacker) > 0


ROTATED = ["user", "prompt_cache_key", "session"]


@pytest.mark.parametrize("rotates", ROTATED)
@pytest.mark.parametrize("keys", DIRECTIONS)
def test_an_attacker_rotating_its_program_ids_does_not_outrank_the_victim(keys, rotates):
    """The attacker is served two levels' worth, each turn under a fresh ``user``, ``prompt_cache_key``
    or session id (program tags as the gateway makes them, the key's tenant as dispatch sets it); its
    next fresh id, sent first, starts no key afresh: the victim's new program, sent after it, goes first."""
    rng = random.Random(12)
    core = big_core(policy="program", max_num_seqs=1)

    def send(request_id: str, key: str, name: str, prompt: int) -> None:
        given = {rotates: name}
        session = filed_id(key, given["session"]) if "session" in given else None
        context = RequestContext(key=key, session_id=session)
        tag = program_tag(
            context, [], tools_offered=False, prompt_cache_key=given.get("prompt_cache_key"), user=given.get("user")
        )
        params = SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True)
        job = tenant_job(Job(request_id, 0.0, [history(rng, prompt)], params, program=tag), key, salt_by_key=False)
        [ids] = job.prompts
        core.add_request(
            job.request_id, ids, job.params, arrival_time=core.clock(), program=job.program, tenant=job.tenant
        )

    attacker, victim = key_digest(keys.attacker_key), key_digest(keys.victim_key)
    for i in range(3):
        send(f"attacker-{i}", attacker, f"rotated-{i}", SERVICE_QUANTUM // 2)
        run(core)
        core.clock.now += 0.2
    send("attacker-next", attacker, "rotated-next", 8)
    core.clock.now += 0.1
    send("victim-1", victim, "victims-own", 8)
    assert admission_order(core) == ["victim-1", "attacker-next"]
