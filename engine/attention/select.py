"""Which attention backend a device runs (`base.AttentionBackend`): kept apart from the interface,
which the backends import, so that choosing one imports the backends and nothing imports back."""

from __future__ import annotations

import torch

from agentgate.engine.attention.base import AttentionBackend


def get_backend(device: torch.device | str) -> AttentionBackend:
    """Triton kernels on CUDA, the plain-torch reference elsewhere."""
    device = torch.device(device)
    if device.type == "cuda":
        from agentgate.engine.attention.triton import TritonAttentionBackend

        return TritonAttentionBackend()
    from agentgate.engine.attention.torch import TorchAttentionBackend

    return TorchAttentionBackend()
