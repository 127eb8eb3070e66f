"""The engine core's LoRA calls (a base of ``EngineCore``): adapters looked up, loaded and
unloaded by name on the runner's `LoraManager`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentgate.engine.errors import LoraError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from agentgate.engine.front.protocol import SchedulerStats
    from agentgate.engine.lora.adapter import LoraAdapter
    from agentgate.engine.request import Request
    from agentgate.engine.runner.interface import ModelRunner


class LoraCalls:
    runner: ModelRunner

    def _lora(self, name: str):
        if self.runner.lora is None:
            raise LoraError(f"LoRA adapter {name!r}: this engine was started without LoRA (--enable-lora)")
        return self.runner.lora

    def lora_adapter(self, name: str) -> LoraAdapter | None:
        """The loaded adapter ``name`` (None for ""); LoraError when it is not loaded."""
        return self._lora(name).get(name) if name else None

    def load_lora(self, name: str, path: str) -> None:
        """Load a LoRA adapter at run time (`LoraManager.load`)."""
        self._lora(name).load(name, path)

    def unload_lora(self, name: str) -> None:
        """Stop serving a LoRA adapter; its running requests finish (`LoraManager.unload`)."""
        self._lora(name).unload(name)

    def lora_stats(
        self, stats: SchedulerStats, running: Iterable[Request], waiting: Iterable[Request]
    ) -> SchedulerStats:
        """``stats`` with the adapters of the running and the waiting requests (vllm:lora_requests_info)."""
        if self.runner.lora is None:
            return stats
        stats.running_loras = sorted({r.lora.name for r in running if r.lora is not None})
        stats.waiting_loras = sorted({r.lora.name for r in waiting if r.lora is not None})
        stats.max_loras = self.runner.lora.max_loras
        return stats

    def lora_names(self) -> list[str]:
        return [] if self.runner.lora is None else sorted(self.runner.lora.adapters)
