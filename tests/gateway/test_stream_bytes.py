"""The bytes every API writes for a scripted reply, exactly as recorded before issue 37's
redesign of the gateway: a tool call (``tool_choice`` required, so through the grammar and
the primed stream; and ``auto``, parsed from free text), plain text, whole replies, on chat
completions, completions, the Responses API and the Anthropic Messages API.

The engine is the null runner replying a script (``tests.support.scripted_engine``), so the
tokens are the same on every run; what differs between runs is normalised before the
comparison, deterministically: timestamps become 0, and each random id (``call_...``,
``resp_...``, ``msg_...``, ``fc_...``, ``toolu_...``) becomes its prefix and the order it
first appeared in (``call_1``). Everything else, framing, field order, line endings, chunk
boundaries and usage included, must match byte for byte.

Set ``AGENTGATE_RECORD_STREAM_BYTES=1`` to write the recording again (only when a change of
the bytes is meant: say so in the commit).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentgate.engine.model_files.model_path import default_model_path
from agentgate.engine.text.tokenizer import load_tokenizer
from agentgate.gateway.config.settings import Settings
from tests.support.scripted_engine import ScriptedGateway, scripted_gateway

RECORDING = Path(__file__).with_name("stream_bytes.json")
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TEXT = "Hello there! It is sunny in Paris, 21 °C."
EOS = 2  # <|im_end|>
TOOL = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]
# The forced calls' budget: room past its last tokens, where it narrows the grammar and a call
# finished there is said to be cut (issue 35; at 60 this ~25-token call ended there, as length).
CHAT_TOOLS = {"tools": [{"type": "function", "function": TOOL}], "max_tokens": 120}
RESPONSES_TOOLS = {"tools": [{"type": "function", **TOOL}], "max_output_tokens": 120}
ANTHROPIC_TOOLS = {"tools": [{"name": TOOL["name"], "input_schema": TOOL["parameters"]}], "max_tokens": 120}

# name -> (path, body, headers). The request id says what the scripted engine replies: the tool
# call when it holds "tool", else the text.
REQUESTS: dict[str, tuple[str, dict[str, Any], dict[str, str]]] = {
    "chat_tool_required_stream": (
        "/v1/chat/completions",
        {
            "messages": MESSAGES,
            **CHAT_TOOLS,
            "tool_choice": "required",
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        {"X-Request-Id": "tool-1", "X-Session-Id": "walk"},
    ),
    "chat_tool_auto_stream": (
        "/v1/chat/completions",
        {"messages": MESSAGES, **CHAT_TOOLS, "stream": True},
        {"X-Request-Id": "tool-2"},
    ),
    "chat_text_stream": (
        "/v1/chat/completions",
        {"messages": MESSAGES, "max_tokens": 60, "stream": True, "stream_options": {"include_usage": True}},
        {"X-Request-Id": "text-1"},
    ),
    "chat_tool_required_whole": (
        "/v1/chat/completions",
        {"messages": MESSAGES, **CHAT_TOOLS, "tool_choice": "required"},
        {"X-Request-Id": "tool-3"},
    ),
    "completions_text_stream": (
        "/v1/completions",
        {
            "prompt": "The weather in Paris is",
            "max_tokens": 60,
            "stream": True,
            "echo": True,
            "stream_options": {"include_usage": True},
        },
        {"X-Request-Id": "text-2"},
    ),
    "completions_text_whole": (
        "/v1/completions",
        {"prompt": "The weather in Paris is", "max_tokens": 60},
        {"X-Request-Id": "text-3"},
    ),
    "responses_tool_required_stream": (
        "/v1/responses",
        {"input": "What is the weather in Paris?", **RESPONSES_TOOLS, "tool_choice": "required", "stream": True},
        {"X-Request-Id": "tool-4"},
    ),
    "responses_text_stream": (
        "/v1/responses",
        {"input": "What is the weather in Paris?", "max_output_tokens": 60, "stream": True},
        {"X-Request-Id": "text-4"},
    ),
    "responses_tool_auto_whole": (
        "/v1/responses",
        {"input": "What is the weather in Paris?", **RESPONSES_TOOLS},
        {"X-Request-Id": "tool-5"},
    ),
    "anthropic_tool_any_stream": (
        "/v1/messages",
        {"model": "m", "messages": MESSAGES, **ANTHROPIC_TOOLS, "tool_choice": {"type": "any"}, "stream": True},
        {"X-Request-Id": "tool-6"},
    ),
    "anthropic_text_stream": (
        "/v1/messages",
        {"model": "m", "messages": MESSAGES, "max_tokens": 60, "stream": True},
        {"X-Request-Id": "text-5"},
    ),
    "anthropic_tool_auto_whole": (
        "/v1/messages",
        {"model": "m", "messages": MESSAGES, **ANTHROPIC_TOOLS},
        {"X-Request-Id": "tool-7"},
    ),
}

TIMESTAMP = re.compile(r'"(created|created_at|completed_at)":\d+')
RANDOM_ID = re.compile(r"\b(call|resp|msg|fc|toolu)_[0-9A-Za-z]{16,}")


def normalise(text: str) -> str:
    """``text`` with timestamps at 0 and random ids numbered in order of appearance."""
    text = TIMESTAMP.sub(lambda m: f'"{m.group(1)}":0', text)
    seen: dict[str, str] = {}

    def number(match: re.Match[str]) -> str:
        prefix = match.group(1)
        if match.group(0) not in seen:
            seen[match.group(0)] = f"{prefix}_{sum(k.startswith(prefix + '_') for k in seen) + 1}"
        return seen[match.group(0)]

    return RANDOM_ID.sub(number, text)


@pytest.fixture(scope="module")
def gateway() -> Iterator[ScriptedGateway]:
    tokenizer = load_tokenizer(default_model_path())
    call, text = (tokenizer.encode(t, add_special_tokens=False) + [EOS] for t in (CALL, TEXT))
    # The model is named in the Anthropic requests ("m"): the gateway serves it under that name too.
    with scripted_gateway(
        Settings(served_model_name=("SmolLM2", "m")), lambda rid, _params: call if "tool" in rid else text
    ) as gw:
        yield gw


def test_every_api_writes_the_bytes_it_wrote_before(gateway: ScriptedGateway):
    got = {}
    for name, (path, body, headers) in REQUESTS.items():  # in order: the prefix cache's hits are in the usage
        response = gateway.client.post(path, json=body, headers=headers)
        assert response.status_code == 200, (name, response.text)
        got[name] = normalise(response.content.decode())
    if os.environ.get("AGENTGATE_RECORD_STREAM_BYTES") == "1":
        RECORDING.write_text(json.dumps(got, indent=1, ensure_ascii=False) + "\n")
    recorded = json.loads(RECORDING.read_text())
    assert got.keys() == recorded.keys()
    for name in REQUESTS:
        assert got[name] == recorded[name], f"{name}: the bytes differ from the recording"


def test_normalising_numbers_ids_in_order_and_zeroes_timestamps():
    text = '{"id":"resp_' + "a" * 48 + '","created_at":1796301082,"x":"call_' + "B" * 24 + '","y":"resp_' + "a" * 48
    assert normalise(text + '"}') == '{"id":"resp_1","created_at":0,"x":"call_1","y":"resp_1"}'
