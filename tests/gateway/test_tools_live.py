"""Tool calls and structured outputs through `agentgate serve` with the default model on the
overlapped runner: forced calls always parse and match their schema (streaming and not), the
OpenAI SDK reads them, a two-turn tool loop runs end to end, response_format is enforced, and
bad definitions are 400s naming the problem. Speculative decoding's tool calls are in
test_tools_speculative_live.py; the requests and readers both use, in tests/support/live_tools.py."""

from __future__ import annotations

import json
import os
import time

import httpx
import jsonschema
import openai
import pytest
import torch

from agentgate.engine.models.config import cpu_has_native_bf16
from tests.support.http import wait_for
from tests.support.live_tools import (
    ASK,
    NUM_SCHEMAS,
    PARIS,
    SYSTEM,
    WEATHER,
    forced_body,
    langchain_any,
    named_call_streamed_and_not,
    post_all,
    stream_calls,
)
from tests.support.servers import LiveServer, start_server
from tests.support.tool_schemas import random_tool

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    # The dense weights: these tests lean on what the model writes (a JSON
    # object that ends within max_tokens, the same sampled call whether
    # batched with the streaming or the non-streaming requests), which the
    # default int4 path's slightly different numerics change.
    # Room for 100 requests at once (the batched tests' sweeps, where they run here).
    # Formatted by hand: each flag beside its value, as on a command line.
    server = start_server(
        tmp_path_factory.mktemp("tools-server"),
        "--runner", "overlap", "--dtype", "float32", "--max-model-len", "2048", "--max-num-seqs", "128",
        "--quantization", "none",
    )  # fmt: skip
    yield server
    server.stop()


@pytest.fixture(scope="module")
def batched_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """The same dense weights in the dtype this CPU computes fastest (``--dtype auto``), room for 100
    requests at once, for the tests whose assertions hold reply by reply: a server of its own in
    bfloat16 where the CPU has native bf16 dot products; elsewhere ``auto`` is float32, what ``server``
    runs, and this is ``server`` (a second start of the same server would only cost the suite time).
    bfloat16 rounds a reply differently with what else its batch holds (a prefill after a prefix hit,
    attention over a prefix the batch shares), so the tests that compare two requests' replies run on
    ``server``."""
    if not torch.cuda.is_available() and not cpu_has_native_bf16():
        yield request.getfixturevalue("server")
        return
    flags = "--runner overlap --dtype auto --max-model-len 2048 --max-num-seqs 128 --quantization none"
    server = start_server(tmp_path_factory.mktemp("batched-tools-server"), *flags.split())
    yield server
    server.stop()


def chat(server: LiveServer, **body) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=600)


@pytest.mark.slow
@pytest.mark.timeout(1200)  # about a minute on two idle cores; far more on a loaded machine
@pytest.mark.parametrize("parallel", [False, True], ids=["one-call", "parallel-calls"])
async def test_required_tool_calls_match_50_random_schemas_streaming_and_not(request, parallel):
    """Every returned call parses and validates, nothing of the markup reaches content. With
    parallel calls the grammar bounds them (--max-forced-tool-calls, 4) and a call that
    max_tokens cuts is dropped (finish_reason "length"), never returned half-written; a call the
    budget closed is whole JSON and said to be cut ("length", issue 35). One call:
    the streamed call is the very call the same seeded request returns whole, a comparison
    across two batches (``server``); parallel calls compare nothing across requests."""
    server = request.getfixturevalue("batched_server" if parallel else "server")
    tools = [random_tool(seed) for seed in range(NUM_SCHEMAS)]

    def body(seed: int, stream: bool) -> dict:
        return {
            "messages": [SYSTEM, ASK],
            "tools": [tools[seed]],
            "tool_choice": "required",
            "parallel_tool_calls": parallel,
            "max_tokens": 160,
            "temperature": 0.7,
            "seed": seed,
            "stream": stream,
        }

    started = time.monotonic()
    plain = await post_all(server, [body(seed, False) for seed in range(NUM_SCHEMAS)])
    middle = time.monotonic()
    streamed = await post_all(server, [body(seed, True) for seed in range(NUM_SCHEMAS)])
    print(
        f"\n{NUM_SCHEMAS} schemas: non-streaming {middle - started:.1f} s, streaming {time.monotonic() - middle:.1f} s"
    )
    finishes = []
    for seed, ((status, completion), (stream_status, payloads)) in enumerate(zip(plain, streamed)):
        tool = tools[seed]["function"]
        assert status == 200 and stream_status == 200, (completion, payloads)
        [choice] = completion["choices"]
        calls = choice["message"].get("tool_calls") or []
        content, streamed_calls, finish = stream_calls(payloads)
        finishes += [choice["finish_reason"], finish]
        assert not choice["message"]["content"] and content == "", (seed, choice, content)
        for call in calls:
            assert call["type"] == "function" and call["id"].startswith("call_")
            assert call["function"]["name"] == tool["name"]
            jsonschema.validate(json.loads(call["function"]["arguments"]), tool["parameters"])
        for call in streamed_calls:
            assert call["name"] == tool["name"]
            jsonschema.validate(json.loads(call["arguments"]), tool["parameters"])
        if not parallel:
            # "length" when the budget closed the call (issue 35); the streamed reply says the same.
            assert choice["finish_reason"] == finish and finish in ("tool_calls", "length"), (seed, choice, finish)
            [call], [streamed_call] = calls, streamed_calls
            assert (streamed_call["name"], streamed_call["arguments"]) == (
                tool["name"],
                call["function"]["arguments"],
            ), seed
        else:
            for reason, made in ((choice["finish_reason"], calls), (finish, streamed_calls)):
                assert reason in ("tool_calls", "length"), (seed, reason)
                assert len(made) <= 4 and (reason == "length" or made), (seed, reason, made)
    print(f"finish reasons: {sorted((r, finishes.count(r)) for r in set(finishes))}")


# Issue 28's whole matrix (parallel on/off x temperature 0, 0.7, 1.0 x max_tokens 64, 200: 1,200 replies,
# the figures of its closing note) with AGENTGATE_FULL_TOOL_MATRIX=1; by default two opposite corners, so
# the suite stays within its time (the whole matrix is about an hour on two cores).
BUDGET_MATRIX = (
    [(p, t, m) for p in (False, True) for t in (0, 0.7, 1.0) for m in (64, 200)]
    if os.environ.get("AGENTGATE_FULL_TOOL_MATRIX")
    else [(True, 0.7, 64), (False, 1.0, 200)]
)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize(("parallel", "temperature", "max_tokens"), BUDGET_MATRIX)
async def test_forced_calls_fit_the_budget_on_50_random_schemas(batched_server, parallel, temperature, max_tokens):
    """Issue 28: under tool_choice required every reply, streamed or not, holds at least one whole
    call that validates against its schema and no markup in content: the grammar knows the tokens
    left and closes the call in time. Issue 35: a reply whose call the budget closed says so
    ("length"), one the model finished says "tool_calls"; which is which is checked against replies
    with room to spare in
    test_a_call_the_budget_closed_is_never_tool_calls_and_a_finished_one_never_cut.
    With parallel calls, no call is repeated. The counts are printed, not just the pass."""
    tools = [random_tool(seed) for seed in range(NUM_SCHEMAS)]
    bodies = [
        forced_body(tools[seed], seed, parallel=parallel, temperature=temperature, max_tokens=max_tokens, stream=stream)
        for stream in (False, True)
        for seed in range(NUM_SCHEMAS)
    ]
    results = await post_all(batched_server, bodies)
    good, calls_made, said_cut = 0, 0, 0
    for body, (status, out) in zip(bodies, results):
        seed, tool = body["seed"], body["tools"][0]["function"]
        assert status == 200, out
        if body["stream"]:
            content, made, finish = stream_calls(out)
            made = [(c["name"], c["arguments"]) for c in made]
        else:
            [choice] = out["choices"]
            content, finish = choice["message"]["content"] or "", choice["finish_reason"]
            calls = choice["message"].get("tool_calls") or []
            made = [(c["function"]["name"], c["function"]["arguments"]) for c in calls]
            assert out["usage"]["completion_tokens"] <= max_tokens
        assert made and finish in ("tool_calls", "length") and not content, (seed, body["stream"], finish, content)
        said_cut += finish == "length"
        assert len(made) == len(set(made)) and len(made) <= (4 if parallel else 1), (seed, made)
        for name, arguments in made:
            assert name == tool["name"]
            jsonschema.validate(json.loads(arguments), tool["parameters"])
        good += 1
        calls_made += len(made)
    print(
        f"\nparallel={parallel} temperature={temperature} max_tokens={max_tokens}: {good}/{len(bodies)} replies "
        f"with whole calls ({said_cut} said to be cut by the budget), {calls_made} calls"
    )


def _leaves(value, path=()) -> dict:
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in _leaves(item, (*path, key)).items()}
    if isinstance(value, list):
        return {k: v for i, item in enumerate(value) for k, v in _leaves(item, (*path, i)).items()}
    return {path: value}


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("max_tokens", [64, 200] if os.environ.get("AGENTGATE_FULL_TOOL_MATRIX") else [64])
async def test_a_call_the_budget_closed_is_never_tool_calls_and_a_finished_one_never_cut(server, max_tokens):
    """Issue 35, both ways, on the same greedy requests with ``max_tokens`` and with room to spare
    (1024): a budgeted reply that says "tool_calls" holds the very call the roomy one does (a value
    the budget closed is never passed off as whole), and a call the model finished long before the
    budget came near (34 tokens: past the last tokens where the budget narrows the grammar) is
    "tool_calls", never said to be cut. A reply said to be cut ("length") still holds its call, whole
    JSON. Printed: how many of each, and the share of values the cut calls changed."""
    tools = [random_tool(seed) for seed in range(NUM_SCHEMAS)]
    common = {"parallel": False, "temperature": 0, "stream": False}
    tight = await post_all(
        server, [forced_body(tools[s], s, max_tokens=max_tokens, **common) for s in range(NUM_SCHEMAS)]
    )
    roomy = await post_all(server, [forced_body(tools[s], s, max_tokens=1024, **common) for s in range(NUM_SCHEMAS)])
    values = shortened = whole = cut = 0
    for seed, ((_, small), (_, large)) in enumerate(zip(tight, roomy)):
        assert large["choices"][0]["finish_reason"] == "tool_calls", (seed, large)
        finish = small["choices"][0]["finish_reason"]
        [small_call] = small["choices"][0]["message"]["tool_calls"]
        [large_call] = large["choices"][0]["message"]["tool_calls"]
        fitted, free = (_leaves(json.loads(c["function"]["arguments"])) for c in (small_call, large_call))
        same = small_call["function"]["arguments"] == large_call["function"]["arguments"]
        if finish == "tool_calls":
            assert same, (seed, small_call, large_call)  # never a shortened value passed off as whole
            whole += 1
        else:
            assert finish == "length", (seed, finish)
            cut += 1
            values += len(free)
            shortened += sum(1 for path, value in free.items() if fitted.get(path, object()) != value)
        if large["usage"]["completion_tokens"] <= max_tokens - 34:  # ended long before the budget came near
            assert finish == "tool_calls" and same, (seed, finish, small_call, large_call)
    print(
        f"\nmax_tokens {max_tokens} vs 1024, greedy, {NUM_SCHEMAS} schemas: {whole} tool_calls, all equal to the "
        f"roomy call; {cut} said to be cut, {shortened}/{values} of their values changed"
    )


def test_openai_sdk_parses_named_tool_calls(server):
    """Named tool_choice forces that function; the SDK parses the call, and streaming deltas
    accumulated as agent frameworks do give the same call."""
    named_call_streamed_and_not(server)


def test_two_turn_tool_loop(server):
    """call -> tool result -> final answer, the way an agent loop sends it."""
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=600)
    messages = list(PARIS)
    session = {"X-Session-Id": "tool-loop"}
    first = client.chat.completions.create(
        model="SmolLM2-135M-Instruct",
        messages=messages,
        tools=[WEATHER],
        tool_choice="required",
        parallel_tool_calls=False,
        max_tokens=60,
        temperature=0,
        extra_headers=session,
    )
    [call] = first.choices[0].message.tool_calls
    assert call.function.name == "get_weather"

    # The session records the reply as the call it is (a reload shows a call, not markup).
    def recorded() -> dict:
        return httpx.get(f"{server.url}/v1/sessions/tool-loop", headers=session).json()

    wait_for(lambda: recorded().get("turns") == 1, message="the turn recorded")
    reply = recorded()["messages"][-1]
    [recorded_call] = reply["tool_calls"]
    assert reply["content"] is None and recorded_call["function"] == call.function.model_dump()
    messages.append(first.choices[0].message.model_dump(exclude_none=True))  # content None, tool_calls
    messages.append(
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature_c": 18, "sky": "sunny"})}
    )

    tokens = httpx.post(f"{server.url}/tokenize", json={"messages": messages, "tools": [WEATHER]}).json()["tokens"]
    prompt = httpx.post(f"{server.url}/detokenize", json={"tokens": tokens}).json()["prompt"]
    assert f'<tool_call>\n{{"name": "get_weather", "arguments": {call.function.arguments}}}\n</tool_call>' in prompt
    assert '<tool_response>\n{"temperature_c": 18, "sky": "sunny"}\n</tool_response>' in prompt

    final = client.chat.completions.create(
        model="SmolLM2-135M-Instruct", messages=messages, tools=[WEATHER], max_tokens=40, temperature=0
    )
    [choice] = final.choices
    print(f"\nturn 1: {call.function.name}({call.function.arguments})\nturn 2: {choice.message.content!r}")
    assert not choice.message.tool_calls and choice.finish_reason in ("stop", "length")
    assert choice.message.content.strip()
    assert final.usage.prompt_tokens == len(tokens)


def test_tool_choice_none_keeps_the_prompt_and_opens_no_call(server):
    """Issue 35: ``none`` renders the very prompt ``auto`` does (the tools stay in it, so a program
    keeps its prefix), and the grammar lets no call open: the reply is text without the markup."""
    auto = chat(server, messages=PARIS, tools=[WEATHER], max_tokens=1, temperature=0).json()
    body = {"messages": PARIS, "tools": [WEATHER], "tool_choice": "none", "max_tokens": 30, "temperature": 0}
    none = chat(server, **body).json()
    bare = chat(server, messages=PARIS, max_tokens=30, temperature=0).json()
    assert none["usage"]["prompt_tokens"] == auto["usage"]["prompt_tokens"] > bare["usage"]["prompt_tokens"]
    [choice] = none["choices"]
    assert "tool_calls" not in choice["message"] and choice["finish_reason"] in ("stop", "length")
    assert isinstance(choice["message"]["content"], str) and "<tool_call>" not in choice["message"]["content"]


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 30},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "email": {"type": "string", "maxLength": 40},
        "skills": {"type": "array", "items": {"type": "string", "maxLength": 20}, "minItems": 1, "maxItems": 3},
    },
    "required": ["name", "age", "email", "skills"],
    "additionalProperties": False,
}
PERSON_PROMPT = [{"role": "user", "content": "Describe a software engineer called Ada."}]


def _valid(text: str | None, schema: dict) -> bool:
    try:
        jsonschema.validate(json.loads(text or ""), schema)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


async def test_response_format_json_schema_is_enforced(server):
    response_format = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    common = {"messages": PERSON_PROMPT, "max_tokens": 120, "temperature": 0}
    cat = [{"role": "user", "content": "Give me a JSON object about a cat."}]
    (_, constrained), (_, free), (_, streamed), (_, obj) = await post_all(
        server,
        [
            {**common, "response_format": response_format},
            {**common, "max_tokens": 60},
            {**common, "response_format": response_format, "stream": True},
            {"messages": cat, "response_format": {"type": "json_object"}, "max_tokens": 100, "temperature": 0},
        ],
    )
    constrained, free, obj = (body["choices"][0] for body in (constrained, free, obj))
    print(f"\nwith response_format: {constrained['message']['content']!r}\nwithout: {free['message']['content']!r}")
    assert constrained["finish_reason"] == "stop"
    assert _valid(constrained["message"]["content"], PERSON)
    assert not _valid(free["message"]["content"], PERSON)  # the same prompt, unconstrained, does not validate

    content, calls, finish = stream_calls(streamed)
    assert calls == [] and finish == "stop" and _valid(content, PERSON)
    assert obj["finish_reason"] == "stop" and isinstance(json.loads(obj["message"]["content"]), dict)


BAD_SCHEMA = {
    "type": "function",
    "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "strnig"}}}},
}


@pytest.mark.parametrize(
    ("fields", "param", "needle"),
    [
        (
            {"tools": [BAD_SCHEMA], "tool_choice": "required"},
            "tools",
            "tools[0].function.parameters is not a valid JSON Schema",
        ),
        ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools", "tools[0].function.name"),
        ({"tools": [WEATHER, WEATHER]}, "tools", "defined twice"),
        ({"tools": [{"type": "retrieval"}]}, "tools", 'tools[0].type must be "function"'),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice",
            "'nope'",
        ),
        ({"tool_choice": "required"}, "tool_choice", "needs tools"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 7}}}},
            "response_format",
            "not a valid JSON Schema",
        ),
        ({"response_format": {"type": "yaml"}}, "response_format", "response_format.type"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_invalid_tools_are_400s_naming_the_problem(server, fields, param, needle, stream):
    r = chat(server, messages=PARIS, max_tokens=5, stream=stream, **fields)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert needle in error["message"], error["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_schema_the_grammar_compiler_rejects_is_a_400(server, stream):
    """Valid JSON Schema that cannot be enforced (an empty range) fails in the engine's grammar
    compiler; streaming or not, the client gets a 400 on tools, not a broken stream."""
    impossible = {
        "type": "function",
        "function": {
            "name": "f",
            "parameters": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 5, "maximum": 1}}},
        },
    }
    r = chat(server, messages=PARIS, tools=[impossible], tool_choice="required", max_tokens=5, stream=stream)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "tools" and "cannot be enforced" in error["message"] and "minimum" in error["message"]
    ok = chat(server, messages=PARIS, max_tokens=2)  # the engine carries on
    assert ok.status_code == 200


def test_langchain_bind_tools_with_tool_choice_any(server):
    """LangChain (langchain-openai) as its users write it: ``bind_tools(..., tool_choice="any")``
    gives parsed calls, never an invalid one, streaming and not."""
    langchain_any(server)


WRITE_FILE = {
    "name": "write_file",
    "description": "Write a text file",
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
    },
}
POEM = "Write a long poem about the sea to poems/sea.txt."


def _cut_call(
    server: LiveServer,
    api: str,
    budget: int,
    stream: bool,
    *,
    function: dict = WRITE_FILE,
    ask: str = POEM,
    stop: list[str] | None = None,
) -> tuple[str, dict]:
    """(how the reply ended, as the API says it; the call's arguments) of a forced call of
    ``function`` (write_file by default) asked for by ``ask``; ``stop``: the stop strings sent (chat's
    ``stop``, Messages' ``stop_sequences``; the Responses API has none)."""
    asked = [{"role": "user", "content": ask}]
    if api == "chat":
        path = "/v1/chat/completions"
        body = {
            "messages": asked,
            "tools": [{"type": "function", "function": function}],
            "tool_choice": "required",
            "max_tokens": budget,
            **({"stop": stop} if stop else {}),
        }
    elif api == "messages":
        path = "/v1/messages"
        tool = {"name": function["name"], "description": function["description"]}
        model = httpx.get(f"{server.url}/v1/models").json()["data"][0]["id"]
        body = {
            "model": model,
            "messages": asked,
            "tools": [{**tool, "input_schema": function["parameters"]}],
            "tool_choice": {"type": "any"},
            "max_tokens": budget,
            **({"stop_sequences": stop} if stop else {}),
        }
    else:
        assert not stop, "the Responses API has no stop strings"
        path = "/v1/responses"
        body = {
            "input": ask,
            "tools": [{"type": "function", **function}],
            "tool_choice": "required",
            "max_output_tokens": budget,
            "store": False,
        }
    r = httpx.post(f"{server.url}{path}", json={**body, "temperature": 0, "stream": stream}, timeout=600)
    assert r.status_code == 200, r.text
    if not stream:
        reply = r.json()
        if api == "chat":
            choice = reply["choices"][0]
            return choice["finish_reason"], json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"])
        if api == "messages":
            return reply["stop_reason"], next(b["input"] for b in reply["content"] if b["type"] == "tool_use")
        call = next(item for item in reply["output"] if item["type"] == "function_call")
        return f"{reply['status']}:{reply['incomplete_details']['reason']}", json.loads(call["arguments"])
    lines = r.text.splitlines()  # Anthropic and Responses events name themselves on an event: line first
    events = [
        json.loads(line[len("data: ") :]) for line in lines if line.startswith("data: ") and line != "data: [DONE]"
    ]
    if api == "chat":
        finish = next(c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"])
        arguments = "".join(  # the first call's, as the whole reply's reader takes
            t["function"].get("arguments") or ""
            for e in events
            for c in e["choices"]
            for t in c["delta"].get("tool_calls") or ()
            if t["index"] == 0
        )
        return finish, json.loads(arguments)
    if api == "messages":
        stop = next(e["delta"]["stop_reason"] for e in events if e["type"] == "message_delta")
        first = next(
            e["index"]
            for e in events
            if e["type"] == "content_block_start" and e["content_block"]["type"] == "tool_use"
        )
        partial = "".join(
            e["delta"].get("partial_json", "")
            for e in events
            if e["type"] == "content_block_delta" and e["index"] == first
        )
        return stop, json.loads(partial)
    done = next(e["response"] for e in events if e["type"] in ("response.completed", "response.incomplete"))
    arguments = next(e["arguments"] for e in events if e["type"] == "response.function_call_arguments.done")
    return f"{done['status']}:{(done.get('incomplete_details') or {}).get('reason')}", json.loads(arguments)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
def test_a_call_the_budget_closed_says_so_in_every_api(server, api, stream):
    """Issue 35: a long poem forced into write_file with a budget a few tokens above the shortest
    call: the budget, not the model, closes the content, and each API says the reply was cut
    (length; max_tokens; incomplete for max_output_tokens), streamed and not, the call whole JSON
    that validates."""
    error = chat(
        server,
        messages=[{"role": "user", "content": POEM}],
        max_tokens=5,
        tool_choice="required",
        tools=[{"type": "function", "function": WRITE_FILE}],
    ).json()["error"]
    minimum = int(error["message"].rsplit("at least ", 1)[1].rstrip("."))
    said, arguments = _cut_call(server, api, minimum + 8, stream)
    assert said == {"chat": "length", "messages": "max_tokens", "responses": "incomplete:max_output_tokens"}[api]
    jsonschema.validate(arguments, WRITE_FILE["parameters"])


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", ["chat", "messages"])
def test_a_stop_string_the_arguments_hold_never_cuts_a_forced_call(server, api, stream):
    """Issue 50: stop strings end text, never a call. Each of these would match inside the forced
    get_weather call's JSON (every key is quoted; the city is Paris); the call still ends whole,
    validates and is said to be a call (tool_calls; tool_use), streamed and not."""
    weather = WEATHER["function"]
    stop = ['"', "city", "Paris"]
    said, arguments = _cut_call(server, api, 200, stream, function=weather, ask=PARIS[0]["content"], stop=stop)
    assert said == {"chat": "tool_calls", "messages": "tool_use"}[api], (said, arguments)
    jsonschema.validate(arguments, weather["parameters"])


@pytest.mark.parametrize("stream", [False, True])
def test_a_budget_below_one_whole_call_is_a_400_naming_max_tokens_and_the_minimum(server, stream):
    """Issue 28: refused at admission, before anything runs, streamed or not; the minimum it names
    is enough: a request with exactly that budget ends on one whole call that validates, said to be
    cut ("length": the budget, not the model, closed it to the shortest call; issue 35)."""
    fields = {"messages": PARIS, "tools": [WEATHER], "tool_choice": "required", "stream": stream}
    error = chat(server, max_tokens=5, **fields).json()["error"]
    assert error["param"] == "max_tokens" and "`max_tokens` is 5" in error["message"], error
    minimum = int(error["message"].rsplit("at least ", 1)[1].rstrip("."))
    error = chat(server, max_completion_tokens=minimum - 1, **fields).json()["error"]
    assert error["param"] == "max_completion_tokens" and f"at least {minimum}" in error["message"], error
    r = httpx.post(
        f"{server.url}/v1/responses",
        json={
            "input": "Weather in Paris?",
            "tools": [{"type": "function", **WEATHER["function"]}],
            "tool_choice": "required",
            "max_output_tokens": 5,
            "store": False,
            "stream": stream,
        },
        timeout=600,
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_output_tokens", r.text
    if not stream:
        done = chat(server, max_tokens=minimum, **fields).json()
        [choice] = done["choices"]
        assert choice["finish_reason"] == "length" and done["usage"]["completion_tokens"] <= minimum
        [call] = choice["message"]["tool_calls"]
        jsonschema.validate(json.loads(call["function"]["arguments"]), WEATHER["function"]["parameters"])
