"""What a request asks the engine for, whole before it is dispatched: the prompts, the
sampling parameters, ``n`` choices each, how each choice's reply is read (the tool plan:
every choice reads its reply once, ``gateway.choice``), and what the chat core knows of it
that the generation reports with (the agent program it is a turn of, what the program keeps
of its tokens, the request fields a grammar error or a budget error is about, the model name
it asked for)."""

from __future__ import annotations

from dataclasses import dataclass

from agentgate.engine.front.protocol import ProgramTag, ThinkingSpec
from agentgate.engine.sampling_params import SamplingParams
from agentgate.gateway.programs.turn_tokens import TurnStart
from agentgate.gateway.reasoning.parsers import ReasoningParser
from agentgate.gateway.reasoning.splitter import ReasoningSplitter
from agentgate.gateway.tools.plan import NO_TOOLS, ToolPlan


@dataclass(frozen=True, slots=True)
class Job:
    """``n`` choices for each prompt, with ``params``."""

    request_id: str
    arrival: float  # time.monotonic() when the request came in
    prompts: list[list[int]]
    params: SamplingParams
    n: int = 1
    program: ProgramTag | None = None  # the agent program it is a turn of (gateway.programs.tags)
    turn: TurnStart | None = None  # what the program keeps of this turn's tokens (gateway.programs.turn_tokens)
    constraint_param: str | None = None  # the field a grammar the engine rejects comes from
    budget_param: str = "max_tokens"  # the request's name for its budget: one the grammar cannot end within
    model: str = ""  # the served model's name as the request gave it (its trace span's gen_ai.request.model)
    plan: ToolPlan = NO_TOOLS  # how each choice's reply is read (NO_TOOLS: its text is its content)
    reasoning: ReasoningParser | None = None  # a reasoning model's parser: each reply's thinking comes apart
    thinking: ThinkingSpec | None = None  # what the engine enforces of the thinking (with ``reasoning``)
    cache_salt: str = ""  # the prefix cache's salt (the request's cache_salt; dispatch adds the key's under isolation)
    tenant: str = ""  # the API key's digest (dispatch sets it): the engine keeps drafts and tool gaps per tenant
    lora: str = ""  # the LoRA adapter ``model`` names (dispatch sets it; "": the base model; docs/lora.md)

    def splitter(self) -> ReasoningSplitter | None:
        """A new splitter for one choice's reply (None: not a reasoning model's request)."""
        if self.reasoning is None or self.thinking is None:
            return None
        return ReasoningSplitter(self.reasoning, self.thinking.prompt_opened)
