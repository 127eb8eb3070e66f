"""Helpers for the model tests: tiny random HF models and a paged-cache driver.

Helpers are handed out as fixtures (``paged_runner``, ``tiny_hf``) so the test
modules need not import this file.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from agentgate.engine.attention.base import AttentionMetadata
from agentgate.engine.loaders import load_model
from agentgate.engine.loaders.gguf import read_gguf_checkpoint
from agentgate.engine.model_files.model_path import default_model_path
from agentgate.engine.models.config import ModelConfig
from agentgate.engine.models.llama import CausalLM

TINY = dict(
    vocab_size=256,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
)


class PagedRunner:
    """Drives a model step by step through a paged KV cache whose blocks are
    handed out in shuffled order, so block tables are non-contiguous."""

    def __init__(
        self, model: CausalLM, config: ModelConfig, block_size: int = 4, num_blocks: int = 64, seed: int = 0
    ) -> None:
        self.model, self.block_size = model, block_size
        dtype = next(model.parameters()).dtype
        shape = (num_blocks, block_size, config.num_kv_heads, config.head_dim)
        self.kv_caches = [
            (torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype)) for _ in range(config.num_layers)
        ]
        self.free = list(range(num_blocks))
        random.Random(seed).shuffle(self.free)
        self.tables: dict[int, list[int]] = {}
        self.lengths: dict[int, int] = {}

    @torch.inference_mode()
    def step(self, batch: list[tuple[int, list[int]]]) -> torch.Tensor:
        """Run one step of ``(seq_id, new_token_ids)`` pairs; logits of every
        new token, [total_new_tokens, vocab]."""
        ids, positions, slots, query_lens, seq_lens = [], [], [], [], []
        for seq, tokens in batch:
            start = self.lengths.get(seq, 0)
            end = start + len(tokens)
            table = self.tables.setdefault(seq, [])
            while len(table) * self.block_size < end:
                table.append(self.free.pop())
            ids += tokens
            positions += range(start, end)
            slots += [table[p // self.block_size] * self.block_size + p % self.block_size for p in range(start, end)]
            query_lens.append(len(tokens))
            seq_lens.append(end)
            self.lengths[seq] = end
        width = max(len(self.tables[seq]) for seq, _ in batch)
        tables = torch.zeros(len(batch), width, dtype=torch.int32)
        for row, (seq, _) in enumerate(batch):
            tables[row, : len(self.tables[seq])] = torch.tensor(self.tables[seq])
        query_start_loc = torch.tensor([0, *torch.tensor(query_lens).cumsum(0).tolist()], dtype=torch.int32)
        seq_lens_t = torch.tensor(seq_lens, dtype=torch.int32)
        meta = AttentionMetadata(
            slot_mapping=torch.tensor(slots),
            query_start_loc=query_start_loc,
            seq_lens=seq_lens_t,
            block_tables=tables,
            max_query_len=max(query_lens),
            max_seq_len=max(seq_lens),
            query_start_loc_cpu=query_start_loc.clone(),
            seq_lens_cpu=seq_lens_t.clone(),
        )
        hidden = self.model(torch.tensor(ids), torch.tensor(positions), meta, self.kv_caches)
        return self.model.compute_logits(hidden)

    def greedy(self, seq: int, prompt: list[int], max_new_tokens: int) -> list[int]:
        """Prefill ``prompt`` then decode greedily, one token per step."""
        out = [int(self.step([(seq, prompt)])[-1].argmax())]
        for _ in range(max_new_tokens - 1):
            out.append(int(self.step([(seq, [out[-1]])])[-1].argmax()))
        return out


@pytest.fixture(scope="session")
def paged_runner() -> type[PagedRunner]:
    return PagedRunner


def randomize_(model: torch.nn.Module, seed: int = 0) -> None:
    """Weights big enough that attention is far from uniform (so RoPE and
    masking errors show), norms near one, biases non-zero."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=gen)
            param.copy_(1 + 0.1 * noise if "norm" in name else 0.2 * noise)


def make_tiny_hf(path: Path, family: str, shard_size: str = "50GB", **overrides):
    """A random tiny transformers model of ``family``, saved (safetensors, in
    shards of ``shard_size``) to ``path``; returns it in eval mode."""
    import transformers

    classes = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
    }
    config_cls, model_cls = classes[family]
    config = config_cls(**{**TINY, **overrides})
    torch.manual_seed(0)
    model = model_cls(config).eval()
    randomize_(model)
    model.save_pretrained(path, max_shard_size=shard_size)
    return model


@pytest.fixture(scope="session")
def tiny_hf():
    return make_tiny_hf


@pytest.fixture(scope="session")
def default_loaded():
    """The default model through the public entry point, loaded once,
    dequantized (the exact path transformers is compared with)."""
    return load_model(dtype="float32", quantization="none")


@pytest.fixture(scope="session")
def default_checkpoint():
    """(config, HF-named float32 weights) of the default model's GGUF file."""
    return read_gguf_checkpoint(default_model_path())
