"""The settings that let agent harnesses run at their defaults (issue 49: Codex CLI on the
Responses API, Claude Code on the Messages API; ``docs/harnesses/``). A base of
:class:`~gateway.config.settings.Settings`: its fields are flags and ``AGENTGATE_*`` variables
like every other setting, checked by :func:`check_harness_settings`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentgate.gateway.config.setting_values import setting

HOSTED_TOOLS = ("web_search", "file_search", "code_interpreter", "image_generation", "computer_use")
"""The Responses API's hosted tools a request may offer: OpenAI runs them; this server cannot,
unless ``--hosted-tool`` names an MCP server for one (``web_search`` only)."""

HOSTED_BY_MCP = ("web_search",)
"""The hosted tools ``--hosted-tool`` may hand to an operator's MCP server."""

MAX_TOKENS_OVERFLOW = ("refuse", "clamp")


@dataclass(frozen=True)
class HarnessSettings:
    hosted_tools: tuple[str, ...] = setting(
        "a Responses hosted tool run by an operator's MCP server, TOOL=LABEL (repeatable; web_search only): a "
        "request's web_search tool becomes that --mcp-server's tools, run by the server's MCP loop "
        "(default: a web_search tool is a 400 naming it)",
        flag="hosted-tool",
        default=(),
    )
    omit_unrunnable_tools: bool = setting(
        "Responses: leave the hosted tools this server cannot run (web_search, file_search, code_interpreter, "
        "image_generation, computer_use) out of the prompt instead of a 400; the response's "
        "x-agentgate-omitted-tools header and the access log name them",
        default=False,
    )
    max_tokens_overflow: str = setting(
        "a max_tokens (max_output_tokens) above --max-tokens-cap or what the context leaves after the prompt: "
        "refuse (400 naming it) or clamp (run with the room left; a reply that room ends is length / "
        "incomplete / max_tokens as usual)",
        default="refuse",
    )
    null_reply_tokens: int | None = setting(
        "null runner only: a reply ends (its EOS token) after this many tokens, so an agent CLI's turn ends "
        "(end_turn, completed) instead of running to max_tokens (default: replies run to their budget)",
        default=None,
        engine=True,
    )


def hosted_tool_labels(entries: tuple[str, ...]) -> dict[str, str]:
    """``--hosted-tool`` entries as {tool: MCP server label}; ValueError naming a bad one."""
    out = {}
    for entry in entries:
        tool, sep, label = entry.partition("=")
        if not sep or not label or tool not in HOSTED_BY_MCP:
            raise ValueError(f"--hosted-tool {entry!r}: expected TOOL=LABEL with TOOL one of {HOSTED_BY_MCP}")
        out[tool] = label
    return out


def check_harness_settings(settings: Any) -> None:
    """ValueError for harness settings of ``settings`` (a Settings) that cannot run."""
    if settings.max_tokens_overflow not in MAX_TOKENS_OVERFLOW:
        raise ValueError(f"max_tokens_overflow must be one of {MAX_TOKENS_OVERFLOW}")
    labels = hosted_tool_labels(settings.hosted_tools)
    servers = {entry.partition("=")[0] for entry in settings.mcp_servers}
    missing = sorted(label for label in labels.values() if label not in servers)
    if missing:
        raise ValueError(f"--hosted-tool names MCP servers no --mcp-server gives: {', '.join(missing)}")
