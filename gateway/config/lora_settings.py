"""The settings of LoRA adapters (``engine.lora``, ``docs/lora.md``). A base of
:class:`~gateway.config.settings.Settings`: its fields are flags and ``AGENTGATE_*`` variables like
every other setting, and engine fields (passed to ``EngineConfig``)."""

from __future__ import annotations

from dataclasses import dataclass

from agentgate.gateway.config.setting_values import setting


@dataclass(frozen=True)
class LoraSettings:
    lora_modules: tuple[str, ...] = setting(
        "a LoRA adapter served beside the model, NAME=PATH (repeatable; PATH a PEFT directory with "
        "adapter_config.json and adapter_model.safetensors); a request selects it with model: NAME",
        default=(),
        engine=True,
    )
    enable_lora: bool = setting(
        "take LoRA adapters (loaded at run time by POST /v1/load_lora_adapter) even without --lora-modules",
        default=False,
        engine=True,
    )
    max_loras: int = setting(
        "most LoRA adapters resident in one engine step (requests of further adapters wait a step)",
        default=4,
        engine=True,
    )
    max_cpu_loras: int | None = setting(
        "most LoRA adapters loaded (stored in host memory) at once, at least --max-loras (default: --max-loras)",
        default=None,
        engine=True,
    )
    max_lora_rank: int = setting("largest rank of a LoRA adapter", default=16, engine=True)
