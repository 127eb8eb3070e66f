"""What the engine core asks of a model runner (`ModelRunner`) and the paged cache's shape
(`KVCacheSpec`), without torch: the null runner implements it with no model, so an engine of the
null runner (the tests' and benchmarks' many short-lived engines) starts without importing torch.
The torch runners' shared part is `engine.runner.base.TorchModelRunner`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from agentgate.engine.lora.manager import LoraManager
    from agentgate.engine.scheduling.scheduler_output import ModelRunnerOutput, SchedulerOutput


@dataclass(frozen=True)
class KVCacheSpec:
    """Shape of the paged cache, as measured at start-up."""

    num_blocks: int
    block_size: int
    max_model_len: int


class ModelRunner(ABC):
    """Executes scheduled steps. ``execute`` launches a step and returns a
    handle; ``wait`` returns the step's sampled tokens. The engine core keeps
    at most ``max_steps_in_flight`` launched steps not yet waited for."""

    max_steps_in_flight: int = 1
    # What the model's weights are held as (see engine.loaders.quantization).
    quantization: str = "none"
    weights: str = ""
    weight_bytes_per_step: int = 0
    # What makes a drafted step compute other numbers than plain decoding here, checked on the CPU when
    # --speculative is auto: decode linears whose rows depend on the batch (`engine.kernel_choice.decode_exactness`),
    # else a verify step's logits (`engine.kernel_choice.draft_exactness`); then auto drafts nothing
    # (`engine.core_parts.make_speculator`).
    batch_dependent_decode: tuple[str, ...] = ()
    kv_spec: KVCacheSpec
    vocab_size: int
    architecture: str
    # Where and in what it computes, by name ("cpu", "cuda:0"; "bfloat16"): what the core and the
    # thread governor read, so that they need no torch (the null runner imports none).
    device_type: str
    device_name: str
    dtype_name: str
    lora: LoraManager | None = None  # LoRA adapters (engine.lora), on a model runner started with them

    @abstractmethod
    def execute(self, step: SchedulerOutput) -> Any: ...

    @abstractmethod
    def wait(self, handle: Any) -> ModelRunnerOutput: ...

    def complete(
        self,
        handle: Any,
        bitmask: torch.Tensor,
        redirect: tuple[torch.Tensor, torch.Tensor] | None = None,
        unnarrowed: torch.Tensor | None = None,
    ) -> None:
        """Sample a step launched with ``step.needs_bitmask``: ``execute`` ran
        its forward pass and left sampling for now, when the grammar bitmask
        ([sampling rows, words], rows in step order; unconstrained rows all
        ones) is known. ``redirect``: (from, to) for rows whose end-of-turn
        tokens become another (``SamplingBatch.redirect_from``). ``unnarrowed``:
        the mask before forced-call budgets narrowed it (``SamplingBatch.unnarrowed_bitmask``;
        the output's ``overridden_rows`` say where that changed the best token)."""
        raise NotImplementedError(f"{type(self).__name__} does not support constrained decoding")

    @abstractmethod
    def release(self, request_ids: list[str]) -> None:
        """Forget finished, aborted or preempted requests (their slots)."""

    def shutdown(self) -> None:
        """Release what the runner holds."""
