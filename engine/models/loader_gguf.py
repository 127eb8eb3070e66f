"""GGUF checkpoints: read the header, dequantize the tensors, map them to HF names.

The header is parsed here rather than by `gguf.GGUFReader`: the reader builds
a numpy view per metadata string, which costs ~2 s on the default model's
98k-entry vocabulary and merges (this parser: ~0.1 s). Tensor types, sizes
and dequantization come from the `gguf` package.

llama.cpp's converter permutes the rows of Q and K for llama-arch models so
that its interleaved ("normal") RoPE matches HF's rotate-half RoPE; we undo
that, so every checkpoint reaches the model in HF layout.
"""

from __future__ import annotations

import math
import mmap
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch

from engine.attention.backend import get_backend
from engine.errors import ModelLoadError
from engine.models.config import ModelConfig, config_from_gguf, resolve_dtype
from engine.models.llama import CausalLM, build_model, fuse_hf_weights

_SCALARS: dict[int, str] = {
    gguf.GGUFValueType.UINT8: "<B", gguf.GGUFValueType.INT8: "<b",
    gguf.GGUFValueType.UINT16: "<H", gguf.GGUFValueType.INT16: "<h",
    gguf.GGUFValueType.UINT32: "<I", gguf.GGUFValueType.INT32: "<i",
    gguf.GGUFValueType.UINT64: "<Q", gguf.GGUFValueType.INT64: "<q",
    gguf.GGUFValueType.FLOAT32: "<f", gguf.GGUFValueType.FLOAT64: "<d",
    gguf.GGUFValueType.BOOL: "<?",
}

# GGUF tensor names -> HF names (``model.`` prefix stripped).
_GLOBAL_NAMES = {
    "token_embd.weight": "embed_tokens.weight",
    "output_norm.weight": "norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_NAMES = {  # after "blk.N." / "layers.N."
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.bias": "self_attn.o_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_BLOCK = re.compile(r"blk\.(\d+)\.(.+)")
_ROPE_FREQS = "rope_freqs.weight"


@dataclass(frozen=True)
class GGUFTensor:
    """Where one tensor's bytes lie. ``shape`` is in numpy order (GGUF's
    ``ne`` reversed); ``offset`` is absolute in the file."""

    name: str
    shape: tuple[int, ...]
    type: gguf.GGMLQuantizationType
    offset: int
    nbytes: int


@dataclass
class GGUFFile:
    """A parsed GGUF file: metadata values (strings, numbers, lists) and tensors."""

    path: Path
    metadata: dict[str, Any]
    tensors: dict[str, GGUFTensor]
    buffer: mmap.mmap

    def dequantize(self, name: str) -> np.ndarray:
        """One tensor as float32 in numpy order."""
        info = self.tensors[name]
        raw = np.frombuffer(self.buffer, dtype=np.uint8, count=info.nbytes, offset=info.offset)
        raw = raw.reshape(*info.shape[:-1], -1)
        try:
            out = gguf.quants.dequantize(raw, info.type)
        except NotImplementedError as exc:
            raise ModelLoadError(
                f"{self.path}: tensor {name} has type {info.type.name}, which cannot be dequantized"
            ) from exc
        # F32 comes back as a read-only view of the file.
        return out if out.flags.writeable else out.copy()


def read_gguf(path: Path) -> GGUFFile:
    """Parse the header of a GGUF file (v2/v3, little-endian); tensor data
    stays memory-mapped. Raises ModelLoadError on anything malformed."""
    try:
        with open(path, "rb") as f:
            buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as exc:  # ValueError: an empty file
        raise ModelLoadError(f"cannot open GGUF file {path}: {exc}") from exc
    try:
        return _parse(path, buffer)
    except (UnicodeDecodeError, ValueError, KeyError, OverflowError) as exc:
        raise ModelLoadError(f"{path} is not a valid GGUF file (corrupt or truncated): {exc}") from exc


class _Cursor:
    """Sequential little-endian reads with bounds checks."""

    def __init__(self, buffer: mmap.mmap) -> None:
        self.buffer, self.pos = buffer, 0

    def scalar(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.buffer):
            raise ValueError(f"the header runs past the end of the file (at byte {self.pos})")
        (value,) = struct.unpack_from(fmt, self.buffer, self.pos)
        self.pos += size
        return value

    def string(self) -> str:
        length = self.scalar("<Q")
        end = self.pos + length
        if end > len(self.buffer):
            raise ValueError(f"string of {length} bytes runs past the end of the file")
        text = self.buffer[self.pos:end].decode("utf-8")
        self.pos = end
        return text

    def value(self, vtype: int) -> Any:
        if vtype in _SCALARS:
            return self.scalar(_SCALARS[vtype])
        if vtype == gguf.GGUFValueType.STRING:
            return self.string()
        if vtype != gguf.GGUFValueType.ARRAY:
            raise ValueError(f"unknown metadata value type {vtype}")
        item_type, count = self.scalar("<I"), self.scalar("<Q")
        if count > len(self.buffer) - self.pos:  # every item takes at least a byte
            raise ValueError(f"array of {count} items runs past the end of the file")
        if item_type in _SCALARS and item_type != gguf.GGUFValueType.BOOL:
            dtype = np.dtype(_SCALARS[item_type])
            items = np.frombuffer(self.buffer, dtype=dtype, count=count, offset=self.pos)
            self.pos += items.nbytes
            return items.tolist()
        return [self.value(item_type) for _ in range(count)]


def _parse(path: Path, buffer: mmap.mmap) -> GGUFFile:
    cur = _Cursor(buffer)
    if cur.scalar("<I") != gguf.GGUF_MAGIC:
        raise ValueError("bad magic number")
    version = cur.scalar("<I")
    if version not in (2, 3):
        raise ValueError(f"unsupported GGUF version {version} (big-endian files are not supported)")
    tensor_count, kv_count = cur.scalar("<Q"), cur.scalar("<Q")
    metadata: dict[str, Any] = {}
    for _ in range(kv_count):
        key = cur.string()
        metadata[key] = cur.value(cur.scalar("<I"))
    infos = []
    for _ in range(tensor_count):
        name = cur.string()
        ne = [cur.scalar("<Q") for _ in range(cur.scalar("<I"))]
        qtype = gguf.GGMLQuantizationType(cur.scalar("<I"))
        infos.append((name, tuple(reversed(ne)), qtype, cur.scalar("<Q")))
    alignment = metadata.get("general.alignment", gguf.GGUF_DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise ValueError(f"invalid general.alignment {alignment!r}")
    data_start = -(-cur.pos // alignment) * alignment
    tensors: dict[str, GGUFTensor] = {}
    for name, shape, qtype, rel_offset in infos:
        block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
        if not shape or shape[-1] % block_size:
            raise ValueError(f"tensor {name} has shape {shape}, not whole {qtype.name} blocks")
        nbytes = math.prod(shape) // block_size * type_size
        offset = data_start + rel_offset
        if offset + nbytes > len(buffer):
            raise ValueError(f"tensor {name} runs past the end of the file (truncated?)")
        tensors[name] = GGUFTensor(name, shape, qtype, offset, nbytes)
    return GGUFFile(path, metadata, tensors, buffer)


def read_gguf_config(path: Path) -> ModelConfig:
    """The ModelConfig of a GGUF file, without dequantizing its weights."""
    return _config(read_gguf(path))


def read_gguf_checkpoint(
    path: Path, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"
) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """The config and the dequantized weights of a GGUF file, in HF names
    (``model.`` prefix stripped) and HF layout, in ``dtype`` on ``device``."""
    file = read_gguf(path)
    return (config := _config(file)), _weights(file, config, dtype, device)


def load_gguf(path: Path, *, dtype: str, device: torch.device) -> tuple[ModelConfig, CausalLM]:
    """A GGUF file as a model in ``dtype`` (see `resolve_dtype`) on ``device``."""
    file = read_gguf(path)
    config = _config(file)
    torch_dtype = resolve_dtype(dtype, config, device)
    weights = _weights(file, config, torch_dtype, device)
    state = fuse_hf_weights(config, weights, source=str(path))
    return config, build_model(config, get_backend(device), state, device, source=str(path))


def _config(file: GGUFFile) -> ModelConfig:
    factors = None
    if _ROPE_FREQS in file.tensors:
        factors = tuple(file.dequantize(_ROPE_FREQS).reshape(-1).tolist())
    shapes = {name: t.shape for name, t in file.tensors.items()}
    return config_from_gguf(file.metadata, shapes, source=str(file.path), rope_freq_factors=factors)


def _weights(
    file: GGUFFile, config: ModelConfig, dtype: torch.dtype, device: torch.device | str
) -> dict[str, torch.Tensor]:
    names = [n for n in file.tensors if n != _ROPE_FREQS]
    hf_names = {n: _hf_name(n, file.path) for n in names}

    def load(name: str) -> tuple[str, torch.Tensor]:
        weight = torch.from_numpy(file.dequantize(name))
        hf_name = hf_names[name]
        if config.architecture == "llama" and ".q_proj." in hf_name:
            weight = _unpermute(weight, config.num_heads, config.head_dim, file.path)
        elif config.architecture == "llama" and ".k_proj." in hf_name:
            weight = _unpermute(weight, config.num_kv_heads, config.head_dim, file.path)
        return hf_name, weight.to(device=device, dtype=dtype)

    return dict(load(name) for name in names)


def _hf_name(name: str, path: Path) -> str:
    match = _BLOCK.fullmatch(name)
    hf = _LAYER_NAMES.get(match.group(2)) if match else _GLOBAL_NAMES.get(name)
    if hf is None:
        raise ModelLoadError(f"{path}: unexpected GGUF tensor {name!r}")
    return f"layers.{match.group(1)}.{hf}" if match else hf


def _unpermute(weight: torch.Tensor, num_heads: int, head_dim: int, path: Path) -> torch.Tensor:
    """Undo llama.cpp's Q/K row permutation: within each head, the converter
    interleaved the two rotary halves (rows ``i`` and ``i + head_dim/2`` became
    rows ``2i`` and ``2i + 1``)."""
    if weight.shape[0] != num_heads * head_dim:
        raise ModelLoadError(
            f"{path}: a Q/K projection has {weight.shape[0]} rows, not {num_heads} heads × {head_dim}"
        )
    return (
        weight.reshape(num_heads, head_dim // 2, 2, *weight.shape[1:])
        .transpose(1, 2)
        .reshape(weight.shape)
    )
