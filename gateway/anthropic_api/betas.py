"""``anthropic-beta`` values, accepted or refused by name: every value a request names is one
this server does what it says for (or has nothing to do for, with the reason written here), or
the request is a 400 naming the values it does not know. Never a beta silently half-done.

Claude Code (2.1.332) sends the first seven on every request (docs/harnesses/claude-code.md).
"""

from __future__ import annotations

from agentgate.gateway.errors import BadRequestError

HONOURED_BETAS: dict[str, str] = {
    "claude-code-20250219": "names the client; nothing in the request's shape depends on it",
    "interleaved-thinking-2025-05-14": (
        "thinking between tool calls: thinking blocks in the history are read as the reasoning issue "
        "says (a model without reasoning writes none and reads none back)"
    ),
    "context-management-2025-06-27": (
        "context_management edits: clear_thinking_20251015 (with keep) is done; any other edit is a 400 naming it"
    ),
    "mid-conversation-tool-changes-2026-07-01": (
        "tools may change between turns: every request's prompt is rendered from its own tools"
    ),
    "mid-conversation-system-2026-04-07": (
        "system messages inside messages: a system turn where the chat template has one, else folded "
        "into the user turn beside it (gateway.tools.system_turns)"
    ),
    "thinking-token-count-2026-05-13": (
        "usage counts thinking tokens in output_tokens, as every reply's usage does here"
    ),
    "advanced-tool-use-2025-11-20": (
        "defer_loading tools are left out of the prompt, as the API defines them; a tool_reference "
        "block or a server tool-search tool is a 400 naming it"
    ),
    "effort-2025-11-24": "output_config.effort: accepted as the reasoning issue defines it",
    "mcp-client-2025-04-04": (
        "mcp_servers: the gateway runs the named servers' tools beside the model (anthropic_api.mcp_connector)"
    ),
}


def check_betas(header: str | None) -> list[str]:
    """The ``anthropic-beta`` values of ``header`` (comma-separated); 400 naming those this
    server does not honour."""
    names = [name.strip() for name in (header or "").split(",") if name.strip()]
    unknown = [name for name in names if name not in HONOURED_BETAS]
    if unknown:
        raise BadRequestError(
            f"anthropic-beta values not supported by this server: {', '.join(unknown)} "
            f"(it honours {', '.join(HONOURED_BETAS)})",
            param="anthropic-beta",
        )
    return names
