"""Tool calls, one module per noun: tool definitions and ``tool_choice`` checked
(:mod:`~gateway.tools.schema`), prompts that present tools to any chat model
(:mod:`~gateway.tools.render`), the grammars that make forced calls and response
formats always parse (:mod:`~gateway.tools.constraints`), and parsers that turn the
model's tool-call markup into OpenAI ``tool_calls``, streamed as deltas or not
(:mod:`~gateway.tools.deltas`, :mod:`~gateway.tools.json_scanner`,
:mod:`~gateway.tools.parser_base` and one module per format, chosen in
:mod:`~gateway.tools.parser_registry`). A request's :class:`~gateway.tools.plan.ToolPlan`
says which parser reads its reply and what the engine enforces.

Constrained decoding and the overlapped runner. ``tool_choice`` required or
named and ``response_format`` become a grammar (an xgrammar structural tag or
JSON schema, built here as plain JSON and compiled in the engine) whose token
bitmask the sampler applies. The mask for a request's token N+1 depends on
its token N; the overlapped runner launches step N+1 before step N's tokens
are back on the host. The engine resolves this per step: a step that holds a
constrained row launches its forward pass at once (its inputs, the last
sampled tokens included, are read on the device, so the forward never needs
the host to know them) and defers only its *sampling* until it is the oldest
step in flight, i.e. until step N has resolved and every grammar has accepted
its token; then the bitmask is filled and sampling runs. Steps without a
constrained row keep the full overlap, and in a mixed step the unconstrained
rows wait for the sample with the rest (one sampling call per step). The cost
is the host's mask filling plus the lost overlap of sampling, paid only by
steps with constrained rows; ``loadtests/constrained_bench.py`` measures it on
both runners (constrained/unconstrained tokens/s per runner, and a half-
constrained batch).
"""

from agentgate.gateway.tools.deltas import (
    Delta,
    FunctionDelta,
    ParsedOutput,
    ToolCall,
    ToolCallDelta,
    accumulate,
    finish_reason,
    new_tool_call_id,
)
from agentgate.gateway.tools.hermes import HermesToolParser
from agentgate.gateway.tools.llama3_json import Llama3JsonToolParser
from agentgate.gateway.tools.parser_base import StreamingToolParser
from agentgate.gateway.tools.parser_registry import TOOL_PARSERS, select_tool_parser
from agentgate.gateway.tools.render import render_chat_prompt
from agentgate.gateway.tools.schema import ToolChoice, check_json_schema, resolve_tool_choice, validate_tools

__all__ = [
    "TOOL_PARSERS",
    "Delta",
    "FunctionDelta",
    "HermesToolParser",
    "Llama3JsonToolParser",
    "ParsedOutput",
    "StreamingToolParser",
    "ToolCall",
    "ToolCallDelta",
    "ToolChoice",
    "accumulate",
    "check_json_schema",
    "finish_reason",
    "new_tool_call_id",
    "render_chat_prompt",
    "resolve_tool_choice",
    "select_tool_parser",
    "validate_tools",
]
