"""Two API keys on one server: neither reads, aborts nor shares the cache of the other's work
(issue 50). Real HTTP to a live ``agentgate serve`` on the null runner (its scheduler and prefix
cache are the real ones), two user keys.

- Request ids: the same ``X-Request-Id`` from two keys is two requests (no 409 that tells one
  key of the other's id); each runs to its own end; an operator aborts one by the id
  ``GET /v1/requests`` lists, and the other runs on.
- Stored responses and sessions: another key's id reads as 404 on every route, never 403; the
  same ``X-Session-Id`` from two keys is two sessions, which the admin reads by their listed ids.
- Prefix cache: by default keys share cached prompt prefixes (``usage.prompt_tokens_details.cached_tokens``);
  ``--prefix-cache-isolation key`` salts each key's, so keys never share KV; a request's
  ``cache_salt`` salts it further either way.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import anyio
import httpx
import pytest

from tests.gateway.conftest import NULL_FLAGS
from tests.support.http import StreamRecorder, chat_body, check_chat_stream, wait_for
from tests.support.servers import USER_KEY, USER_KEY_2, LiveServer, bearer, start_server

A, B = bearer(USER_KEY), bearer(USER_KEY_2)


@pytest.fixture(scope="module")
def isolated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The null server's configuration, with ``--prefix-cache-isolation key``."""
    server = start_server(
        tmp_path_factory.mktemp("isolated"),
        *NULL_FLAGS,
        "--prefix-cache-isolation",
        "key",
        env={"AGENTGATE_API_KEY": f"{USER_KEY},{USER_KEY_2}"},
    )
    yield server
    server.stop()


def _prompt() -> str:
    """A prompt no other test sends, several KV blocks long."""
    return f"{uuid.uuid4()} " + " ".join(f"line {i} of a shared agent system prompt." for i in range(40))


def _cached(server: LiveServer, headers: dict[str, str], prompt: str, **fields: object) -> int:
    """The cached prompt tokens of one chat completion of ``prompt``."""
    # a system message of its own: the template's default one would be a prefix every test shares
    body = {"messages": [{"role": "system", "content": prompt}], "max_tokens": 2, **fields}
    r = httpx.post(f"{server.url}/v1/chat/completions", headers=headers, json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_by_default_two_keys_share_cached_prefixes(null):
    prompt = _prompt()
    assert _cached(null, A, prompt) == 0
    assert _cached(null, B, prompt) > 0  # the other key's prefix, reused


def test_under_key_isolation_two_keys_never_share_cached_prefixes(isolated):
    prompt = _prompt()
    assert _cached(isolated, A, prompt) == 0
    assert _cached(isolated, B, prompt) == 0  # B prefills its own
    assert _cached(isolated, A, prompt) > 0  # each key still reuses its own
    assert _cached(isolated, B, prompt) > 0
    # a cache_salt inside a key's isolation: only requests with the same salt (and key) share
    assert _cached(isolated, A, prompt, cache_salt="s1") == 0
    assert _cached(isolated, B, prompt, cache_salt="s1") == 0
    assert _cached(isolated, A, prompt, cache_salt="s1") > 0


def test_a_cache_salt_separates_requests_of_one_key(null):
    prompt = _prompt()
    assert _cached(null, A, prompt) == 0
    assert _cached(null, A, prompt, cache_salt="tenant-7") == 0  # another salt: not shared
    assert _cached(null, B, prompt, cache_salt="tenant-7") > 0  # the same salt: shared (isolation off)


@pytest.mark.parametrize("salt", ["", "x" * 257, 7])
def test_a_cache_salt_must_be_a_short_non_empty_string(null, salt):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "cache_salt": salt}
    r = httpx.post(f"{null.url}/v1/chat/completions", headers=A, json=body, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "cache_salt"


async def _until(predicate, timeout: float = 20.0) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.01)


def _done(recorder: StreamRecorder) -> bool:
    return recorder.raw.endswith("data: [DONE]\r\n\r\n")


@pytest.mark.anyio
async def test_one_request_id_from_two_keys_is_two_requests_and_an_abort_reaches_one(null):
    rid = f"same-{uuid.uuid4().hex[:8]}"
    url = f"{null.url}/v1/chat/completions"
    a, b, again = StreamRecorder(), StreamRecorder(), StreamRecorder()
    async with httpx.AsyncClient(timeout=60) as client, anyio.create_task_group() as tasks:
        tasks.start_soon(a.run, client, url, chat_body(900), {**A, "X-Request-Id": rid})
        await _until(lambda: a.events >= 3)
        tasks.start_soon(b.run, client, url, chat_body(300), {**B, "X-Request-Id": rid})
        await _until(lambda: b.events >= 3)
        assert b.status == 200, b.raw  # not a 409: B's id is B's own
        await again.run(client, url, chat_body(4), {**A, "X-Request-Id": rid})
        assert again.status == 409, again.raw  # A's own id still in flight: A may know that
        listed = (await client.get(f"{null.url}/v1/requests", headers=null.admin_headers)).json()["data"]
        ids = [e["id"] for e in listed if e["id"].endswith(f".{rid}")]
        assert len(ids) == 2 and len(set(ids)) == 2, listed
        a_id = ids[0]  # the list is by start: A's came first
        r = await client.delete(f"{null.url}/v1/requests/{a_id}", headers=null.admin_headers)
        assert r.status_code == 200 and r.json()["aborted"] == [a_id]
        await _until(lambda: _done(a))
        assert not _done(b), "the abort of A's request ended B's request of the same id"
        await _until(lambda: _done(b))
    assert check_chat_stream(a.payloads())["finish"] == {0: "abort"}
    assert check_chat_stream(b.payloads())["finish"] == {0: "length"}


def test_another_keys_stored_response_reads_as_404_on_every_route(null):
    with httpx.Client(base_url=null.url, timeout=60) as client:
        r = client.post("/v1/responses", headers=A, json={"input": "hi", "max_output_tokens": 4})
        assert r.status_code == 200, r.text
        rid = r.json()["id"]
        for method, path in [
            ("GET", f"/v1/responses/{rid}"),
            ("GET", f"/v1/responses/{rid}/input_items"),
            ("POST", f"/v1/responses/{rid}/cancel"),
            ("DELETE", f"/v1/responses/{rid}"),
        ]:
            r = client.request(method, path, headers=B)
            assert r.status_code == 404, (method, path, r.text)
            assert rid in r.json()["error"]["message"]  # the same words as for an id nobody has
            nobody = client.request(method, path.replace(rid, "resp_" + "0" * 32), headers=B)
            assert nobody.status_code == 404
            assert nobody.json()["error"]["message"] == r.json()["error"]["message"].replace(rid, "resp_" + "0" * 32)
        assert client.get(f"/v1/responses/{rid}", headers=A).status_code == 200  # B's DELETE deleted nothing
        r = client.post("/v1/responses", headers=B, json={"input": "go on", "previous_response_id": rid})
        assert r.status_code == 400 and r.json()["error"]["code"] == "previous_response_not_found"


def test_another_keys_session_reads_as_404(null):
    session = f"s-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=null.url, timeout=60) as client:
        r = client.post("/v1/chat/completions", headers={**A, "X-Session-Id": session}, json=chat_body(2, False))
        assert r.status_code == 200, r.text
        for method in ("GET", "DELETE"):
            r = client.request(method, f"/v1/sessions/{session}", headers=B)
            assert r.status_code == 404, (method, r.text)
        assert client.get(f"/v1/sessions/{session}", headers=A).status_code == 200


def test_one_session_id_from_two_keys_is_two_sessions_and_the_admin_reads_each_by_its_listed_id(null):
    """Issue 50: X-Session-Id is filed under the key, as request ids are: B's use of A's id opens B's own
    session (no 404 that tells B the id exists), each counts its own turns, and deleting one leaves
    the other; the admin reads and deletes any by the id GET /v1/sessions lists."""
    session = f"s-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=null.url, timeout=60) as client:
        for headers, turns in ((A, 2), (B, 1)):
            for _ in range(turns):
                r = client.post(
                    "/v1/chat/completions", headers={**headers, "X-Session-Id": session}, json=chat_body(2, False)
                )
                assert r.status_code == 200, r.text

        def turns_of(headers: dict) -> int:
            return client.get(f"/v1/sessions/{session}", headers=headers).json()["turns"]

        wait_for(lambda: (turns_of(A), turns_of(B)) == (2, 1), timeout=10, message="each key's own turns")
        assert client.get(f"/v1/sessions/{session}", headers=A).json()["id"] == session  # as the key named it
        listed = client.get("/v1/sessions", headers=null.admin_headers).json()["data"]
        filed = sorted(s["id"] for s in listed if s["id"].endswith(f".{session}"))
        assert len(filed) == 2 and all(not f.startswith(session) for f in filed), listed
        assert {client.get(f"/v1/sessions/{f}", headers=null.admin_headers).json()["turns"] for f in filed} == {1, 2}
        r = client.get(f"/v1/sessions/{session}", headers=null.admin_headers)  # two keys' sessions of that id
        assert r.status_code == 400 and r.json()["error"]["code"] == "ambiguous_session_id", r.text
        assert client.delete(f"/v1/sessions/{session}", headers=B).status_code == 200
        assert client.get(f"/v1/sessions/{session}", headers=B).status_code == 404
        assert turns_of(A) == 2  # B's delete removed B's session only
        [left] = [
            s["id"] for s in client.get("/v1/sessions", headers=null.admin_headers).json()["data"] if s["id"] in filed
        ]
        assert client.delete(f"/v1/sessions/{left}", headers=null.admin_headers).status_code == 200
        assert client.get(f"/v1/sessions/{session}", headers=A).status_code == 404
