"""A chat request's tool plan: how its reply is read (which tool-call parser, how many calls)
and what the engine enforces. ``gateway.prompts.tool_plan`` decides it from the request; the
reply readers (``gateway.replies``) and the formats read replies through it."""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from agentgate.engine.sampling_params import SamplingParams, StructuredOutput
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


def stops_outside_calls(params: SamplingParams, plan: ToolPlan) -> SamplingParams:
    """``params`` as the engine and the reply reader get them under ``plan``. Stop strings and stop
    token ids end text, never a call: a forced call's reply (``tool_choice`` required or named,
    Anthropic's ``any`` or ``tool``) is nothing but its calls after any thinking, so they have nothing
    to end there. Kept, a stop string the arguments contain would cut the call mid-JSON under a reply
    that still says ``tool_calls`` (issue 50)."""
    if not (plan.forced and plan.parser is not None) or not (params.stop or params.stop_token_ids):
        return params
    return msgspec.structs.replace(params, stop=[], stop_token_ids=[])
