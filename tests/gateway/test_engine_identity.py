"""Whether a registered engine may serve a gateway (``gateway.engines.identity``): each reason
for a refusal, and the engines that match."""

from __future__ import annotations

import msgspec

from agentgate.gateway.engines.identity import GatewayModel, mismatch
from agentgate.gateway.engines.registry import EngineRecord

OURS = GatewayModel("SmolLM2-135M-Instruct", "aa2139a54f6a826b")
FIRST = EngineRecord(
    "tcp://10.0.0.1:5555",
    OURS.name,
    4096,
    8,
    "cpu",
    0.0,
    vocab_digest=OURS.vocab_digest,
    max_model_len=8192,
    dtype="bfloat16",
    quantization="gguf",
)


def _like_first(**changes) -> EngineRecord:
    return msgspec.structs.replace(FIRST, address="tcp://10.0.0.2:5555", **changes)


def test_an_engine_of_this_model_and_shape_matches():
    assert mismatch(FIRST, OURS, None) is None  # the first engine sets the shape
    assert mismatch(_like_first(kv_capacity_tokens=1, device="cuda:0"), OURS, FIRST) is None  # capacity may differ


def test_each_difference_is_a_refusal_that_says_what_differs():
    assert "carries no model identity" in mismatch(_like_first(vocab_digest=""), OURS, FIRST)
    assert "serves model 'other'" in mismatch(_like_first(model="other"), OURS, FIRST)
    assert "vocabulary (digest 0000)" in mismatch(_like_first(vocab_digest="0000"), OURS, FIRST)
    assert "max_model_len is 2048" in mismatch(_like_first(max_model_len=2048), OURS, FIRST)
    assert "dtype is 'float32'" in mismatch(_like_first(dtype="float32"), OURS, FIRST)
    assert "quantization is 'none'" in mismatch(_like_first(quantization="none"), OURS, FIRST)
