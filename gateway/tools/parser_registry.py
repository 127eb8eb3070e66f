"""The tool-call parsers by name, and the one a chat template calls for."""

from __future__ import annotations

from agentgate.engine.text.chat_template import template_supports_tools
from agentgate.gateway.tools.hermes import HermesToolParser
from agentgate.gateway.tools.llama3_json import Llama3JsonToolParser
from agentgate.gateway.tools.parser_base import StreamingToolParser

TOOL_PARSERS: dict[str, type[StreamingToolParser]] = {
    HermesToolParser.name: HermesToolParser,
    Llama3JsonToolParser.name: Llama3JsonToolParser,
}


def select_tool_parser(template: str | None, override: str | None = None) -> type[StreamingToolParser]:
    """The parser for a model's chat template, or the one named by ``override`` (a ``--tool-call-parser`` flag).

    A template without tool support gets ``hermes``: :func:`gateway.tools.render.render_chat_prompt`
    teaches such a model the ``<tool_call>`` markup. A tool-aware template that
    writes ``<tool_call>`` is ``hermes``; a Llama 3 one (``<|python_tag|>`` or
    ``<|start_header_id|>``) is ``llama3_json``; anything else defaults to ``hermes``.
    """
    if override is not None:
        try:
            return TOOL_PARSERS[override]
        except KeyError:
            raise ValueError(f"unknown tool-call parser {override!r}; known: {', '.join(TOOL_PARSERS)}") from None
    if template is None or not template_supports_tools(template) or "<tool_call>" in template:
        return HermesToolParser
    if "<|python_tag|>" in template or "<|start_header_id|>" in template:
        return Llama3JsonToolParser
    return HermesToolParser
