"""The Responses API with the real clients, as their users write them, against
`agentgate serve` with the default model (the shared ``model_server``: its
embedded Redis stores the responses): the openai SDK's ``responses.create``
streamed and not, chained by ``previous_response_id``, with a forced tool
call and its output sent back, background + poll + cancel, OpenAI's errors;
and the OpenAI Agents SDK with its default model settings running an agent
with a function tool to its final answer, on a server of its own whose
default temperature is 0 (``agents_server``)."""

from __future__ import annotations

import json
import time

import openai
import pytest

from tests.support.answers import CAPITAL_CHAT, reference_chat
from tests.support.http import engine_idle, wait_for
from tests.support.servers import start_server

MODEL = "SmolLM2-135M-Instruct"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


@pytest.fixture(scope="module")
def client(model_server):
    with openai.OpenAI(base_url=f"{model_server.url}/v1", api_key="unused", max_retries=0) as c:
        yield c


@pytest.fixture(scope="module")
def agents_server(tmp_path_factory):
    """The Agents SDK sends no temperature by default, so the server's default decides. The default
    model's own (0.2) sends it into a loop to the end of the context about one run in four, and the
    SDK takes that honest ``incomplete`` for an error; a deployment that defaults to greedy (as here)
    gives the SDK's unchanged request a reply that ends."""
    flags = ["--runner", "sync", "--dtype", "float32", "--max-model-len", "2048", "--default-temperature", "0"]
    live = start_server(tmp_path_factory.mktemp("agents-server"), *flags)
    yield live
    live.stop()


def test_create_retrieve_list_input_items_delete(client, model_server):
    [question] = CAPITAL_CHAT
    reference = reference_chat(model_server.url, CAPITAL_CHAT, max_tokens=24)  # the same server's chat answer
    assert reference["finish_reason"] == "stop", "SET-UP: the reference answer does not end within 24 tokens"
    r = client.responses.create(
        model=MODEL, input=question["content"], max_output_tokens=24, temperature=0, metadata={"run": "1"}
    )
    assert r.status == "completed" and r.object == "response" and r.id.startswith("resp_")
    assert r.output_text == reference["message"]["content"]
    assert r.usage.input_tokens > 0 and 0 < r.usage.output_tokens <= 24
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.metadata == {"run": "1"} and r.temperature == 0
    stored = client.responses.retrieve(r.id)
    assert stored.output_text == r.output_text and stored.status == "completed"
    [item] = client.responses.input_items.list(r.id).data
    assert item.role == "user" and item.content[0].text == question["content"]
    deleted = client.responses.delete(r.id)
    assert deleted is None or getattr(deleted, "deleted", True)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)


def test_streaming_sends_the_documented_events_in_order(client):
    stream = client.responses.create(model=MODEL, input="Say hello.", max_output_tokens=16, temperature=0, stream=True)
    events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        kinds[-1],
    ]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = next(e for e in events if e.type == "response.output_text.done")
    final = events[-1].response
    assert text and done.text == text == final.output_text
    assert final.usage.output_tokens == sum(1 for k in kinds if k == "response.output_text.delta")
    assert client.responses.retrieve(final.id).output_text == text  # stored before the last event


def test_previous_response_id_chains_and_hits_the_prefix_cache(client):
    first = client.responses.create(
        model=MODEL, input="My name is Ada. Remember it.", instructions="Be brief.", max_output_tokens=12, temperature=0
    )
    second = client.responses.create(
        model=MODEL,
        input="What is my name?",
        previous_response_id=first.id,
        instructions="Be brief.",
        max_output_tokens=12,
        temperature=0,
    )
    assert second.previous_response_id == first.id
    # the second prompt holds the whole first turn: its input, its reply, then the new input
    assert second.usage.input_tokens > first.usage.total_tokens
    assert second.usage.input_tokens_details.cached_tokens >= 16  # the first turn's prefix, from the engine's cache
    [item] = client.responses.input_items.list(second.id).data  # only this turn's input
    assert item.content[0].text == "What is my name?"


def test_a_forced_mcp_call_is_run_by_the_server_and_fed_back(client):
    """Issue 38 with the real model: the named tool_choice forces a call of the MCP server's ``add``
    (the session's MCP server, which ``model_server`` allows), the gateway runs it, and the model's
    next reply, in the same response, reads its result."""
    r = client.responses.create(
        model=MODEL,
        input="What is 17 + 25? Use the add tool.",
        tools=[{"type": "mcp", "server_label": "calc", "require_approval": "never", "allowed_tools": ["add"]}],
        tool_choice={"type": "mcp", "server_label": "calc", "name": "add"},
        parallel_tool_calls=False,
        max_output_tokens=96,
        temperature=0,
    )
    listed, call, *rest = r.output
    assert listed.type == "mcp_list_tools" and [t.name for t in listed.tools] == ["add"]
    assert call.type == "mcp_call" and call.name == "add" and call.error is None
    arguments = json.loads(call.arguments)
    assert call.output == str(arguments["a"] + arguments["b"])  # the server's sum of what the model sent
    assert rest and r.status in ("completed", "incomplete")  # a next reply (its budget may close it)
    assert r.usage.output_tokens > 0 and r.usage.input_tokens_details.cached_tokens > 0


def test_forced_tool_call_then_its_output_sent_back(client):
    r = client.responses.create(
        model=MODEL,
        input="What is the weather in Paris?",
        tools=[WEATHER],
        tool_choice="required",
        max_output_tokens=160,
        temperature=0.7,
    )
    calls = [item for item in r.output if item.type == "function_call"]
    assert calls and not r.output_text
    # Parallel calls are on: this small model may repeat its forced call until the budget closes
    # one, and then the response says so (issue 35); the calls it holds are whole either way.
    assert r.status == "completed" or (
        r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    ), (r.status, r.incomplete_details)
    for call in calls:
        assert call.name == "get_weather" and isinstance(json.loads(call.arguments)["city"], str)
    follow = client.responses.create(
        model=MODEL,
        previous_response_id=r.id,
        tools=[WEATHER],
        max_output_tokens=24,
        temperature=0,
        input=[{"type": "function_call_output", "call_id": c.call_id, "output": "Sunny, 22 C"} for c in calls],
    )
    # The second prompt holds the first turn: its input and each of its calls (at least 20 tokens each:
    # "<tool_call>", the name, the arguments). Not every token generated: a forced reply holds a
    # repeated call once (issue 28), so the repeats the model wrote are not part of the turn.
    assert follow.status in ("completed", "incomplete") and follow.usage.input_tokens > (
        r.usage.input_tokens + 20 * len(calls)
    )
    stream = client.responses.create(
        model=MODEL,
        input="What is the weather in Paris?",
        tools=[WEATHER],
        tool_choice="required",
        max_output_tokens=160,
        stream=True,
    )
    events = list(stream)
    args = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert args and all("city" in json.loads(e.arguments) for e in args)
    assert not any(e.type == "response.output_text.delta" for e in events)


def test_background_poll_and_cancel(client, model_server):
    done = client.responses.create(model=MODEL, input="Count to three.", max_output_tokens=8, background=True)
    assert done.status in ("queued", "in_progress") and done.background
    wait_for(
        lambda: client.responses.retrieve(done.id).status in ("completed", "incomplete"),
        timeout=120,
        message="the background response to finish",
    )  # incomplete: it used its 8 tokens
    assert 0 < client.responses.retrieve(done.id).usage.output_tokens <= 8
    long = client.responses.create(
        model=MODEL, input="Count from 1 to 1000, one number per line.", max_output_tokens=1500, background=True
    )
    wait_for(
        lambda: client.responses.retrieve(long.id).status == "in_progress",
        timeout=30,
        message="the background response to start",
    )
    cancelled = client.responses.cancel(long.id)
    assert cancelled.status == "cancelled"
    wait_for(lambda: engine_idle(model_server.url), timeout=20, message="the cancelled generation to stop")
    time.sleep(0.2)
    assert client.responses.retrieve(long.id).status == "cancelled"  # its final write did not undo the cancel
    with pytest.raises(openai.BadRequestError):
        client.responses.cancel(client.responses.create(model=MODEL, input="Hi", max_output_tokens=2).id)


def test_errors_are_openais(client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=MODEL, input="Hi", previous_response_id="resp_nope", max_output_tokens=4)
    assert caught.value.code == "previous_response_not_found" and caught.value.param == "previous_response_id"
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_nope")
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=MODEL, input="Hi", tools=[{"type": "web_search"}])
    assert caught.value.param == "tools[0].type"
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=MODEL, input=[{"type": "message", "role": "robot", "content": "Hi"}])
    assert caught.value.param == "input[0].role"


@pytest.mark.anyio
async def test_openai_agents_sdk_runs_an_agent_with_a_function_tool_to_its_final_answer(agents_server):
    """The Agents SDK as its docs show it: default model settings (it calls the Responses API)."""
    from agents import Runner

    agent, _, client = _weather_agent(agents_server)
    async with client:  # closed on this test's event loop
        result = await Runner.run(agent, "What is the weather in Paris?")
    assert isinstance(result.final_output, str) and result.final_output.strip()
    assert result.raw_responses and all(r.usage.input_tokens > 0 for r in result.raw_responses)


@pytest.mark.anyio
async def test_openai_agents_sdk_with_tool_choice_required_runs_the_tool(agents_server):
    """Issue 28: the tool is forced through ModelSettings, so the agent's run must call it: the
    function ran with the city the model wrote, its output went back and the run ended on an answer."""
    from agents import ModelSettings, Runner

    # Reset to auto after the call (the SDK's default). 256 tokens: room past the budget's last tokens,
    # where a call finished there is said to be cut (issue 35) and the SDK raises on an incomplete reply.
    settings = ModelSettings(tool_choice="required", max_tokens=256)
    agent, cities, client = _weather_agent(agents_server, model_settings=settings)
    async with client:  # closed on this test's event loop
        result = await Runner.run(agent, "What is the weather in Paris?", max_turns=4)
    assert cities and all(isinstance(city, str) for city in cities), result.new_items
    outputs = [item for item in result.new_items if item.type == "tool_call_output_item"]
    assert outputs and "sunny" in str(outputs[0].output)
    assert isinstance(result.final_output, str)
    assert len(result.raw_responses) >= 2  # the call, then the answer after its output


def _weather_agent(server, **options):
    """An Agents SDK agent on this server with a get_weather function tool, the cities it ran for, and
    the SDK's default client (close it on the test's event loop)."""
    from agents import Agent, function_tool, set_default_openai_client, set_tracing_disabled

    set_tracing_disabled(True)
    client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="unused")
    set_default_openai_client(client)
    cities: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        cities.append(city)
        return f"It is sunny and 22 C in {city}."

    instructions = "Answer with the get_weather tool."
    agent = Agent(name="weather", instructions=instructions, tools=[get_weather], model=MODEL, **options)
    return agent, cities, client
