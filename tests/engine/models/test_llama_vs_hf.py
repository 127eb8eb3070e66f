"""Our decoder against transformers on tiny random models of each family."""

import pytest
import torch

from agentgate.engine.layers.rope import rope_tables
from agentgate.engine.loaders import load_model

LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 10000.0,
    "factor": 4.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
}

CASES = {
    "llama-untied": ("llama", dict(tie_word_embeddings=False)),
    "llama3-rope-tied": ("llama", dict(tie_word_embeddings=True, rope_parameters=LLAMA3_ROPE)),
    "llama-attention-bias": ("llama", dict(attention_bias=True, num_key_value_heads=1)),
    "mistral": ("mistral", dict(sliding_window=None, head_dim=16)),
    "qwen2-bias": (
        "qwen2",
        dict(tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
    ),
    "qwen3-qk-norm": ("qwen3", dict(head_dim=32, tie_word_embeddings=True)),
}

PROMPT_A = [(7 * i + 3) % 256 for i in range(23)]
PROMPT_B = [(11 * i + 5) % 256 for i in range(30)]


def hf_logits(hf_model, ids):
    with torch.no_grad():
        return hf_model(torch.tensor([ids])).logits[0].float()


@pytest.fixture(params=list(CASES), scope="module")
def case(request, tmp_path_factory, tiny_hf):
    family, overrides = CASES[request.param]
    path = tmp_path_factory.mktemp(request.param)
    hf = tiny_hf(path, family, **overrides)
    ours = load_model(path, dtype="float32")
    assert ours.config.architecture == family
    return hf, ours


def test_prefill_matches_transformers(case, paged_runner):
    hf, ours = case
    runner = paged_runner(ours.model, ours.config, block_size=16)
    logits = runner.step([(0, PROMPT_A)])
    torch.testing.assert_close(logits, hf_logits(hf, PROMPT_A), atol=1e-4, rtol=1e-4)


def test_paged_decode_matches_transformers(case, paged_runner):
    """Two sequences sharing steps: a mixed prefill, a chunked extend next to a
    decode, then batched decodes, through shuffled 4-token blocks."""
    hf, ours = case
    expect_a, expect_b = hf_logits(hf, PROMPT_A), hf_logits(hf, PROMPT_B)
    runner = paged_runner(ours.model, ours.config, block_size=4)
    got = runner.step([(0, PROMPT_A[:5]), (1, PROMPT_B[:9])])
    torch.testing.assert_close(got, torch.cat([expect_a[:5], expect_b[:9]]), atol=1e-4, rtol=1e-4)
    got = runner.step([(0, PROMPT_A[5:12]), (1, PROMPT_B[9:10])])
    torch.testing.assert_close(got, torch.cat([expect_a[5:12], expect_b[9:10]]), atol=1e-4, rtol=1e-4)
    for a, b in zip(range(12, 23), range(10, 21)):
        got = runner.step([(0, [PROMPT_A[a]]), (1, [PROMPT_B[b]])])
        torch.testing.assert_close(got, torch.stack([expect_a[a], expect_b[b]]), atol=1e-4, rtol=1e-4)


def test_rope_errors_would_show(tmp_path, tiny_hf, paged_runner):
    """The random weights are large enough that attention is far from
    uniform: a wrong RoPE would break the comparisons above by far more than
    their tolerance."""
    tiny_hf(tmp_path, "llama")
    ours = load_model(tmp_path, dtype="float32")
    right = paged_runner(ours.model, ours.config).step([(0, PROMPT_A)])
    c = ours.config
    wrong_cos, wrong_sin = rope_tables(
        c.head_dim, c.max_position_embeddings, 100.0, scaling=c.rope_scaling, freq_factors=c.rope_freq_factors
    )
    ours.model.rope_cos.copy_(wrong_cos)
    ours.model.rope_sin.copy_(wrong_sin)
    wrong = paged_runner(ours.model, ours.config).step([(0, PROMPT_A)])
    assert (wrong - right).abs().max() > 1e-2
