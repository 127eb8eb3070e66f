"""Paged attention behind one interface.

The model calls `write_kv` then `paged_attention` through an `AttentionBackend`;
`get_backend(device)` picks the Triton kernels on CUDA and the plain-torch
reference everywhere else.
"""

from agentgate.engine.attention.backend import AttentionBackend, get_backend
from agentgate.engine.attention.metadata import AttentionMetadata

__all__ = ["AttentionBackend", "AttentionMetadata", "get_backend"]
