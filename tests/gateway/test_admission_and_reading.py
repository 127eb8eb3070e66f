"""Two things done once per request (issue 47), through a gateway in this process over a
scripted engine that replies a tool call (``tests.support.scripted_engine``), with an embedded
Redis and a rate limit:

- **admission in one place**: the key's rate limit is charged once per HTTP request, for all
  of its engine requests (``n`` x prompts), whatever the API, by dispatch alone (nothing
  before the body is read: a request refused as invalid costs nothing); a request the bucket
  cannot hold is a 429 with ``Retry-After`` and is not charged;
- **the reply read once**: each choice's reply goes through the tool-call parser once,
  streamed or not, whatever the API, though the session records it and the formats write it;
  the session records the call the client was sent (its id too)."""

from __future__ import annotations

import json

import pytest

from agentgate.engine.model_files.model_path import default_model_path
from agentgate.engine.text.tokenizer import load_tokenizer
from agentgate.gateway.config.settings import Settings
from agentgate.gateway.tools import HermesToolParser
from tests.support.http import check_chat_stream, parse_sse, wait_for
from tests.support.mcp_scripts import script
from tests.support.mcp_servers import mcp_servers
from tests.support.request_walk import CALL, TOOLS
from tests.support.scripted_engine import scripted_gateway

RPM = 20  # requests per minute of every key (the anonymous one here)
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def gateway():
    call = load_tokenizer(default_model_path()).encode(CALL, add_special_tokens=False) + [2]
    with scripted_gateway(Settings(rate_limit_rpm=RPM), lambda _id, _params: call) as gw:
        yield gw


@pytest.fixture
def charges(gateway, monkeypatch):
    return _charges(gateway, monkeypatch)


def _charges(gateway, monkeypatch) -> list[tuple[str, int]]:
    """Every charge of the rate limit, as (key, engine requests), the real limiter beneath."""
    limiter = gateway.state.limiter
    admit, seen = limiter.admit, []

    async def recorded(digest: str, requests: int = 1) -> None:
        seen.append((digest, requests))
        await admit(digest, requests)

    monkeypatch.setattr(limiter, "admit", recorded)
    return seen


@pytest.fixture
def readings(monkeypatch):
    """The tool-call parsers made while a test runs, each with the text fed to it."""
    made: list[list[str]] = []
    init, feed = HermesToolParser.__init__, HermesToolParser.feed

    def counted_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self._fed = []
        made.append(self._fed)

    def counted_feed(self, text):
        self._fed.append(text)
        return feed(self, text)

    monkeypatch.setattr(HermesToolParser, "__init__", counted_init)
    monkeypatch.setattr(HermesToolParser, "feed", counted_feed)
    return made


def _chat(stream: bool, n: int = 1) -> dict:
    return {"messages": QUESTION, "tools": TOOLS, "max_tokens": 120, "n": n, "stream": stream}


def _messages_body(model: str, stream: bool) -> dict:
    tools = [{"name": t["function"]["name"], "input_schema": t["function"]["parameters"]} for t in TOOLS]
    return {"model": model, "max_tokens": 120, "messages": QUESTION, "tools": tools, "stream": stream}


def _responses_body(stream: bool) -> dict:
    tools = [
        {"type": "function", "name": t["function"]["name"], "parameters": t["function"]["parameters"]} for t in TOOLS
    ]
    return {"input": QUESTION[0]["content"], "tools": tools, "max_output_tokens": 120, "stream": stream}


def test_one_place_charges_each_request_its_engine_requests_once_whatever_the_api(gateway, charges):
    client, model = gateway.client, gateway.state.model.name
    requests = [
        ("/v1/chat/completions", _chat(stream=False, n=3), 3),
        ("/v1/chat/completions", _chat(stream=True), 1),
        ("/v1/completions", {"prompt": ["one", "two"], "n": 2, "max_tokens": 4}, 4),
        ("/v1/completions", {"prompt": "one", "max_tokens": 4, "stream": True}, 1),
        ("/v1/messages", _messages_body(model, stream=False), 1),
        ("/v1/messages", _messages_body(model, stream=True), 1),
        ("/v1/responses", _responses_body(stream=False), 1),
        ("/v1/responses", _responses_body(stream=True), 1),
    ]
    for path, body, units in requests:
        charges.clear()
        r = client.post(path, json=body)
        assert r.status_code == 200, (path, r.text)
        assert charges == [("anonymous", units)], (path, body.get("n"), charges)
    # Refused before it is admitted (a bad body): nothing charged.
    charges.clear()
    assert client.post("/v1/chat/completions", json={"messages": "not a list"}).status_code == 400
    assert charges == []
    # What is left of the bucket cannot hold a request of 12 engine requests: 429 with Retry-After,
    # and the refused request took nothing (a small one still passes).
    left = client.get("/v1/rate_limits").json()["requests"]["remaining"]
    assert 0 < left < 12, left
    refused = client.post("/v1/completions", json={"prompt": ["a", "b", "c"], "n": 4, "max_tokens": 2})
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1, refused.text
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert client.get("/v1/rate_limits").json()["requests"]["remaining"] >= left
    assert client.post("/v1/completions", json={"prompt": "a", "max_tokens": 2}).status_code == 200


def _reply_call(path: str, response) -> dict:
    """The tool call the client got, from any API's body or stream."""
    if path == "/v1/chat/completions":
        if response.headers["content-type"].startswith("text/event-stream"):
            deltas = [
                call
                for payload in parse_sse(response.text)
                if payload != "[DONE]"
                for choice in json.loads(payload)["choices"]
                for call in choice["delta"].get("tool_calls") or ()
            ]
            return {"id": deltas[0]["id"], "name": deltas[0]["function"]["name"]}
        call = response.json()["choices"][0]["message"]["tool_calls"][0]
        return {"id": call["id"], "name": call["function"]["name"]}
    raise AssertionError(path)


@pytest.mark.parametrize("stream", [False, True])
def test_a_chat_reply_is_parsed_once_and_the_session_records_the_call_the_client_got(gateway, readings, stream):
    sid = f"read-once-{stream}"
    r = gateway.client.post("/v1/chat/completions", json=_chat(stream), headers={"X-Session-Id": sid})
    assert r.status_code == 200, r.text
    sent = _reply_call("/v1/chat/completions", r)
    assert sent["name"] == "get_weather"
    if stream:
        assert check_chat_stream(parse_sse(r.text))["finish"] == {0: "tool_calls"}

    def recorded() -> dict:
        return gateway.client.get(f"/v1/sessions/{sid}").json()

    wait_for(lambda: recorded()["turns"] == 1, message="the turn recorded")
    assert len(readings) == 1, f"the reply went through {len(readings)} parsers"
    assert "".join(readings[0]) == CALL, "the parser was not fed the reply exactly once"
    [call] = recorded()["messages"][-1]["tool_calls"]
    assert {"id": call["id"], "name": call["function"]["name"]} == sent


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", ["/v1/messages", "/v1/responses"])
def test_every_api_parses_a_reply_once(gateway, readings, path, stream):
    body = _messages_body(gateway.state.model.name, stream) if path == "/v1/messages" else _responses_body(stream)
    r = gateway.client.post(path, json=body, headers={"X-Session-Id": f"read-once{path}-{stream}"})
    assert r.status_code == 200, r.text
    assert "get_weather" in r.text
    assert len(readings) == 1 and "".join(readings[0]) == CALL, [len(fed) for fed in readings]


def test_a_tool_loop_the_server_runs_is_charged_once_for_all_its_rounds(monkeypatch):
    """A response (or message) whose MCP calls the server runs is one request: its rounds (a
    call of ``add``, then the answer: ``tests.support.mcp_scripts``) are not charged again."""
    with mcp_servers() as servers:
        settings = Settings(mcp_servers=(f"calc={servers.http_url}",), rate_limit_rpm=RPM, served_model_name=("m",))
        with scripted_gateway(settings, script(load_tokenizer(default_model_path()))) as gw:
            charges = _charges(gw, monkeypatch)
            calc = {"type": "mcp", "server_label": "calc", "require_approval": "never"}
            connector = {"type": "url", "url": servers.http_url, "name": "calc"}
            question = [{"role": "user", "content": "What is 2 + 3?"}]
            bodies = [
                ("/v1/responses", {"model": "m", "input": "What is 2 + 3?", "tools": [calc]}),
                ("/v1/responses", {"model": "m", "input": "What is 2 + 3?", "tools": [calc], "stream": True}),
                ("/v1/messages", {"model": "m", "max_tokens": 200, "messages": question, "mcp_servers": [connector]}),
            ]
            for i, (path, body) in enumerate(bodies):
                charges.clear()
                r = gw.client.post(path, json=body, headers={"X-Request-Id": f"add-{i}"})
                assert r.status_code == 200 and "The sum is 5." in r.text, r.text
                assert charges == [("anonymous", 1)], (path, charges)


@pytest.mark.parametrize("finish", ["stop", "tool_calls", "length", "abort"])
def test_a_round_an_abort_or_its_budget_cut_has_incomplete_items_and_no_next_round(finish):
    """Issue 50: a reply ended before the model ended it (its budget, an abort) leaves the item it
    was writing (its last) incomplete and its hosted calls unrun (the loop ends); the text the model
    closed before is completed. One the model ended is completed and its hosted calls run."""
    from agentgate.gateway.api_types.response_items import cut_short, item_status
    from agentgate.gateway.tool_loop.rounds import McpRounds, round_items
    from agentgate.gateway.tools import ParsedOutput, ToolCall

    parsed = ParsedOutput("Checking.", [ToolCall("call_1", "get_weather", '{"city": "Paris"}')])
    cut = finish in ("length", "abort")
    assert cut_short(finish) is cut
    items = round_items(parsed, {}, item_status(finish))
    assert [(item["type"], item["status"]) for item in items] == [
        ("message", "completed"),
        ("function_call", "incomplete" if cut else "completed"),
    ]
    hosted = round_items(ParsedOutput(None, [ToolCall("call_2", "add", "{}")]), {"add": ("calc", False)}, "completed")
    assert [item["type"] for item in hosted] == ["mcp_call"]
    # continues() reads only its arguments: the rounds' state does not enter the rule
    assert McpRounds.continues(None, hosted, finish, False) is not cut  # type: ignore[arg-type]
