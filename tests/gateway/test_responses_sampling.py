"""The sampling fields chat takes reach the engine from ``POST /v1/responses`` too (clients send
them through the openai SDK's ``extra_body``): before, the Responses request had no
``frequency_penalty`` or ``presence_penalty`` (nor ``stop``, ``top_k``, ``min_p``,
``repetition_penalty``, ...), so they were decoded away and the reply ignored them. Now each is
checked with chat's range (a 400 in OpenAI's shape naming the field) and handed to the engine as
chat hands it; ``n`` and ``top_logprobs``, which a response cannot honour, are a 400 naming them.
A gateway in this process over a scripted engine that records the sampling parameters it gets."""

from __future__ import annotations

import pytest

from agentgate.engine.model_files.model_path import default_model_path
from agentgate.engine.sampling_params import SamplingParams
from agentgate.engine.text.tokenizer import load_tokenizer
from agentgate.gateway.config.settings import Settings
from tests.support.scripted_engine import scripted_gateway

CHAT = [{"role": "user", "content": "Say hello."}]
EXTRAS = {
    "frequency_penalty": 1.5,
    "presence_penalty": -0.5,
    "seed": 7,
    "stop": ["\n\n"],
    "top_k": 5,
    "min_p": 0.05,
    "repetition_penalty": 1.2,
    "logit_bias": {"42": 3.0},
    "min_tokens": 1,
    "stop_token_ids": [13],
}


@pytest.fixture(scope="module")
def gateway():
    reply = load_tokenizer(default_model_path()).encode("Hello.", add_special_tokens=False) + [2]
    seen: list[SamplingParams] = []

    def script(_request_id: str, params: SamplingParams) -> list[int]:
        seen.append(params)
        return reply

    with scripted_gateway(Settings(), script, redis=False) as gw:
        yield gw, seen


def _sampling(params: SamplingParams) -> dict:
    return {
        "frequency_penalty": params.frequency_penalty,
        "presence_penalty": params.presence_penalty,
        "seed": params.seed,
        "stop": params.stop,
        "top_k": params.top_k,
        "min_p": params.min_p,
        "repetition_penalty": params.repetition_penalty,
        "logit_bias": params.logit_bias,
        "min_tokens": params.min_tokens,
        "stop_token_ids": params.stop_token_ids,
    }


def test_responses_pass_the_sampling_fields_to_the_engine_as_chat_does(gateway):
    gw, seen = gateway
    seen.clear()
    chat = gw.client.post("/v1/chat/completions", json={"messages": CHAT, "max_tokens": 8, **EXTRAS})
    assert chat.status_code == 200, chat.text
    r = gw.client.post("/v1/responses", json={"input": "Say hello.", "max_output_tokens": 8, "store": False, **EXTRAS})
    assert r.status_code == 200, r.text
    assert r.json()["frequency_penalty"] == 1.5 and r.json()["presence_penalty"] == -0.5  # echoed as used
    chat_params, responses_params = seen
    assert _sampling(responses_params) == _sampling(chat_params)
    assert _sampling(responses_params)["frequency_penalty"] == 1.5 and responses_params.top_k == 5


def test_without_them_a_response_samples_with_the_defaults(gateway):
    gw, seen = gateway
    seen.clear()
    r = gw.client.post("/v1/responses", json={"input": "Say hello.", "max_output_tokens": 8, "store": False})
    assert r.status_code == 200, r.text
    [params] = seen
    assert (params.frequency_penalty, params.presence_penalty, params.stop, params.min_tokens) == (0.0, 0.0, [], 0)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("frequency_penalty", 2.5),
        ("presence_penalty", -3),
        ("top_k", -2),
        ("min_p", 1.5),
        ("repetition_penalty", 0),
        ("frequency_penalty", "high"),
        ("temperature", 2.5),
        ("top_p", 0),
    ],
)
def test_a_value_out_of_chats_range_is_a_400_naming_the_field(gateway, field, value):
    gw, seen = gateway
    seen.clear()
    body = {"input": "Say hello.", "max_output_tokens": 8, "store": False, field: value}
    r = gw.client.post("/v1/responses", json=body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == field and error["type"] == "invalid_request_error" and field in error["message"]
    chat = gw.client.post("/v1/chat/completions", json={"messages": CHAT, "max_tokens": 8, field: value})
    assert chat.status_code == 400 and chat.json()["error"] == error  # the same error as chat's
    assert not seen, "a refused request reached the engine"


@pytest.mark.parametrize(("field", "value"), [("n", 2), ("top_logprobs", 3)])
def test_what_a_response_cannot_honour_is_a_400_not_dropped(gateway, field, value):
    gw, seen = gateway
    seen.clear()
    r = gw.client.post("/v1/responses", json={"input": "Say hello.", "store": False, field: value})
    assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text
    assert not seen
    nothing = {"n": 1, "top_logprobs": 0}[field]  # the value that asks for nothing more is taken
    ok = gw.client.post("/v1/responses", json={"input": "Hi.", "max_output_tokens": 8, "store": False, field: nothing})
    assert ok.status_code == 200, ok.text
