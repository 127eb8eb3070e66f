"""The model behind the engines, as requests see it: its names, its tokenizer, its limits,
and the defaults a request's unset fields take (built by the lifespan from the engines'
facts and the settings)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from agentgate.engine.text.tokenizer import Tokenizer
from agentgate.gateway.admission.output_budget import OutputBudget
from agentgate.gateway.config.sampling_defaults import OPENAI_DEFAULTS, SamplingDefaults
from agentgate.gateway.errors import NotFoundError
from agentgate.gateway.reasoning.parsers import ReasoningParser


@dataclass(frozen=True)
class ServedModel:
    """The model behind the engines, as requests see it: its names, its tokenizer, its limits."""

    names: tuple[str, ...]
    root: str  # the name of the file (or directory) it was loaded from, never its path: /v1/models shows it
    tokenizer: Tokenizer
    max_model_len: int
    vocab_size: int
    tool_call_parser: str | None = None  # --tool-call-parser (None: chosen from the chat template)
    max_forced_tool_calls: int = 4  # --max-forced-tool-calls
    sampling: SamplingDefaults = OPENAI_DEFAULTS  # for the fields a request leaves unset
    budget: OutputBudget = OutputBudget()  # --max-tokens-default, --max-tokens-cap
    created: int = field(default_factory=lambda: int(time.time()))
    # A reasoning model's parser (--reasoning-parser, resolved from the chat template; None: no
    # reasoning), its default thinking budget (--reasoning-budget) and the template variables every
    # request starts from (--default-chat-template-kwargs; a request's chat_template_kwargs win).
    reasoning: ReasoningParser | None = None
    reasoning_budget: int | None = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    # The LoRA adapters served beside the model (docs/lora.md): name -> where it was loaded from;
    # changed in place by POST /v1/load_lora_adapter and /v1/unload_lora_adapter.
    adapters: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.names[0]

    @property
    def served_names(self) -> list[str]:
        """The model's names, then its LoRA adapters'."""
        return [*self.names, *self.adapters]

    def check(self, model: str | None) -> None:
        """404 for a model this gateway does not serve (None means the served one)."""
        if model is not None and model not in self.names and model not in self.adapters:
            raise NotFoundError(
                f"The model `{model}` does not exist; this server serves {', '.join(self.served_names)}.",
                param="model",
                code="model_not_found",
            )
