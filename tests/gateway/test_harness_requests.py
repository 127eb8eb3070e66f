"""The requests Codex CLI (0.171.0, Responses API) and Claude Code (2.1.332, Messages API)
send at their defaults, captured from the CLIs themselves (tests/gateway/test_harness_clis.py
records them through a proxy) and replayed here in-process, so a change that breaks them
fails fast; and the pieces they need, one by one (issue 49)."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from pathlib import Path

import httpx
import pytest

from agentgate.engine.model_files.model_path import default_model_path
from agentgate.engine.text.tokenizer import load_tokenizer
from agentgate.gateway.anthropic_api.context_edits import apply_edits
from agentgate.gateway.config.settings import Settings
from agentgate.gateway.errors import BadRequestError
from agentgate.gateway.tools.system_turns import place_system_turns, renders_later_system
from tests.support.http import metrics
from tests.support.inprocess import NULL_ENGINE, InProcessGateway
from tests.support.mcp_scripts import script
from tests.support.scripted_engine import scripted_gateway
from tests.support.templates import QWEN25

FIXTURES = Path(__file__).parent / "harness_requests"
CODEX = json.loads((FIXTURES / "codex_0.171.0_first_request.json").read_text())
CLAUDE = json.loads((FIXTURES / "claude_code_2.1.332_first_request.json").read_text())
MISTRAL_LIKE = (  # a template that allows a system message only first, as Mistral's and Gemma's do
    "{% for m in messages %}{% if m.role == 'system' and not loop.first %}"
    "{{ raise_exception('system message only at the beginning') }}{% endif %}[{{ m.role }}]{{ m.content }}{% endfor %}"
)


@pytest.fixture(scope="module")
def harness_gateway():
    """What the harness docs name: a 32k context (null runner), overflowing max_tokens clamped,
    hosted tools it cannot run left out. Steps take no time: Claude Code's first request, clamped,
    decodes some 20,000 tokens (82 s at the shared null engine's 4 ms a step)."""
    settings = Settings(max_tokens_overflow="clamp", omit_unrunnable_tools=True)
    with InProcessGateway(settings, dataclasses.replace(NULL_ENGINE, max_model_len=32768, null_step_seconds=0.0)) as gw:
        yield gw


@pytest.fixture(scope="module")
def strict_gateway():
    with InProcessGateway(Settings(), dataclasses.replace(NULL_ENGINE, max_model_len=32768)) as gw:
        yield gw


def _codex(**changes):
    return copy.deepcopy(CODEX["body"]) | {"stream": False, "max_output_tokens": 8} | changes


def test_codex_first_request_is_served_with_its_namespace_and_hosted_tool_left_out(harness_gateway):
    r = harness_gateway.client.post("/v1/responses", json=_codex())
    assert r.status_code == 200, r.text
    assert r.headers["x-agentgate-omitted-tools"] == "web_search"
    body = r.json()
    assert body["usage"]["input_tokens"] > 8000  # the namespace's functions are in the prompt
    assert [t["type"] for t in body["tools"]].count("namespace") == 1


def test_codex_first_request_without_the_omit_flag_names_its_hosted_tool(strict_gateway):
    r = strict_gateway.client.post("/v1/responses", json=_codex())
    assert r.status_code == 400
    index = [t["type"] for t in CODEX["body"]["tools"]].index("web_search")
    assert r.json()["error"]["param"] == f"tools[{index}].type"
    assert "web_search" in r.json()["error"]["message"]


def test_a_forced_call_of_a_namespace_tool_comes_back_with_its_namespace(model_server):
    """On the default model (the grammar needs its tokenizer): a namespace's call, and back."""
    namespace = next(t for t in CODEX["body"]["tools"] if t["type"] == "namespace")
    namespace = namespace | {"tools": [t for t in namespace["tools"] if t["name"] == "close_agent"]}
    body = {"input": "close it", "tools": [namespace], "tool_choice": "required", "parallel_tool_calls": False}
    r = httpx.post(f"{model_server.url}/v1/responses", json=body | {"max_output_tokens": 200}, timeout=120)
    assert r.status_code == 200, r.text
    calls = [item for item in r.json()["output"] if item["type"] == "function_call"]
    assert calls and all(c["namespace"] == namespace["name"] for c in calls)
    assert {c["name"] for c in calls} <= {t["name"] for t in namespace["tools"]}
    follow = {  # the call and its output, sent back as Codex does, read as the same tool's
        "input": [{"type": "message", "role": "user", "content": "spawn"}, calls[0]]
        + [{"type": "function_call_output", "call_id": calls[0]["call_id"], "output": "done"}],
        "tools": [namespace],
        "max_output_tokens": 4,
    }
    assert httpx.post(f"{model_server.url}/v1/responses", json=follow, timeout=120).status_code == 200


def test_a_custom_tool_with_a_regex_grammar_gets_input_that_matches_it(model_server):
    tool = {
        "type": "custom",
        "name": "code",
        "format": {"type": "grammar", "syntax": "regex", "definition": "[a-c]{3}"},
    }
    body = {"input": "go", "tools": [tool], "tool_choice": "required", "max_output_tokens": 60}
    r = httpx.post(f"{model_server.url}/v1/responses", json=body | {"parallel_tool_calls": False}, timeout=120)
    assert r.status_code == 200, r.text
    calls = [item for item in r.json()["output"] if item["type"] == "custom_tool_call"]
    assert calls and all(re.fullmatch("[a-c]{3}", c["input"]) for c in calls)


def test_a_custom_tool_with_a_lark_grammar_is_a_400_naming_the_syntax(harness_gateway):
    tool = {"type": "custom", "name": "p", "format": {"type": "grammar", "syntax": "lark", "definition": "start: /a/"}}
    r = harness_gateway.client.post("/v1/responses", json={"input": "go", "tools": [tool]})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "tools[0].format.syntax" and "lark" in r.json()["error"]["message"]


def _claude(gateway, body=None, beta=None):
    headers = {**CLAUDE["headers"], **({"anthropic-beta": beta} if beta is not None else {})}
    body = body or (copy.deepcopy(CLAUDE["body"]) | {"stream": False})
    return gateway.client.post("/v1/messages", json=body, headers=headers)


def test_claude_code_first_request_is_served_with_its_max_tokens_clamped(harness_gateway):
    r = _claude(harness_gateway)
    assert r.status_code == 200, r.text
    message = r.json()
    assert message["stop_reason"] == "max_tokens"  # the room left ended it, and it says so
    usage = message["usage"]  # the prompt is input_tokens plus what the cache read, as Anthropic counts
    assert usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["output_tokens"] == 32768


def test_claude_code_first_request_without_the_clamp_is_a_400_on_max_tokens(strict_gateway):
    r = _claude(strict_gateway)
    assert r.status_code == 400 and "max_tokens" in r.json()["error"]["message"]


def test_its_system_message_inside_messages_is_in_the_prompt(harness_gateway):
    body = {k: CLAUDE["body"][k] for k in ("model", "messages", "system", "tools")}
    whole = harness_gateway.client.post("/v1/messages/count_tokens", json=body, headers=CLAUDE["headers"])
    without = body | {"messages": [m for m in body["messages"] if m["role"] != "system"]}
    less = harness_gateway.client.post("/v1/messages/count_tokens", json=without, headers=CLAUDE["headers"])
    assert whole.status_code == less.status_code == 200
    assert whole.json()["input_tokens"] > less.json()["input_tokens"] + 500


def test_an_unknown_beta_is_a_400_naming_it(harness_gateway):
    r = _claude(harness_gateway, beta=CLAUDE["headers"]["anthropic-beta"] + ",files-api-2025-04-14")
    assert r.status_code == 400
    assert "files-api-2025-04-14" in r.json()["error"]["message"]
    assert "claude-code-20250219" not in r.json()["error"]["message"].split("(")[0]


def test_clear_thinking_keeps_the_last_turns_asked_for():
    def turn(n):
        return {
            "role": "assistant",
            "content": [{"type": "thinking", "thinking": f"t{n}"}, {"type": "text", "text": "x"}],
        }

    messages = [turn(1), {"role": "user", "content": "u"}, turn(2), {"role": "user", "content": "u"}, turn(3)]
    edit = {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}}
    kept = apply_edits(messages, {"edits": [edit]})
    assert [sum(b["type"] == "thinking" for b in m["content"]) for m in kept[::2]] == [0, 0, 1]
    assert apply_edits(messages, {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}) == messages
    assert messages[0]["content"][0]["type"] == "thinking"  # the request's own messages are untouched
    with pytest.raises(BadRequestError, match="clear_tool_uses_20250919"):
        apply_edits(messages, {"edits": [{"type": "clear_tool_uses_20250919"}]})


def test_a_later_system_message_is_a_turn_or_folded_into_a_user_turn_per_template():
    messages = [{"role": "user", "content": "hi"}, {"role": "system", "content": "S"}]
    assert renders_later_system(QWEN25, ())
    assert place_system_turns(QWEN25, messages, {}) == messages
    assert not renders_later_system(MISTRAL_LIKE, ())
    assert place_system_turns(MISTRAL_LIKE, messages, {}) == [{"role": "user", "content": "hi\n\nS"}]
    later = [*messages, {"role": "user", "content": "next"}]
    assert place_system_turns(MISTRAL_LIKE, later, {})[-1] == {"role": "user", "content": "S\n\nnext"}


def test_turns_that_keep_their_own_history_are_one_program_by_their_prompt_cache_key():
    """Codex sends every turn as a new chain (store false, no previous_response_id) with its session
    as prompt_cache_key: the turns are one program, so the turn after a tool call returns to its pin
    (another key is another program). Each turn was a new program before."""
    city = {"type": "object", "properties": {"city": {"type": "string"}}}
    tool = {"type": "function", "name": "get_weather", "parameters": city}
    settings = Settings(served_model_name=("m",))
    with scripted_gateway(settings, script(load_tokenizer(default_model_path()))) as gateway:

        def turn(request_id: str, key: str, items: list) -> dict:
            body = {"model": "m", "input": items, "tools": [tool], "store": False, "prompt_cache_key": key}
            r = gateway.client.post("/v1/responses", json=body, headers={"X-Request-Id": request_id})
            assert r.status_code == 200, r.text
            return r.json()

        def returning() -> float:  # pins released because their program's next turn came
            return metrics(gateway.client)["agentgate_kv_retention_released_returned_total"]

        asked = [{"role": "user", "content": "The weather in Paris?"}]
        first = turn("client-1", "session-a", asked)
        assert first["prompt_cache_key"] == "session-a"  # echoed, as OpenAI's response object does
        [call] = [item for item in first["output"] if item["type"] == "function_call"]
        answered = [*asked, call, {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}]
        before = returning()
        turn("client-2", "session-a", answered)
        assert returning() == before + 1, "the turn after the call did not come back to its program's pin"
        turn("client-3", "session-b", answered)
        assert returning() == before + 1, "another prompt_cache_key's turn took this program's pin"
