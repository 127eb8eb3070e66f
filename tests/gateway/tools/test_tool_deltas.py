"""What the OpenAI SDK and agent frameworks make of the parsers' deltas, streamed and whole."""

from __future__ import annotations

import json
import random

import pytest

from agentgate.gateway.tools.deltas import Delta, ToolCall, finish_reason
from agentgate.gateway.tools.hermes import HermesToolParser
from tests.support.tool_calls import CASES, HERMES_CORPUS, parse, run, split_at


def sse_chunks(deltas: list[Delta], engine_reason: str) -> list:
    """The chunks a route would send: role first, one chunk per delta, then the finish reason."""
    ChatCompletionChunk = pytest.importorskip("openai.types.chat").ChatCompletionChunk

    def chunk(delta: dict, reason: str | None = None) -> ChatCompletionChunk:
        raw = {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": reason, "logprobs": None}],
        }
        return ChatCompletionChunk.model_validate(raw)

    made_calls = any(d.tool_calls for d in deltas)
    return [
        chunk({"role": "assistant", "content": ""}),
        *(chunk(d.to_dict()) for d in deltas),
        chunk({}, finish_reason(engine_reason, tool_calls=made_calls)),
    ]


def framework_accumulate(chunks) -> tuple[str | None, list[tuple[str, str, str]], str | None]:
    """How agent frameworks fold a stream (the OpenAI cookbook / LangChain pattern)."""
    content, calls, reason = "", {}, None
    for chunk in chunks:
        choice = chunk.choices[0]
        delta = choice.delta
        content += delta.content or ""
        for tc in delta.tool_calls or []:
            entry = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            if tc.id:
                assert entry["id"] is None, "an id arrives once, in the call's first delta"
                assert tc.type == "function" and tc.function and tc.function.name
                entry["id"] = tc.id
            assert entry["id"] is not None, "the first delta of a call carries its id"
            if tc.function and tc.function.name:
                entry["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                entry["arguments"] += tc.function.arguments
        reason = choice.finish_reason or reason
    return content or None, [(c["id"], c["name"], c["arguments"]) for _, c in sorted(calls.items())], reason


@pytest.mark.parametrize(("cls", "name", "text"), CASES, ids=[f"{c.name}:{n}" for c, n, _ in CASES])
def test_openai_sdk_reads_the_stream(cls, name, text):
    ChatCompletionStreamState = pytest.importorskip("openai.lib.streaming.chat").ChatCompletionStreamState

    expected = parse(cls, text)
    rng = random.Random(name)
    cuts = rng.sample(range(len(text) + 1), k=min(len(text) + 1, 7))
    _, deltas = run(cls, split_at(text, cuts))
    chunks = sse_chunks(deltas, "stop")

    content, calls, reason = framework_accumulate(chunks)
    assert content == (expected.content or None)
    assert calls == [(c.id, c.name, c.arguments) for c in expected.tool_calls]
    assert reason == ("tool_calls" if expected.tool_calls else "stop")

    state = ChatCompletionStreamState()  # the SDK's own accumulator (client.chat.completions.stream)
    for chunk in chunks:
        state.handle_chunk(chunk)
    message = state.get_final_completion().choices[0].message
    assert (message.content or None) == (expected.content or None)
    got = [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or []]
    assert got == [(c.id, c.name, c.arguments) for c in expected.tool_calls]


def test_openai_sdk_reads_the_message():
    ChatCompletion = pytest.importorskip("openai.types.chat").ChatCompletion

    out = parse(HermesToolParser, HERMES_CORPUS["parallel calls"])
    raw = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": finish_reason("stop", tool_calls=True),
                "logprobs": None,
                "message": {
                    "role": "assistant",
                    "content": out.content,
                    "tool_calls": [c.to_openai() for c in out.tool_calls],
                },
            }
        ],
    }
    message = ChatCompletion.model_validate(raw).choices[0].message
    assert [json.loads(c.function.arguments) for c in message.tool_calls] == [
        {"city": "Paris", "unit": "celsius"},
        {},
    ]
    assert ToolCall("call_0", "get_weather", "{}").to_openai()["type"] == "function"
