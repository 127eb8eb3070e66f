"""Each error case: its status and an OpenAI error body (gateway server:
max_model_len 1024, 64 KiB body limit)."""

from __future__ import annotations

import httpx
import pytest

from tests.support.http import chat_body

CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "hi"}]


def _nested(depth: int) -> str:
    """A JSON schema holding a value nested ``depth`` deep (as text: Python's json would not write it)."""
    return '{"type": "object", "default": ' + '{"a": [' * (depth // 2) + "]}" * (depth // 2) + "}"


# Formatted by hand: a table of cases, one per entry.
CASES = [
    # (name, path, raw body or json, status, param, code)
    ("malformed JSON", CHAT, b'{"messages": [', 400, None, "invalid_json"),
    ("empty body", CHAT, b"", 400, None, "invalid_json"),
    ("not an object", CHAT, b"[1, 2]", 400, None, "invalid_type"),
    ("wrong type", CHAT, {"messages": MESSAGES, "max_tokens": "ten"}, 400, "max_tokens", "invalid_type"),
    ("nested wrong type", CHAT, {"messages": [{"role": 1, "content": "x"}]}, 400, "messages[0].role", "invalid_type"),
    ("missing field", CHAT, {"max_tokens": 3}, 400, "messages", "invalid_type"),
    ("no messages", CHAT, {"messages": []}, 400, "messages", None),
    ("bad value", CHAT, {"messages": MESSAGES, "top_p": 0}, 400, "top_p", None),
    ("n out of range", CHAT, {"messages": MESSAGES, "n": 0}, 400, "n", None),
    ("top_logprobs alone", CHAT, {"messages": MESSAGES, "top_logprobs": 2}, 400, "top_logprobs", None),
    ("logit bias outside the vocabulary", CHAT, {"messages": MESSAGES, "logit_bias": {"99999999": 1}}, 400,
     "logit_bias", None),
    ("unknown model", CHAT, {"model": "gpt-9", "messages": MESSAGES}, 404, "model", "model_not_found"),
    ("prompt + max_tokens over the context", CHAT, {"messages": MESSAGES, "max_tokens": 1020}, 400, "max_tokens",
     "context_length_exceeded"),
    ("prompt over the context", "/v1/completions", {"prompt": [5] * 1024, "max_tokens": 1}, 400, "prompt",
     "context_length_exceeded"),
    ("prompt ids outside the vocabulary", "/v1/completions", {"prompt": [1, 10**6]}, 400, "prompt", None),
    ("mixed prompt batch", "/v1/completions", {"prompt": ["a", [1]]}, 400, "prompt", None),
    ("echo with logprobs", "/v1/completions", {"prompt": "a", "echo": True, "logprobs": 1}, 400, "echo", None),
    ("tokenize neither form", "/tokenize", {"model": None}, 400, "prompt", None),
    ("detokenize bad ids", "/detokenize", {"tokens": [-1]}, 400, "tokens", None),
    # issue 18: these were 500s or were accepted
    ("template kwargs set add_generation_prompt", CHAT,
     {"messages": MESSAGES, "chat_template_kwargs": {"add_generation_prompt": False}}, 400, "chat_template_kwargs",
     None),
    ("template kwargs set tools", CHAT, {"messages": MESSAGES, "chat_template_kwargs": {"tools": []}}, 400,
     "chat_template_kwargs", None),
    ("tools nested 2,000 deep", CHAT, ('{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": '
     '"function", "function": {"name": "f", "parameters": %s}}]}' % _nested(2000)).encode(), 400, "tools", "too_deep"),
    ("response_format nested 2,000 deep", CHAT, ('{"messages": [{"role": "user", "content": "hi"}], '
     '"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": %s}}}' % _nested(2000)).encode(),
     400, "response_format", "too_deep"),
    ("unknown role", CHAT, {"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages[0].role",
     "invalid_type"),
    ("tool message without tool_call_id", CHAT, {"messages": [*MESSAGES, {"role": "tool", "content": "42"}]}, 400,
     "messages[1].tool_call_id", None),
    ("best_of", "/v1/completions", {"prompt": "a", "best_of": 1000}, 400, "best_of", None),
    ("n x prompts over the cap", "/v1/completions", {"prompt": ["hi"] * 2000, "max_tokens": 1}, 400, "prompt",
     "too_many_generations"),
    ("n x prompts over the cap (n)", "/v1/completions", {"prompt": ["hi"] * 2, "n": 100, "max_tokens": 1}, 400,
     "prompt", "too_many_generations"),
    ("a prompt too long to tokenize", "/v1/completions", {"prompt": "x" * 60_000, "max_tokens": 1}, 400, "prompt",
     "context_length_exceeded"),
]  # fmt: skip


def _check(r: httpx.Response, status: int, param, code) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json" and r.headers.get("x-request-id")
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert error["param"] == param
    if code is not None:
        assert error["code"] == code
    return error


@pytest.mark.parametrize(("name", "path", "body", "status", "param", "code"), CASES, ids=[c[0] for c in CASES])
def test_error_case(gateway, name, path, body, status, param, code):
    kwargs = {"content": body} if isinstance(body, bytes) else {"json": body}
    r = gateway.client.post(path, headers=gateway.headers, timeout=30, **kwargs)
    error = _check(r, status, param, code)
    assert error["type"] == "invalid_request_error"


def test_errors_in_a_stream_request_come_back_before_it_streams(gateway):
    r = gateway.client.post(CHAT, json={**chat_body(2000), "stream": True}, headers=gateway.headers)
    _check(r, 400, "max_tokens", "context_length_exceeded")


def test_oversized_body_is_a_413(gateway):
    big = {"messages": [{"role": "user", "content": "x" * 70_000}]}
    r = gateway.client.post(CHAT, json=big, headers=gateway.headers)
    _check(r, 413, None, "request_too_large")

    def chunks():  # no Content-Length: the limit applies while reading
        for _ in range(20):
            yield b" " * 4096

    r = gateway.client.post(CHAT, content=chunks(), headers=gateway.headers)
    _check(r, 413, None, "request_too_large")


def test_unknown_route_and_method(gateway):
    r = gateway.client.get("/v1/nothing", headers=gateway.headers)
    assert r.status_code == 404 and r.json()["error"]["message"]
    r = gateway.client.get(CHAT, headers=gateway.headers)
    assert r.status_code == 405 and r.json()["error"]["type"] == "invalid_request_error"


def test_unknown_fields_are_ignored(gateway):
    body = {**chat_body(2, stream=False), "some_future_field": {"x": 1}, "metadata": {"a": "b"}, "store": False}
    assert gateway.client.post(CHAT, json=body, headers=gateway.headers).status_code == 200


def test_tools_tool_choice_and_response_format_are_accepted(gateway):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    body = {
        **chat_body(2, stream=False),
        "tools": tools,
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "response_format": {"type": "text"},
    }
    r = gateway.client.post(CHAT, json=body, headers=gateway.headers)
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "length"
    # A constraint needs a grammar, which the null runner (no tokenizer) cannot compile: a 400 that says so.
    r = gateway.client.post(CHAT, json={**body, "response_format": {"type": "json_object"}}, headers=gateway.headers)
    assert r.status_code == 400 and "cannot be enforced" in r.json()["error"]["message"], r.text


def test_tools_reach_the_chat_template_whatever_tool_choice_says():
    from agentgate.engine.model_files.model_path import default_model_path
    from agentgate.engine.text.tokenizer import load_tokenizer
    from agentgate.gateway.api_types.openai import ChatCompletionRequest, decode_body
    from agentgate.gateway.prompts import chat_prompt

    tokenizer = load_tokenizer(default_model_path())
    tools = [{"type": "function", "function": {"name": "f"}}]
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    request = decode_body(
        msgspec_json({"messages": [{"role": "user", "content": parts}], "tools": tools}), ChatCompletionRequest
    )
    text = tokenizer.decode(chat_prompt(tokenizer, request), skip_special_tokens=False)
    assert '<tools>\n{"type": "function", "function": {"name": "f"}}\n</tools>' in text
    assert text.endswith("<|im_start|>user\nab<|im_end|>\n<|im_start|>assistant\n")
    request = decode_body(
        msgspec_json({"messages": [{"role": "user"}], "tools": tools, "tool_choice": "none"}), ChatCompletionRequest
    )
    text = tokenizer.decode(chat_prompt(tokenizer, request), skip_special_tokens=False)
    assert "<tools>" in text and text.endswith("<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n")  # issue 35


def msgspec_json(value) -> bytes:
    import msgspec

    return msgspec.json.encode(value)
