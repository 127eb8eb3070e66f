"""The whole model on the Triton path (fused norms, fused RoPE + KV write,
the attention kernels; under the interpreter on a CPU) generates what the
torch path generates, through the overlapped runner: prefill, chunked
prefill and decode, in the Qwen3 layout (the Llama one plus q/k norms)."""

from __future__ import annotations

import json
import os

import pytest

from agentgate.engine.config import EngineConfig
from agentgate.engine.core import EngineCore
from agentgate.engine.loaders import LoadedModel, load_model
from agentgate.engine.models.llama import build_model
from agentgate.engine.runner.overlap import OverlapRunner
from agentgate.engine.sampling_params import SamplingParams

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1")


def generate(config_dir, triton: bool) -> dict[str, list[int]]:
    from agentgate.engine.attention.triton import TritonAttentionBackend

    config = EngineConfig(
        model=str(config_dir),
        load_format="dummy",
        dtype="float32",
        block_size=4,
        max_num_seqs=4,
        max_num_batched_tokens=16,
        num_kv_blocks=64,
    )
    loaded = load_model(config.model, dtype="float32", device="cpu", load_format="dummy")
    if triton:
        model = build_model(
            loaded.config,
            TritonAttentionBackend(),
            dict(loaded.model.state_dict()),
            loaded.model.embed_tokens.weight.device,
            source="test",
        )
        loaded = LoadedModel(model, loaded.config, loaded.path)
    core = EngineCore(config, OverlapRunner(config, loaded))
    prompts = {"short": [5, 6, 7], "long": list(range(10, 40))}  # 30 tokens: chunked over two steps
    for name, prompt in prompts.items():
        core.add_request(name, prompt, SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True))
    tokens: dict[str, list[int]] = {}
    while core.has_work:
        for out in core.step():
            tokens.setdefault(out.request_id, []).extend(out.new_token_ids)
    return tokens


@pytest.mark.slow
def test_triton_path_generates_what_the_torch_path_does(tmp_path):
    config = {
        "vocab_size": 256,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "architectures": ["Qwen3ForCausalLM"],
        "head_dim": 16,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    torch_tokens, triton_tokens = generate(tmp_path, triton=False), generate(tmp_path, triton=True)
    assert triton_tokens == torch_tokens and len(torch_tokens["long"]) == 6
