"""Which MCP servers a request may name (gateway.mcp.allowlist): none by default, the
operator's by label or URL, URL patterns that match scheme and host:port exactly."""

from __future__ import annotations

import pytest

from agentgate.gateway.config.settings import Settings
from agentgate.gateway.errors import BadRequestError
from agentgate.gateway.mcp.allowlist import McpAllowlist, McpServer
from agentgate.gateway.mcp.toolset import REDACTED, echoed, resolve_servers


def test_no_server_is_allowed_by_default():
    allowlist = McpAllowlist()
    assert allowlist.empty
    with pytest.raises(BadRequestError) as refused:
        allowlist.resolve("calc", "http://127.0.0.1:9000/mcp", "tools[0]")
    assert "http://127.0.0.1:9000/mcp" in refused.value.message
    assert refused.value.param == "tools[0].server_url"
    assert refused.value.code == "mcp_server_not_allowed"


def test_a_configured_server_by_label_or_its_url():
    allowlist = McpAllowlist(["calc=http://tools.internal:8080/mcp"])
    assert allowlist.resolve("calc", None, "tools[0]") == McpServer("calc", "http://tools.internal:8080/mcp")
    assert (
        allowlist.resolve("mine", "http://tools.internal:8080/mcp", "tools[0]").url == "http://tools.internal:8080/mcp"
    )
    with pytest.raises(BadRequestError, match="no MCP server is configured with the label 'other'"):
        allowlist.resolve("other", None, "tools[1]")
    with pytest.raises(BadRequestError):
        allowlist.resolve("calc", "http://tools.internal:8080/other", "tools[0]")


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://tools.internal/mcp/search", True),
        ("https://tools.internal:443/mcp/a/b", True),
        ("https://TOOLS.internal/mcp/x", True),
        ("https://tools.internal/admin", False),
        ("http://tools.internal/mcp/x", False),  # another scheme
        ("https://tools.internal:8443/mcp/x", False),  # another port
        ("https://tools.internal.evil.com/mcp/x", False),
        ("https://tools.internal@evil.com/mcp/x", False),  # credentials: never
        ("https://evil.com/mcp/x#@tools.internal", False),
        ("https://tools.internal/mcp/x?to=http://evil", False),  # a query: never
        ("file:///etc/passwd", False),
        ("https://tools.internal:notaport/mcp/x", False),
    ],
)
def test_patterns_match_the_origin_exactly_and_the_path_as_a_glob(url: str, allowed: bool):
    allowlist = McpAllowlist(patterns=["https://tools.internal/mcp/*"])
    assert allowlist.allows(url) is allowed


@pytest.mark.parametrize(
    ("servers", "patterns"),
    [
        (["calc"], []),
        (["=http://x/mcp"], []),
        (["calc=ftp://x/mcp"], []),
        ([], ["https://*.internal/mcp"]),
        ([], ["x"]),
    ],
)
def test_malformed_flags_are_refused_at_start(servers: list[str], patterns: list[str]):
    with pytest.raises(ValueError):
        McpAllowlist(servers, patterns)
    with pytest.raises(ValueError):
        Settings(mcp_servers=tuple(servers), mcp_allow_urls=tuple(patterns))


def test_credentials_go_to_the_server_and_are_echoed_redacted():
    tool = {
        "type": "mcp",
        "server_label": "calc",
        "server_url": "http://tools.internal:8080/mcp",
        "headers": {"X-Api-Key": "k-123"},
        "authorization": "tok-456",
    }
    [server] = resolve_servers([(0, tool)], McpAllowlist(["calc=http://tools.internal:8080/mcp"]))
    assert dict(server.endpoint.headers) == {"X-Api-Key": "k-123", "Authorization": "Bearer tok-456"}
    assert "k-123" not in repr(server.endpoint) and "tok-456" not in repr(server.endpoint)
    shown = echoed(tool)
    assert shown["headers"] == {"X-Api-Key": REDACTED} and shown["authorization"] == REDACTED
    assert tool["authorization"] == "tok-456"  # the request's own tool is left as it was


@pytest.mark.parametrize(
    ("field", "value"),
    [("headers", {"a": 1}), ("authorization", 5), ("require_approval", "sometimes"), ("allowed_tools", "add")],
)
def test_malformed_mcp_tools_are_400s_naming_the_field(field: str, value: object):
    tool = {"type": "mcp", "server_label": "calc", field: value}
    with pytest.raises(BadRequestError) as refused:
        resolve_servers([(2, tool)], McpAllowlist(["calc=http://tools.internal/mcp"]))
    assert refused.value.param == f"tools[2].{field}"
