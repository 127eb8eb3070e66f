"""The Responses API's WebSocket mode and ``POST /v1/responses/compact`` with the openai SDK
(``client.responses.connect()``, ``client.responses.compact``) as their users write them,
against the live null server (API keys, its embedded Redis: fast, random text), and once
against the default model (``model_server``): a compacted window continued over the socket,
whose text is the HTTP route's, token for token."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
import websockets
from websockets.sync.client import connect

from agentgate.gateway.http.websocket import INBOX_EVENTS, INBOX_FULL
from agentgate.gateway.responses_api import items as it
from agentgate.gateway.state.sealing import COMPACTION, Sealer
from tests.support.servers import ALLOWED_ORIGIN, SEALING_KEY, USER_KEY, USER_KEY_2, bearer

SEALER = Sealer([SEALING_KEY])  # the null server's (AGENTGATE_SEALING_KEY)

MODEL = "SmolLM2-135M-Instruct"
TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")


@pytest.fixture
def client(null):
    with openai.OpenAI(base_url=f"{null.url}/v1", api_key=USER_KEY, max_retries=0) as c:
        yield c


def turn(connection, **body) -> list:
    """Send one ``response.create`` and read its events up to the last one."""
    connection.response.create(model=MODEL, **body)
    events = []
    for event in connection:
        events.append(event)
        if event.type in TERMINAL:
            return events
    raise AssertionError("the socket closed before the turn's last event")


def raw_turn(socket, body: dict) -> list[dict]:
    """The same over a bare socket (events the SDK would not send)."""
    socket.send(json.dumps(body))
    events = []
    while not events or events[-1]["type"] not in TERMINAL:
        events.append(json.loads(socket.recv(timeout=30)))
    return events


def ws_url(server) -> str:
    return server.url.replace("http://", "ws://") + "/v1/responses"


def test_a_socket_turn_sends_the_sse_streams_events_and_is_stored(client, null):
    with client.responses.connect() as connection:
        events = turn(connection, input="Say hello.", max_output_tokens=8, temperature=0)
    final = events[-1].response
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert final.status == "incomplete" and final.usage.output_tokens == 8  # the null runner never stops early
    # one core: the HTTP stream of the same request sends the same events, in the same order
    sse = client.responses.create(model=MODEL, input="Say hello.", max_output_tokens=8, temperature=0, stream=True)
    assert [e.type for e in sse] == [e.type for e in events]
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert client.responses.retrieve(final.id).output_text == text  # stored before its last event


def test_continuations_on_the_socket_and_store_false_kept_by_that_connection_only(client):
    with client.responses.connect() as connection:
        [*_, first] = turn(connection, input="The code word is cobalt.", store=False, max_output_tokens=4)
        [*_, second] = turn(
            connection, input="What is it?", store=False, previous_response_id=first.response.id, max_output_tokens=4
        )
        assert second.response.previous_response_id == first.response.id
        # the second prompt holds the first turn (input and reply), then the new input
        assert second.response.usage.input_tokens > first.response.usage.total_tokens
    with client.responses.connect() as connection:  # a new connection keeps nothing
        [error] = turn(connection, input="And now?", store=False, previous_response_id=first.response.id)
        assert (error.status, error.error.code, error.error.param) == (
            400,
            "previous_response_not_found",
            "previous_response_id",
        )
        [*_, fresh] = turn(connection, input="Start again.", store=False, max_output_tokens=4)  # still open
        assert fresh.type == "response.incomplete"
    with pytest.raises(openai.BadRequestError) as caught:  # never stored: HTTP does not know it either
        client.responses.create(model=MODEL, input="Hi", previous_response_id=first.response.id)
    assert caught.value.code == "previous_response_not_found"


def test_generate_false_warms_up_a_response_to_continue_from(client):
    with client.responses.connect() as connection:
        connection.send(
            {
                "type": "response.create",
                "model": MODEL,
                "store": False,
                "generate": False,
                "input": "Prepare to answer with exactly: warmed",
            }
        )
        warm = next(e for e in connection if e.type in TERMINAL)
        assert warm.type == "response.completed" and warm.response.output == []
        assert warm.response.usage.input_tokens > 0  # its prompt was computed
        [*_, done] = turn(
            connection, input="Go.", store=False, previous_response_id=warm.response.id, max_output_tokens=4
        )
        assert done.response.usage.input_tokens > warm.response.usage.input_tokens
        assert done.response.usage.input_tokens_details.cached_tokens > 0  # the warm-up's prefix, from the cache


def test_a_failed_continuation_evicts_what_it_continued(client):
    with client.responses.connect() as connection:
        [*_, first] = turn(connection, input="Remember: ember.", store=False, max_output_tokens=4)
        orphan = [{"type": "function_call_output", "call_id": "call_missing", "output": "no such call"}]
        [failed] = turn(connection, input=orphan, store=False, previous_response_id=first.response.id)
        assert (failed.status, failed.error.param) == (400, "input") and "call_missing" in failed.error.message
        [retry] = turn(connection, input="Again.", store=False, previous_response_id=first.response.id)
        assert retry.error.code == "previous_response_not_found"


def test_bad_events_get_openai_error_events_and_the_connection_stays(null):
    with connect(ws_url(null), additional_headers=bearer(USER_KEY)) as socket:
        for sent, param, code in [
            ("not json", None, "invalid_json"),
            ({"type": "response.cancel"}, "type", "unsupported_event_type"),
            ({"type": "response.create", "input": "Hi", "background": True}, "background", "invalid_request_error"),
            ({"type": "response.create", "input": 5}, "input", "invalid_type"),
            (
                {"type": "response.create", "input": [{"type": "compaction", "encrypted_content": "forged"}]},
                "input[0].encrypted_content",
                "invalid_request_error",
            ),
        ]:
            socket.send(sent if isinstance(sent, str) else json.dumps(sent))
            error = json.loads(socket.recv(timeout=30))
            assert error["type"] == "error" and error["status"] == 400, error
            assert (error["error"]["type"], error["error"]["param"], error["error"]["code"]) == (
                "invalid_request_error",
                param,
                code,
            )
        events = raw_turn(socket, {"type": "response.create", "input": "Hi", "max_output_tokens": 3})
        assert events[-1]["type"] == "response.incomplete"


def test_the_socket_needs_an_api_key(null):
    for headers in ({}, bearer("wrong-key")):
        with pytest.raises(websockets.InvalidStatus) as refused:
            connect(ws_url(null), additional_headers=headers)
        response = refused.value.response
        assert response.status_code == 401
        assert json.loads(response.body)["error"]["type"] == "authentication_error"
    with connect(ws_url(null), additional_headers=bearer(USER_KEY_2)) as socket:
        assert raw_turn(socket, {"type": "response.create", "input": "Hi", "max_output_tokens": 2})[-1]["type"] == (
            "response.incomplete"
        )


def test_compact_answers_the_user_messages_then_a_compaction_item_the_next_turn_reads(client):
    stored = client.responses.create(model=MODEL, input="We launch on Tuesday.", max_output_tokens=4)
    compacted = client.responses.compact(
        model=MODEL,
        previous_response_id=stored.id,
        prompt_cache_key="compact-test",
        input=[{"role": "assistant", "content": "Noted."}, {"role": "user", "content": "Tell support first."}],
    )
    assert compacted.object == "response.compaction" and compacted.id.startswith("resp_")
    *users, compaction = compacted.output
    assert [(u.role, u.content[0].text) for u in users] == [
        ("user", "We launch on Tuesday."),
        ("user", "Tell support first."),
    ]
    assert compaction.type == "compaction" and compaction.id.startswith("cmp_")
    summary = it.compaction_summary(compaction.encrypted_content, "encrypted_content", SEALER)
    assert compacted.usage.output_tokens > 0 and summary  # the model wrote it
    # the null runner never ends a reply early: its budget cut the summary, and the item says so
    assert compaction.model_dump()["status"] == "incomplete" and _payload(compaction.encrypted_content)["cut"]
    assert summary.endswith(it.CUT_SUMMARY_NOTE) and _payload(compaction.encrypted_content)["dropped_messages"] == 0
    # the window, as it came, starts a new chain: the compaction is read back as the summary
    window = [item.model_dump(exclude_none=True) for item in compacted.output]
    follow = client.responses.create(
        model=MODEL, input=[*window, {"role": "user", "content": "Go on."}], max_output_tokens=4
    )
    assert follow.status == "incomplete" and follow.previous_response_id is None
    assert [i.type for i in client.responses.input_items.list(follow.id, order="asc").data] == [
        "message",
        "message",
        "compaction",
        "message",
    ]
    assert it.input_messages(window, SEALER)[0][-1] == {"role": "assistant", "content": it.SUMMARY_PREFIX + summary}


def _payload(encrypted_content: str) -> dict:
    return json.loads(SEALER.open(COMPACTION, encrypted_content))


def test_compact_near_the_context_limit_leaves_the_oldest_turns_out(null):
    """Issue 35: a conversation that leaves no room for a summary in the context (1,024 tokens here)
    is summarized from its latest turns that do, whole turns from a user message on, and the item
    counts the messages left out; not a 400 naming max_tokens, which the client did not send."""
    url = f"{null.url}/v1/responses/compact"
    turns = []
    for k in range(6):  # ~6 x 160 tokens: more than the context leaves a summary
        turns += [
            {"role": "user", "content": f"Fact {k}: " + "alpha beta " * 70},
            {"role": "assistant", "content": f"Noted fact {k}."},
        ]
    r = httpx.post(url, json={"model": MODEL, "input": turns}, headers=null.headers, timeout=60)
    assert r.status_code == 200, r.text
    *users, compaction = r.json()["output"]
    assert [u["content"][0]["text"][:7] for u in users] == [f"Fact {k}:" for k in range(6)]  # the whole window
    payload = _payload(compaction["encrypted_content"])
    assert payload["dropped_messages"] > 0 and payload["dropped_messages"] % 2 == 0  # whole turns
    usage = r.json()["usage"]
    assert usage["output_tokens"] >= 64 and usage["input_tokens"] + usage["output_tokens"] <= 1024
    # the fewest left out: one turn more would have fitted nothing
    assert payload["dropped_messages"] < len(turns)
    # not even the last turn leaves room: a 400 naming input, which the client sent
    huge = [{"role": "user", "content": "alpha beta " * 600}]
    r = httpx.post(url, json={"model": MODEL, "input": huge}, headers=null.headers, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "input", r.text


def test_compact_refuses_what_it_cannot_compact(null):
    url = f"{null.url}/v1/responses/compact"
    for body, param in [
        ({"input": "Compact this."}, "model"),
        ({"model": MODEL}, "input"),
        ({"model": MODEL, "input": [{"type": "function_call_output", "call_id": "c1", "output": "x"}]}, "input"),
    ]:
        r = httpx.post(url, json=body, headers=null.headers, timeout=30)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    theirs = httpx.post(
        f"{null.url}/v1/responses",
        json={"model": MODEL, "input": "Hi", "max_output_tokens": 2},
        headers=bearer(USER_KEY_2),
        timeout=30,
    ).json()
    r = httpx.post(url, json={"model": MODEL, "previous_response_id": theirs["id"]}, headers=null.headers, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["code"] == "previous_response_not_found"
    assert httpx.post(url, json={"model": MODEL, "input": "Hi"}, timeout=30).status_code == 401


def test_a_compacted_window_continues_over_the_socket_with_the_http_routes_text(model_server):
    """The default model: it writes the summary, and a turn on the socket says, greedily, exactly what
    the same request says over HTTP."""
    with openai.OpenAI(base_url=f"{model_server.url}/v1", api_key="unused", max_retries=0) as client:
        compacted = client.responses.compact(
            model=MODEL,
            input=[
                {"role": "user", "content": "Remember the code word: slate."},
                {"role": "assistant", "content": "OK."},
            ],
        )
        assert compacted.output[-1].type == "compaction" and compacted.usage.output_tokens > 0
        window = [item.model_dump(exclude_none=True) for item in compacted.output]
        body = {
            "input": [*window, {"role": "user", "content": "What is the code word?"}],
            "store": False,
            "max_output_tokens": 16,
            "temperature": 0,
        }
        with client.responses.connect() as connection:
            [*_, done] = turn(connection, **body)
        over_http = client.responses.create(model=MODEL, **body)
    assert done.type in ("response.completed", "response.incomplete") and done.response.output_text
    assert done.response.output_text == over_http.output_text


def test_the_handshake_checks_the_origin_as_a_browser_sends_it(null):
    """CORS does not cover WebSockets: a page of another origin opened in the user's browser would
    drive the server. A browser always sends ``Origin``: one not in --allowed-origins gets 403; an
    allowed one, and a program that sends none, connect."""
    for origin in ("http://evil.example", "null", f"{ALLOWED_ORIGIN}.evil.example"):
        with pytest.raises(websockets.InvalidStatus) as refused:
            connect(ws_url(null), additional_headers=bearer(USER_KEY), origin=origin)
        response = refused.value.response
        assert response.status_code == 403, origin
        error = json.loads(response.body)["error"]
        assert error["code"] == "origin_not_allowed" and "--allowed-origins" in error["message"]
    for origin in (ALLOWED_ORIGIN, None):
        with connect(ws_url(null), additional_headers=bearer(USER_KEY), origin=origin) as socket:
            events = raw_turn(socket, {"type": "response.create", "input": "Hi", "max_output_tokens": 2})
            assert events[-1]["type"] == "response.incomplete"


def test_a_full_inbox_closes_the_socket_with_a_code_that_says_so(null):
    """Events that wait behind the running turn are bounded: one past INBOX_EVENTS closes the
    connection (1008) instead of queueing without end."""
    long_turn = json.dumps({"type": "response.create", "input": "Hi", "max_output_tokens": 900})
    with connect(ws_url(null), additional_headers=bearer(USER_KEY)) as socket:
        for _ in range(INBOX_EVENTS + 3):  # one runs, INBOX_EVENTS wait, the next overflows
            socket.send(long_turn)
        with pytest.raises(websockets.ConnectionClosed) as closed:
            while True:
                socket.recv(timeout=30)
    assert closed.value.rcvd.code == INBOX_FULL == 1008
    assert f"more than {INBOX_EVENTS} events wait" in closed.value.rcvd.reason
