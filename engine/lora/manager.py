"""The adapters an engine serves: loaded at start (``--lora-modules``) or at run time, looked up
by name when a request arrives, and wrapped around the model's linears (`LoraLinear`).

A request holds its adapter object from arrival to end (``Request.lora``), so unloading a name
only stops new requests from selecting it: requests already holding it run to their end, and its
weights are freed with the last of them. ``max_loras`` bounds the adapters loaded at once, so it
also bounds the distinct adapters of any step (every loaded adapter stays resident).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import AbstractContextManager

import torch
from torch import nn

from agentgate.engine.lora.adapter import LoraAdapter, LoraError, load_adapter, module_shapes
from agentgate.engine.lora.layer import LoraLinear, LoraStep
from agentgate.engine.models.config import ModelConfig


class LoraManager:
    def __init__(
        self,
        model: nn.Module,
        config: ModelConfig,
        *,
        max_loras: int,
        max_rank: int,
        dtype: torch.dtype,
        device: torch.device,
        row_invariant: bool = False,
    ) -> None:
        """``row_invariant`` (``--deterministic``): each row's low-rank products depend on that row alone."""
        self.config, self.max_loras, self.max_rank = config, max_loras, max_rank
        self.dtype, self.device = dtype, device
        self.step = LoraStep(row_invariant)
        self.adapters: dict[str, LoraAdapter] = {}
        self.last_load_seconds = 0.0
        for i in range(config.num_layers):
            for module in module_shapes(config):
                parent_name, _, child = f"layers.{i}.{module}".rpartition(".")
                parent = model.get_submodule(parent_name)
                setattr(parent, child, LoraLinear(getattr(parent, child), f"layers.{i}.{module}", self.step))

    def load(self, name: str, path: str) -> LoraAdapter:
        """Load the adapter at ``path`` as ``name``; LoraError when the name is taken, ``max_loras``
        are loaded, or the adapter does not fit the model (`load_adapter`)."""
        if name in self.adapters:
            raise LoraError(f"LoRA adapter {name!r} is already loaded")
        if len(self.adapters) >= self.max_loras:
            raise LoraError(
                f"LoRA adapter {name!r}: {len(self.adapters)} adapters are loaded, --max-loras is {self.max_loras}"
            )
        start = time.perf_counter()
        adapter = load_adapter(name, path, self.config, max_rank=self.max_rank, dtype=self.dtype, device=self.device)
        self.last_load_seconds = time.perf_counter() - start
        self.adapters[name] = adapter
        return adapter

    def unload(self, name: str) -> None:
        """Stop serving ``name`` (its running requests keep it to their end); LoraError when it is not loaded."""
        if self.adapters.pop(name, None) is None:
            raise LoraError(f"LoRA adapter {name!r} is not loaded")

    def get(self, name: str) -> LoraAdapter:
        adapter = self.adapters.get(name)
        if adapter is None:
            raise LoraError(f"LoRA adapter {name!r} is not loaded (loaded: {sorted(self.adapters) or 'none'})")
        return adapter

    def rows(self, row_adapters: Sequence[tuple[LoraAdapter | None, int]]) -> AbstractContextManager[bool]:
        """The step's rows for the forward pass (`LoraStep.rows`)."""
        return self.step.rows(row_adapters, self.device)
