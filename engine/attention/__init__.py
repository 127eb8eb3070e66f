"""Paged attention behind one interface.

The model calls `rotary_write_kv` then `paged_attention` through an `AttentionBackend`
(`base`); `get_backend(device)` (`select`) picks the Triton backend (`triton`, over the
jit kernels in `engine/kernels/`) on CUDA and the plain-torch reference
(`torch`) everywhere else.
"""

from agentgate.engine.attention.base import AttentionBackend, AttentionMetadata
from agentgate.engine.attention.select import get_backend

__all__ = ["AttentionBackend", "AttentionMetadata", "get_backend"]
