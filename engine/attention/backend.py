"""The attention backend interface and its selection by device."""

from __future__ import annotations

from typing import Protocol

import torch

from agentgate.engine.attention.metadata import AttentionMetadata


class AttentionBackend(Protocol):
    """Writes a step's keys/values into the paged cache and attends over it.

    Cache layout, per layer: ``k_cache`` and ``v_cache`` are each
    ``[num_blocks, block_size, num_kv_heads, head_dim]``.
    """

    name: str
    # Whether `paged_attention` uses AttentionMetadata.shared_prefix_blocks
    # (runners skip the host work of finding it otherwise).
    reads_shared_prefix: bool

    def write_kv(
        self,
        key: torch.Tensor,
        value: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None:
        """Store ``key``/``value`` ([num_tokens, num_kv_heads, head_dim]) at
        their slots; tokens whose slot is -1 are skipped."""
        ...

    def paged_attention(
        self,
        query: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
    ) -> torch.Tensor:
        """Causal attention of ``query`` ([num_tokens, num_heads, head_dim])
        over the cache; returns the same shape and dtype. Grouped-query:
        head ``h`` reads KV head ``h // (num_heads // num_kv_heads)``.
        Rows of padded sequences (seq_len 0) may hold anything."""
        ...


def get_backend(device: torch.device | str) -> AttentionBackend:
    """Triton kernels on CUDA, the plain-torch reference elsewhere."""
    device = torch.device(device)
    if device.type == "cuda":
        from agentgate.engine.kernels.attention_backend import TritonAttentionBackend

        return TritonAttentionBackend()
    from agentgate.engine.attention.reference import TorchAttentionBackend

    return TorchAttentionBackend()
