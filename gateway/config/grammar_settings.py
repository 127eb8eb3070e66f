"""The settings of grammar compiles (``engine.structured``: tools forced by ``tool_choice``,
``response_format`` schemas). A base of :class:`~gateway.config.settings.Settings`: its fields are
flags and ``AGENTGATE_*`` variables like every other setting, and engine fields (passed to
``EngineConfig``)."""

from __future__ import annotations

from dataclasses import dataclass

from agentgate.gateway.config.setting_values import setting


@dataclass(frozen=True)
class GrammarSettings:
    grammar_compile_timeout: float = setting(
        "seconds a constrained request (a forced tool call, a response_format schema) waits for its "
        "grammar to compile; past it, a 400 naming the schema's field (tools, response_format)",
        default=30.0,
        engine=True,
    )
    grammar_compile_workers: int = setting(
        "threads compiling grammars; one API key's compiles run on at most half of them, so its slow "
        "schemas never hold another key's",
        default=4,
        engine=True,
    )
