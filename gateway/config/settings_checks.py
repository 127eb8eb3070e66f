"""The checks of :class:`~gateway.config.settings.Settings`: a ValueError naming the value a
gateway or engine cannot run with, raised when the settings are made."""

from __future__ import annotations

from typing import Any

from agentgate.gateway.config.harness_settings import check_harness_settings
from agentgate.gateway.config.reasoning_settings import check_reasoning_settings
from agentgate.gateway.config.setting_values import parse_networks
from agentgate.gateway.mcp.allowlist import McpAllowlist

RUNNERS = ("overlap", "sync", "null")
RATE_LIMIT_REDIS_DOWN = ("allow", "reject")
ON_ENGINE_DEATH = ("restart", "exit")
PREFIX_CACHE_ISOLATION = ("none", "key")


def check_settings(settings: Any) -> None:
    """ValueError for the first value of ``settings`` (a Settings) out of its range."""
    parse_networks(settings.trusted_proxies)  # ValueError naming a value that is no address or CIDR
    if settings.runner not in RUNNERS:
        raise ValueError(f"runner must be one of {RUNNERS}, got {settings.runner!r}")
    for name in ("max_num_seqs", "max_body_bytes", "max_engine_requests_per_request"):
        if getattr(settings, name) < 1:
            raise ValueError(f"{name} must be positive")
    if (
        min(settings.header_timeout, settings.body_timeout, settings.sse_send_timeout) <= 0
        or settings.max_connections < 0
    ):
        raise ValueError("timeouts must be positive and max_connections 0 (no cap) or positive")
    if settings.max_waiting < 0:
        raise ValueError("max_waiting must be 0 (unbounded) or positive")
    if not 0 <= settings.port < 65536:
        raise ValueError(f"port must be in [0, 65535], got {settings.port}")
    if settings.tool_call_parser is not None:
        from agentgate.gateway.tools.parser_registry import TOOL_PARSERS

        if settings.tool_call_parser not in TOOL_PARSERS:
            raise ValueError(
                f"tool_call_parser must be one of {tuple(TOOL_PARSERS)}, got {settings.tool_call_parser!r}"
            )
    if settings.on_engine_death not in ON_ENGINE_DEATH:
        raise ValueError(f"on_engine_death must be one of {ON_ENGINE_DEATH}, got {settings.on_engine_death!r}")
    if settings.prefix_cache_isolation not in PREFIX_CACHE_ISOLATION:
        raise ValueError(
            f"prefix_cache_isolation must be one of {PREFIX_CACHE_ISOLATION}, got {settings.prefix_cache_isolation!r}"
        )
    if settings.health_degraded_status not in (200, 503):
        raise ValueError("health_degraded_status must be 200 or 503")
    if settings.engine_max_restarts < 0 or settings.engine_restart_window <= 0:
        raise ValueError("engine_max_restarts must be >= 0 and engine_restart_window positive")
    if settings.engines < 1 or settings.gateway_workers < 1:
        raise ValueError("engines and gateway_workers must be positive")
    if settings.max_tokens_default < 0 or (settings.max_tokens_cap is not None and settings.max_tokens_cap < 1):
        raise ValueError("max_tokens_default must be 0 (up to the context) or positive, max_tokens_cap positive")
    if settings.max_forced_tool_calls < 1:
        raise ValueError("max_forced_tool_calls must be at least 1")
    if settings.session_ttl <= 0 or settings.response_ttl <= 0:
        raise ValueError("session_ttl and response_ttl must be positive")
    if settings.rate_limit_rpm < 0 or settings.rate_limit_tpm < 0:
        raise ValueError("rate limits must be 0 (unlimited) or positive")
    if settings.max_tool_rounds < 1 or settings.mcp_result_bytes < 1:
        raise ValueError("max_tool_rounds and mcp_result_bytes must be positive")
    if min(settings.mcp_call_timeout, settings.mcp_tool_budget) <= 0 or settings.mcp_list_ttl < 0:
        raise ValueError("mcp_call_timeout and mcp_tool_budget must be positive, mcp_list_ttl 0 (no cache) or more")
    McpAllowlist(settings.mcp_servers, settings.mcp_allow_urls)  # ValueError naming a malformed entry
    check_reasoning_settings(settings)
    if settings.sealing_key:
        from agentgate.gateway.state.sealing import Sealer

        Sealer(settings.sealing_key)  # ValueError naming a key too short to seal with
    check_harness_settings(settings)


def check_shared_state(settings: Any) -> None:
    """ValueError for the shared-state values of ``settings`` (a Settings) a gateway cannot run
    with, checked when one starts."""
    if settings.rate_limit_redis_down not in RATE_LIMIT_REDIS_DOWN:
        raise ValueError(f"rate_limit_redis_down must be one of {RATE_LIMIT_REDIS_DOWN}")
    if settings.key_rate_limits:
        from agentgate.gateway.admission.rate_limits import parse_key_limits

        parse_key_limits(settings.key_rate_limits)
