"""The adapters an engine serves: loaded at start (``--lora-modules``) or at run time, looked up
by name when a request arrives, and wrapped around the model's linears (`LoraLinear`).

A request holds its adapter object from arrival to end (``Request.lora``), so unloading a name
only stops new requests from selecting it: requests already holding it run to their end, and its
weights are freed with the last of them.

``max_cpu_loras`` bounds the adapters loaded (stored) at once; ``max_loras`` the distinct adapters
of one step (the scheduler holds the rest, `engine.scheduling.adapter_slots`). On the CPU the
stored adapters are the ones computed with (the segmented form of `engine.lora.layer`). On CUDA
they are stored in pinned host memory and a step's adapters are copied into ``max_loras`` resident
device slots (`engine.lora.slots`) that the Triton kernel reads (``engine.kernels.lora``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import AbstractContextManager

import torch
from torch import nn

from agentgate.engine.errors import LoraError
from agentgate.engine.lora.adapter import LoraAdapter, load_adapter, module_shapes
from agentgate.engine.lora.layer import LoraLinear, LoraStep
from agentgate.engine.lora.slots import LoraKernel, LoraSlots
from agentgate.engine.models.config import ModelConfig


class LoraManager:
    def __init__(
        self,
        model: nn.Module,
        config: ModelConfig,
        *,
        max_loras: int,
        max_cpu_loras: int,
        max_rank: int,
        dtype: torch.dtype,
        device: torch.device,
        row_invariant: bool = False,
    ) -> None:
        """``row_invariant`` (``--deterministic``): each row's low-rank products depend on that row alone."""
        self.config, self.max_loras, self.max_cpu_loras, self.max_rank = config, max_loras, max_cpu_loras, max_rank
        self.dtype, self.device = dtype, device
        self.step = LoraStep(row_invariant)
        self.adapters: dict[str, LoraAdapter] = {}
        self.last_load_seconds = 0.0
        for i in range(config.num_layers):
            for module in module_shapes(config):
                parent_name, _, child = f"layers.{i}.{module}".rpartition(".")
                parent = model.get_submodule(parent_name)
                setattr(parent, child, LoraLinear(getattr(parent, child), f"layers.{i}.{module}", self.step))
        if device.type == "cuda":
            from agentgate.engine.kernels.lora import MAX_RANK, add_lora  # Triton: imported on CUDA only

            widest = max(len(outs) for _, outs in module_shapes(config).values()) * max_rank
            if widest <= MAX_RANK:  # else the segmented form, as on the CPU (the kernel's limit, docs/lora.md)
                self.use_slots(add_lora)

    @property
    def slots(self) -> LoraSlots | None:
        """The resident slots (the kernel form), None in the segmented form (`engine.lora.layer`)."""
        return self.step.slots

    def use_slots(self, kernel: LoraKernel) -> LoraSlots:
        """Compute through ``max_loras`` resident slots and ``kernel`` (`engine.kernels.lora.add_lora`
        or its reference) instead of the segmented form: what CUDA does; the CPU's tests call it too."""
        shapes = {
            f"layers.{i}.{module}": (size_in, sum(outs), len(outs) * self.max_rank)
            for i in range(self.config.num_layers)
            for module, (size_in, outs) in module_shapes(self.config).items()
        }
        self.step.slots = LoraSlots(shapes, self.max_loras, kernel, dtype=self.dtype, device=self.device)
        return self.step.slots

    def load(self, name: str, path: str) -> LoraAdapter:
        """Load the adapter at ``path`` as ``name``; LoraError when the name is taken, ``max_cpu_loras``
        are loaded, or the adapter does not fit the model (`load_adapter`). With slots it is stored
        in (pinned) host memory, copied to a slot when a step needs it."""
        if name in self.adapters:
            raise LoraError(f"LoRA adapter {name!r} is already loaded")
        if len(self.adapters) >= self.max_cpu_loras:
            raise LoraError(
                f"LoRA adapter {name!r}: {len(self.adapters)} adapters are loaded, --max-cpu-loras is "
                f"{self.max_cpu_loras} (unload one first)"
            )
        start = time.perf_counter()
        store = torch.device("cpu") if self.slots is not None else self.device
        adapter = load_adapter(name, path, self.config, max_rank=self.max_rank, dtype=self.dtype, device=store)
        if self.slots is not None and self.device.type == "cuda":  # pinned: the copy to a slot is asynchronous
            adapter.weights = {key: (a.pin_memory(), b.pin_memory()) for key, (a, b) in adapter.weights.items()}
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
