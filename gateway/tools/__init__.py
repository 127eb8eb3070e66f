"""Tool calls: prompts that present tools to any chat model, and parsers that turn the model's
tool-call markup into OpenAI ``tool_calls`` (streamed as deltas or not)."""

from gateway.tools.parsers import (
    TOOL_PARSERS,
    Delta,
    FunctionDelta,
    HermesToolParser,
    Llama3JsonToolParser,
    ParsedOutput,
    StreamingToolParser,
    ToolCall,
    ToolCallDelta,
    accumulate,
    finish_reason,
    new_tool_call_id,
    select_tool_parser,
)
from gateway.tools.render import (
    ToolChoice,
    render_chat_prompt,
    resolve_tool_choice,
    template_supports_tools,
    validate_tools,
)

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
    "finish_reason",
    "new_tool_call_id",
    "render_chat_prompt",
    "resolve_tool_choice",
    "select_tool_parser",
    "template_supports_tools",
    "validate_tools",
]
