"""A chat request's tool plan: how its reply is read (which tool-call parser, how many calls)
and what the engine enforces. ``gateway.prompts.tool_plan`` decides it from the request; the
reply readers (``gateway.replies``) and the formats read replies through it."""

from __future__ import annotations

from dataclasses import dataclass

from agentgate.engine.sampling_params import StructuredOutput
from agentgate.gateway.tools.parser_base import StreamingToolParser


@dataclass(frozen=True, slots=True)
class ToolPlan:
    """How a chat request's reply is read and constrained.

    ``parser``: the tool-call parser reading the reply (None: the reply is
    plain content: no tools, or ``tool_choice`` none); ``max_calls``: 1 with
    ``parallel_tool_calls: false``, the bound on forced parallel calls under
    ``required``; ``structured``: what the engine enforces;
    ``constraint_param``: the request field that constraint comes from;
    ``forced``: the reply is nothing but the structure (a forced call, the JSON
    of a response_format), so it must end whole within max_tokens (the engine
    closes it in time: :mod:`engine.structured.structured_output`).
    """

    parser: type[StreamingToolParser] | None = None
    max_calls: int | None = None
    structured: StructuredOutput | None = None
    constraint_param: str | None = None
    forced: bool = False


NO_TOOLS = ToolPlan()
