"""Hosted MCP tools in ``POST /v1/responses`` (issue 38): the gateway lists a real MCP server's
tools, the model's calls are run by the gateway and fed back in the same response, as the
openai SDK reads it, whole and streamed.

The model is the scripted engine (``tests.support.mcp_scripts``): each round of a response
is an engine request named after the request's id, and the script replies by those names (a
call of ``add`` first, then the answer), so every test knows what the model said. The MCP
server is real (``tests.support.mcp_servers``), on both transports.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest
import redis
from openai.types.responses import ResponseMcpCallCompletedEvent, ResponseMcpListToolsInProgressEvent

from agentgate.engine.model_files.model_path import default_model_path
from agentgate.engine.text.tokenizer import load_tokenizer
from agentgate.gateway.state.key_digests import key_digest
from tests.support.http import metrics
from tests.support.mcp_scripts import FORBIDDEN_CALL_ANSWER, SCRIPTS, mcp_gateway
from tests.support.mcp_servers import McpServers, mcp_servers
from tests.support.scripted_engine import SCRIPTED_ENGINE, ScriptedGateway, served_over_http

SECRET = "sekrit-token-1234"
BLOCK_TOKENS = SCRIPTED_ENGINE.block_size


@pytest.fixture(scope="module")
def servers() -> Iterator[McpServers]:
    with mcp_servers() as running:
        yield running


@pytest.fixture(scope="module")
def gateway(servers: McpServers) -> Iterator[ScriptedGateway]:
    with mcp_gateway(servers) as gw:
        yield gw


@pytest.fixture(scope="module")
def client(gateway: ScriptedGateway) -> Iterator[openai.OpenAI]:
    with served_over_http(gateway) as url:
        with openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0) as c:
            yield c


def calc(**extra: Any) -> dict[str, Any]:
    return {"type": "mcp", "server_label": "calc", "require_approval": "never", **extra}


def create(client: openai.OpenAI, request_id: str, tools: list[dict[str, Any]], **extra: Any):
    return client.responses.create(
        model="m", input="What is 2 + 3?", tools=tools, extra_headers={"X-Request-Id": request_id}, **extra
    )


def test_the_gateway_runs_the_call_and_the_model_answers_in_the_same_response(client: openai.OpenAI):
    response = create(client, "add-1", [calc()])
    assert response.status == "completed"
    listed, call, message = response.output
    assert listed.type == "mcp_list_tools" and listed.server_label == "calc" and listed.error is None
    assert {t.name for t in listed.tools} >= {"add", "multiply", "sleep", "explode"}
    assert call.type == "mcp_call" and call.server_label == "calc" and call.name == "add"
    assert json.loads(call.arguments) == {"a": 2, "b": 3}
    assert call.output == "5" and call.error is None and call.status == "completed"
    assert message.type == "message" and response.output_text == "The sum is 5."
    # both replies of the model count: the second read the first's prompt from the cache
    assert response.usage.output_tokens == sum(
        len(load_tokenizer(default_model_path()).encode(t, add_special_tokens=False)) + 1 for t in SCRIPTS["add"]
    )
    assert response.usage.input_tokens_details.cached_tokens > 0
    again = client.responses.retrieve(response.id)
    assert [item.type for item in again.output] == ["mcp_list_tools", "mcp_call", "message"]
    follow = client.responses.create(
        model="m", input="And 2 + 4?", previous_response_id=response.id, extra_headers={"X-Request-Id": "text-1"}
    )
    assert follow.status == "completed" and follow.output_text == "Hello."


def test_allowed_tools_filter_what_is_listed_and_offered(client: openai.OpenAI, servers: McpServers):
    other = calc(server_label="other", server_url=servers.http_url, allowed_tools={"tool_names": ["big"]})
    response = create(client, "text-2", [calc(allowed_tools=["add"]), other])
    lists = [item for item in response.output if item.type == "mcp_list_tools"]
    assert [[t.name for t in item.tools] for item in lists] == [["add"], ["big"]]


def test_two_rounds_of_calls_then_the_answer(client: openai.OpenAI):
    response = create(client, "two-1", [calc()])
    assert [item.type for item in response.output] == ["mcp_list_tools", "mcp_call", "mcp_call", "message"]
    assert [item.output for item in response.output[1:3]] == ["5", "20"]
    assert response.output_text == "It is 20."


def test_a_failing_or_slow_tool_is_an_error_the_model_reads_never_a_5xx(
    client: openai.OpenAI, gateway: ScriptedGateway
):
    failed = create(client, "fail-1", [calc()])
    call = failed.output[1]
    assert call.status == "failed" and call.output is None
    assert call.error.type == "mcp_tool_execution_error"
    assert call.error.content == [{"type": "text", "text": "Error executing tool explode"}]
    assert failed.status == "completed" and failed.output_text == "It failed."
    # the model read the error in its next prompt: the chain keeps the call and its result as sent
    stored = gateway.portal.call(gateway.state.responses.load, failed.id, key_digest("unused"))  # the SDK's key
    result = next(m for m in stored.messages if m["role"] == "tool")
    assert result == {"role": "tool", "tool_call_id": call.id, "content": "Error: Error executing tool explode"}
    slow = create(client, "slow-1", [calc()])
    assert slow.output[1].error.type == "mcp_protocol_error" and slow.output[1].error.code == -32001
    assert slow.output_text == "Too slow."


def test_max_tool_rounds_ends_the_loop_with_an_answer(client: openai.OpenAI):
    response = create(client, "loop-1", [calc()])
    kinds = [item.type for item in response.output]
    assert kinds == ["mcp_list_tools", "mcp_call", "mcp_call", "mcp_call", "message"]  # --max-tool-rounds 3
    assert response.status == "completed"
    # the model would call again: the last round's grammar let no call open, so it answered
    assert response.output_text == FORBIDDEN_CALL_ANSWER


def test_a_client_function_call_ends_the_response_as_without_mcp(client: openai.OpenAI):
    weather = {
        "type": "function",
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
    response = create(client, "client-1", [calc(), weather])
    assert [item.type for item in response.output] == ["mcp_list_tools", "function_call"]
    assert response.output[1].name == "get_weather"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("hosted", [True, False], ids=["mcp-loop", "no-loop"])
def test_the_item_a_budget_cut_is_incomplete_and_those_before_it_completed(client, hosted, stream):
    """Issue 50: the budget, not the model, ended the reply (text, then a call whole in its last
    tokens, the end of turn past them): the response is incomplete and so is the call, the item
    being written; the text the model closed before it is completed. The same whole and streamed
    (where each item is done as the next opens), in the MCP loop's rounds and without one."""
    said = SCRIPTS["both"][0]
    budget = len(load_tokenizer(default_model_path()).encode(said, add_special_tokens=False))
    weather = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
    tools = [calc(), weather] if hosted else [weather]
    created = create(client, f"both-{hosted}-{stream}", tools, max_output_tokens=budget, stream=stream)
    if stream:
        events = list(created)
        done = [(e.item.type, getattr(e.item, "status", None)) for e in events if e.type == "response.output_item.done"]
        assert done[-2:] == [("message", "completed"), ("function_call", "incomplete")], done
        response = events[-1].response
    else:
        response = created
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    said = [(item.type, item.status) for item in response.output if item.type != "mcp_list_tools"]
    assert said == [("message", "completed"), ("function_call", "incomplete")]


def test_the_sse_transport_under_an_allowed_pattern(client: openai.OpenAI, servers: McpServers):
    response = create(client, "add-2", [calc(server_label="calc-sse", server_url=servers.sse_url)])
    assert response.output[1].output == "5" and response.output[1].server_label == "calc-sse"


def test_a_server_not_allowed_is_a_400_naming_it(client: openai.OpenAI):
    with pytest.raises(openai.BadRequestError) as refused:
        create(client, "add-3", [calc(server_label="x", server_url="http://169.254.169.254/latest/meta-data")])
    assert "http://169.254.169.254/latest/meta-data" in str(refused.value)
    assert refused.value.body["param"] == "tools[0].server_url"


def test_a_server_that_cannot_list_is_an_mcp_list_tools_item_with_error(client: openai.OpenAI, servers: McpServers):
    gone = servers.sse_url.rsplit("/", 1)[0] + "/nowhere/sse"
    response = create(client, "text-3", [calc(server_label="gone", server_url=gone)])
    listed = response.output[0]
    assert listed.type == "mcp_list_tools" and listed.tools == [] and "gone" in listed.error
    assert response.status == "completed" and response.output_text == "Hello."


def test_credentials_are_never_stored_nor_logged(client: openai.OpenAI, gateway: ScriptedGateway, caplog):
    caplog.set_level(logging.DEBUG)
    tool = calc(authorization=SECRET, headers={"X-Key": SECRET})
    response = create(client, "add-4", [tool])
    assert response.output[1].output == "5"
    assert response.tools[0].authorization == "<redacted>" and response.tools[0].headers == {"X-Key": "<redacted>"}
    store = redis.Redis.from_url(gateway.state.settings.redis_url)
    try:
        values = [store.dump(key) or b"" for key in store.scan_iter()]
    finally:
        store.close()
    assert values and not any(SECRET.encode() in value for value in values)
    assert SECRET not in caplog.text


def test_streamed_events_in_order_as_the_sdk_types_them(client: openai.OpenAI):
    with client.responses.stream(
        model="m", input="What is 2 + 3?", tools=[calc()], extra_headers={"X-Request-Id": "add-5"}
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [event.type for event in events]
    assert isinstance(events[3], ResponseMcpListToolsInProgressEvent)  # typed by the SDK
    assert isinstance(events[kinds.index("response.mcp_call.completed")], ResponseMcpCallCompletedEvent)
    text_deltas = kinds.count("response.output_text.delta")
    argument_deltas = kinds.count("response.mcp_call_arguments.delta")
    assert argument_deltas >= 1 and text_deltas >= 1
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",  # the list
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.output_item.done",
        "response.output_item.added",  # the call
        "response.mcp_call.in_progress",
        *["response.mcp_call_arguments.delta"] * argument_deltas,
        "response.mcp_call_arguments.done",
        "response.mcp_call.completed",
        "response.output_item.done",
        "response.output_item.added",  # the answer
        "response.content_part.added",
        *["response.output_text.delta"] * text_deltas,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    call_done = events[kinds.index("response.mcp_call.completed") + 1]
    assert call_done.item.type == "mcp_call" and call_done.item.output == "5"
    assert json.loads(events[kinds.index("response.mcp_call_arguments.done")].arguments) == {"a": 2, "b": 3}
    assert [event.output_index for event in events if event.type == "response.output_item.added"] == [0, 1, 2]
    assert [item.type for item in final.output] == ["mcp_list_tools", "mcp_call", "message"]
    assert final.output_text == "The sum is 5."
    stored = client.responses.retrieve(final.id)
    assert stored.status == "completed" and stored.output[1].output == "5"


def test_a_streamed_failure_is_mcp_call_failed(client: openai.OpenAI):
    with client.responses.stream(
        model="m", input="Go.", tools=[calc()], extra_headers={"X-Request-Id": "fail-2"}
    ) as stream:
        kinds = [event.type for event in stream]
    assert "response.mcp_call.failed" in kinds and "response.mcp_call.completed" not in kinds
    assert kinds[-1] == "response.completed"


def test_a_background_response_runs_its_loop_after_the_answer(client: openai.OpenAI):
    queued = create(client, "add-8", [calc()], background=True)
    assert queued.status == "queued"
    for _ in range(200):  # at most 10 s
        done = client.responses.retrieve(queued.id)
        if done.status not in ("queued", "in_progress"):
            break
        time.sleep(0.05)
    assert done.status == "completed", done.status
    assert [item.type for item in done.output] == ["mcp_list_tools", "mcp_call", "message"]
    assert done.output[1].output == "5" and done.output_text == "The sum is 5."


def test_the_websocket_mode_runs_the_loop_too(client: openai.OpenAI):
    with client.responses.connect() as connection:
        connection.response.create(model="m", input="What is 2 + 3?", tools=[calc()])
        events = []
        for event in connection:
            events.append(event)
            if event.type in ("response.completed", "response.failed", "response.incomplete"):
                break
    kinds = [event.type for event in events]
    assert kinds[-1] == "response.completed"
    assert kinds.index("response.mcp_list_tools.completed") < kinds.index("response.mcp_call.completed")
    assert [item.type for item in events[-1].response.output] == ["mcp_list_tools", "mcp_call", "message"]


# -- approvals ---------------------------------------------------------------------------


def approve(client: openai.OpenAI, request_id: str, previous, approval_id: str, approved: bool, tools=None):
    answer = {"type": "mcp_approval_response", "approval_request_id": approval_id, "approve": approved}
    return client.responses.create(
        model="m",
        input=[answer],
        previous_response_id=previous.id,
        tools=tools or [{"type": "mcp", "server_label": "calc"}],
        extra_headers={"X-Request-Id": request_id},
    )


def test_approval_by_default_ends_the_response_and_an_approval_continues_it(client: openai.OpenAI):
    asked = create(client, "add-9", [{"type": "mcp", "server_label": "calc"}])  # require_approval: always
    assert asked.status == "completed"
    assert [item.type for item in asked.output] == ["mcp_list_tools", "mcp_approval_request"]
    request = asked.output[1]
    assert (
        request.server_label == "calc" and request.name == "add" and json.loads(request.arguments) == {"a": 2, "b": 3}
    )
    done = approve(client, "text-4", asked, request.id, True)
    assert [item.type for item in done.output] == ["mcp_list_tools", "mcp_call", "message"]
    call = done.output[1]
    assert call.approval_request_id == request.id and call.name == "add" and call.output == "5"
    assert done.output_text == "Hello."


def test_a_denied_call_is_not_run(client: openai.OpenAI):
    asked = create(client, "add-10", [{"type": "mcp", "server_label": "calc", "require_approval": "always"}])
    denied = approve(client, "text-5", asked, asked.output[1].id, False)
    assert [item.type for item in denied.output] == ["mcp_list_tools", "message"]
    assert denied.status == "completed"


def test_the_per_tool_filter_says_which_calls_wait(client: openai.OpenAI):
    runs = create(client, "add-11", [calc(require_approval={"never": {"tool_names": ["add"]}})])
    assert [item.type for item in runs.output] == ["mcp_list_tools", "mcp_call", "message"]
    waits = create(client, "add-12", [calc(require_approval={"never": {"tool_names": ["multiply"]}})])
    assert [item.type for item in waits.output] == ["mcp_list_tools", "mcp_approval_request"]


def test_an_approval_request_streams_as_one_item(client: openai.OpenAI):
    with client.responses.stream(
        model="m",
        input="Go.",
        tools=[{"type": "mcp", "server_label": "calc"}],
        extra_headers={"X-Request-Id": "add-13"},
    ) as stream:
        events = list(stream)
    kinds = [event.type for event in events]
    assert not any(kind.startswith("response.mcp_call") for kind in kinds)
    added = [event for event in events if event.type == "response.output_item.added"]
    assert [event.item.type for event in added] == ["mcp_list_tools", "mcp_approval_request"]
    assert json.loads(added[1].item.arguments) == {"a": 2, "b": 3}  # whole when it is added
    assert kinds[-1] == "response.completed"


def test_an_answer_to_no_approval_request_is_a_400(client: openai.OpenAI):
    asked = create(client, "text-6", [calc()])
    with pytest.raises(openai.BadRequestError) as refused:
        approve(client, "text-7", asked, "mcpr_nope", True)
    assert refused.value.body["param"] == "input[0].approval_request_id"


def test_the_next_reply_starts_from_the_tokens_the_model_read_and_wrote(gateway: ScriptedGateway, client, monkeypatch):
    """The continuation after a server-run call is not a re-rendered history: its prompt is the
    first reply's own tokens (prompt and output) and then the result (gateway.programs.turn_tokens)."""
    turns = gateway.state.turn_tokens
    kept: list[list[int] | None] = []
    prompt_ids = turns.prompt_ids

    def spy(returning, text, through):
        ids = prompt_ids(returning, text, through)
        kept.append(ids)
        return ids

    monkeypatch.setattr(turns, "prompt_ids", spy)
    response = create(client, "two-2", [calc()])
    assert [item.type for item in response.output] == ["mcp_list_tools", "mcp_call", "mcp_call", "message"]
    # both continuations, from their turn's tokens (under --max-tool-rounds: the reply after the
    # last round is told of no tools, a prompt of its own)
    assert len(kept) == 2 and all(ids is not None for ids in kept)


def test_a_next_reply_the_gateway_cannot_start_fails_the_response_with_the_calls_that_ran(client: openai.OpenAI):
    """A 6000-character result leaves no room in the context (1024 tokens) for the next reply. The
    call ran, so the response never hides it behind an HTTP error (issue 50: the client would retry
    and run it twice): it is ``failed`` with the call's item, stored, whole, streamed and in the
    background alike."""
    failed = create(client, "huge-1", [calc()])
    assert failed.status == "failed" and failed.error is not None
    assert "context" in failed.error.message or "long" in failed.error.message, failed.error
    assert [item.type for item in failed.output] == ["mcp_list_tools", "mcp_call"]
    assert failed.output[1].output and failed.output[1].status == "completed"  # the result the next reply lacked
    with client.responses.stream(
        model="m", input="Go.", tools=[calc()], extra_headers={"X-Request-Id": "huge-2"}
    ) as stream:
        events = list(stream)
    kinds = [event.type for event in events]
    assert kinds[-2:] == ["error", "response.failed"] and "response.mcp_call.completed" in kinds
    assert [item.type for item in events[-1].response.output] == ["mcp_list_tools", "mcp_call"]
    queued = create(client, "huge-3", [calc()], background=True)
    for _ in range(200):  # at most 10 s
        done = client.responses.retrieve(queued.id)
        if done.status not in ("queued", "in_progress"):
            break
        time.sleep(0.05)
    for response_id in (failed.id, events[-1].response.id, queued.id):
        stored = client.responses.retrieve(response_id)
        assert stored.status == "failed" and stored.error is not None, response_id
        assert [item.type for item in stored.output] == ["mcp_list_tools", "mcp_call"], response_id


def test_the_engine_holds_the_conversation_through_server_run_tools_and_learns_no_gap(
    gateway: ScriptedGateway, client: openai.OpenAI
):
    """Issue 51: the gateway tells the engine that it runs the tools itself: each round's pin is held
    through the call (no TTL from the client tool-gap laws, which learn nothing from it) and the next
    round claims it, hitting the conversation's blocks; the last round's pin goes with the loop."""
    # Pins left by earlier tests' responses (an approval ends one with a pin) expire on their own;
    # counted from when none is held, every release below is this response's.
    deadline = time.monotonic() + 15
    while (before := metrics(gateway.client))["agentgate_kv_retention_pins"] > 0:
        assert time.monotonic() < deadline, "earlier tests' pins were not released in 15 s"
        time.sleep(0.1)
    response = create(client, "two-2", [calc()])
    assert response.output_text == "It is 20."
    after = metrics(gateway.client)

    def delta(name: str) -> float:
        return after[f"agentgate_kv_retention_{name}"] - before[f"agentgate_kv_retention_{name}"]

    assert delta("tool_gaps_total") == 0, "a server-run tool's gap taught a law"
    assert delta("returning_turns_total") == 2 and delta("released_returned_total") == 2
    assert delta("released_pressure_total") == delta("released_expired_total") == 0
    hits, queries = delta("returning_hits_tokens_total"), delta("returning_queries_tokens_total")
    print(f"\nrounds after a server-run tool: {hits:.0f} of {queries:.0f} prompt tokens cached")
    # New in each round: the results (a number in the template's tool message, under 24 tokens) and the
    # last, partial block of what the round before read and wrote; every full block before the tool hits.
    assert queries - hits <= 2 * (BLOCK_TOKENS + 24)
