"""Sampling defaults for the fields a request leaves unset: flags, else the model's
generation_config.json (as vLLM reads it), else for a GGUF SmolLM2's recommended sampling."""

from __future__ import annotations

import json

from agentgate.gateway.api_types.openai import ChatCompletionRequest, ChatMessage
from agentgate.gateway.config.sampling_defaults import GGUF_DEFAULTS, OPENAI_DEFAULTS, sampling_defaults
from agentgate.gateway.prompts import sampling_params

NO_FLAGS = {"temperature": None, "top_p": None, "top_k": None, "min_p": None, "repetition_penalty": None}


def test_generation_config_beside_the_weights_then_flags(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    (tmp_path / "generation_config.json").write_text(
        json.dumps({"temperature": 0.6, "top_p": 0.95, "top_k": 20, "eos_token_id": 2})
    )
    defaults = sampling_defaults(tmp_path, NO_FLAGS)
    assert (defaults.temperature, defaults.top_p, defaults.top_k, defaults.min_p) == (0.6, 0.95, 20, 0.0)
    assert "generation_config.json" in defaults.describe()
    flagged = sampling_defaults(tmp_path, {**NO_FLAGS, "temperature": 0.0, "top_k": 5.0})
    assert (flagged.temperature, flagged.top_p, flagged.top_k) == (0.0, 0.95, 5) and "flags" in flagged.source


def test_a_gguf_without_one_gets_the_documented_server_defaults_and_a_directory_openais(tmp_path):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"")
    assert sampling_defaults(gguf, NO_FLAGS) == GGUF_DEFAULTS and GGUF_DEFAULTS.temperature == 0.2
    assert sampling_defaults(tmp_path, NO_FLAGS) == OPENAI_DEFAULTS


def test_a_request_field_wins_over_the_default():
    request = ChatCompletionRequest(messages=[ChatMessage(role="user", content="hi")], top_p=0.5)
    params = sampling_params(request, max_tokens=4, logprobs=None, vocab_size=100, defaults=GGUF_DEFAULTS)
    assert (params.temperature, params.top_p) == (0.2, 0.5)
