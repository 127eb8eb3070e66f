"""Small model configs for tests that need real model code but no real weights (``--load-format dummy``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# A tiny Llama whose widths are multiples of the int4 kernel's 32-wide groups.
TINY_LLAMA: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
}


def tiny_llama_dir(directory: Path) -> Path:
    """``directory`` holding `TINY_LLAMA` as its ``config.json``."""
    (directory / "config.json").write_text(json.dumps(TINY_LLAMA))
    return directory
