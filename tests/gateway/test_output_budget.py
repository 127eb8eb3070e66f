"""The output budget (issue 28): ``--max-tokens-default`` for requests that set none and
``--max-tokens-cap`` as a ceiling, on chat completions, completions, Responses and Anthropic
Messages: over the cap is a 400 naming the request's own parameter, unset gets the default
(clipped to what the context leaves), both flags are ``AGENTGATE_*`` variables and the
start-up line prints them. The in-process gateway in front of a real null-runner engine:
the tokens counted are the engine's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentgate.gateway.admission.output_budget import DEFAULT_MAX_TOKENS, OutputBudget
from agentgate.gateway.command.cli import build_parser, settings_from_args
from agentgate.gateway.config.settings import Settings
from agentgate.gateway.errors import BadRequestError
from agentgate.gateway.http.app import startup_line
from tests.support.inprocess import InProcessGateway

DEFAULT, CAP = 6, 40
HI = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def gw() -> Iterator[InProcessGateway]:
    with InProcessGateway(Settings(max_tokens_default=DEFAULT, max_tokens_cap=CAP), redis=True) as gateway:
        yield gateway


def _error(r, param: str) -> str:
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param, error
    return error["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_over_the_cap_is_a_400_naming_the_parameter(gw, stream):
    post = gw.client.post
    for field in ("max_tokens", "max_completion_tokens"):
        message = _error(post("/v1/chat/completions", json={"messages": HI, field: CAP + 1, "stream": stream}), field)
        assert f"`{field}` is {CAP + 1}" in message and f"limit of {CAP}" in message and "--max-tokens-cap" in message
    _error(post("/v1/completions", json={"prompt": "Hi", "max_tokens": CAP + 1, "stream": stream}), "max_tokens")
    r = post("/v1/responses", json={"input": "Hi", "max_output_tokens": CAP + 1, "store": False, "stream": stream})
    assert "`max_output_tokens` is 41" in _error(r, "max_output_tokens")
    r = post(
        "/v1/messages", json={"messages": HI, "max_tokens": CAP + 1, "model": "SmolLM2-135M-Instruct", "stream": stream}
    )
    assert r.status_code == 400 and r.json()["type"] == "error", r.text  # Anthropic's shape
    assert r.json()["error"]["type"] == "invalid_request_error" and "`max_tokens` is 41" in r.json()["error"]["message"]


def test_at_the_cap_runs_and_unset_gets_the_default(gw):
    post = gw.client.post
    chat = post("/v1/chat/completions", json={"messages": HI, "max_tokens": CAP, "ignore_eos": True}).json()
    assert chat["usage"]["completion_tokens"] == CAP and chat["choices"][0]["finish_reason"] == "length"
    chat = post("/v1/chat/completions", json={"messages": HI, "ignore_eos": True}).json()
    assert chat["usage"]["completion_tokens"] == DEFAULT and chat["choices"][0]["finish_reason"] == "length"
    completion = post("/v1/completions", json={"prompt": "Hi", "ignore_eos": True}).json()
    assert completion["usage"]["completion_tokens"] == DEFAULT  # below OpenAI's 16 for completions
    response = post("/v1/responses", json={"input": "Hi", "store": False}).json()
    assert response["usage"]["output_tokens"] <= DEFAULT, response
    message = post("/v1/messages", json={"messages": HI, "max_tokens": CAP, "model": "SmolLM2-135M-Instruct"}).json()
    assert message["usage"]["output_tokens"] <= CAP


def test_the_default_is_clipped_to_the_context_an_explicit_value_is_not():
    budget = OutputBudget(default=500, cap=None)
    assert budget.resolve(None, prompt_tokens=700, max_model_len=1024) == 324
    with pytest.raises(BadRequestError) as info:
        budget.resolve(500, prompt_tokens=700, max_model_len=1024, param="max_output_tokens")
    assert info.value.param == "max_output_tokens"
    assert OutputBudget(None, None).resolve(None, prompt_tokens=10, max_model_len=1024) is None  # up to the context
    assert OutputBudget(None, 64).resolve(None, prompt_tokens=10, max_model_len=1024) == 64  # the cap bounds it
    assert OutputBudget(2048, 64).resolve(None, prompt_tokens=10, max_model_len=1024) == 64
    assert OutputBudget(2048, None).resolve(None, prompt_tokens=10, max_model_len=1024, api_default=16) == 16


def test_flags_environment_and_start_up_line(gw, monkeypatch):
    for key in ("AGENTGATE_MAX_TOKENS_DEFAULT", "AGENTGATE_MAX_TOKENS_CAP"):
        monkeypatch.delenv(key, raising=False)
    parse = lambda *argv: settings_from_args(build_parser().parse_args(["serve", *argv]))  # noqa: E731
    assert (parse().max_tokens_default, parse().max_tokens_cap) == (DEFAULT_MAX_TOKENS, None)
    s = parse("--max-tokens-default", "100", "--max-tokens-cap", "300")
    assert (s.max_tokens_default, s.max_tokens_cap) == (100, 300)
    monkeypatch.setenv("AGENTGATE_MAX_TOKENS_DEFAULT", "0")
    monkeypatch.setenv("AGENTGATE_MAX_TOKENS_CAP", "512")
    s = parse()
    assert (s.max_tokens_default, s.max_tokens_cap) == (0, 512)
    assert OutputBudget.from_flags(0, 512) == OutputBudget(None, 512)
    with pytest.raises(ValueError, match="max_tokens_cap"):
        Settings(max_tokens_cap=0)
    with pytest.raises(ValueError, match="max_tokens_default"):
        Settings(max_tokens_default=-1)
    line = startup_line(gw.settings, gw.state)
    assert f"max_tokens default {DEFAULT}, cap {CAP}" in line
    assert OutputBudget().describe() == "max_tokens default 2,048, cap none"
