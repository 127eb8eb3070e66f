"""Which MCP servers a request may name (gateway.mcp.allowlist): none by default, the
operator's by label or URL, URL patterns that match scheme and host:port exactly."""

from __future__ import annotations

import pytest

from agentgate.gateway.config.settings import Settings
from agentgate.gateway.errors import BadRequestError
from agentgate.gateway.mcp.allowlist import McpAllowlist, McpServer, normalized
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


@pytest.mark.parametrize(
    ("url", "connects_to"),
    [
        ("https://tools.internal/mcp/../admin", None),  # the client would send /admin
        ("https://tools.internal/mcp/./x/../../admin", None),
        ("https://tools.internal/mcp/a/../b", "https://tools.internal/mcp/b"),
        ("https://tools.internal/mcp/./search", "https://tools.internal/mcp/search"),
        ("https://tools.internal/%6Dcp/search", "https://tools.internal/mcp/search"),  # unreserved escape decoded
        ("https://tools.internal/mcp/%2E%2E/admin", None),  # an escaped dot segment: refused
        ("https://tools.internal/mcp/%2e/x", None),
        ("https://tools.internal/mcp/a%2Fb", None),  # an escaped separator: refused
        ("https://tools.internal/mcp/a%5c..%5cadmin", None),
        ("https://tools.internal/mcp/a\\..\\admin", None),  # a backslash: refused
        ("https://tools.internal/mcp/na%C3%AFve", "https://tools.internal/mcp/na%C3%AFve"),  # others kept escaped
    ],
)
def test_paths_are_matched_and_connected_to_as_the_client_sends_them(url: str, connects_to: str | None):
    allowlist = McpAllowlist(patterns=["https://tools.internal/mcp/*"])
    assert allowlist.allows(url) is (connects_to is not None)
    if connects_to is None:
        with pytest.raises(BadRequestError) as refused:
            allowlist.resolve("t", url, "tools[0]")
        assert refused.value.code == "mcp_server_not_allowed"
    else:
        assert allowlist.resolve("t", url, "tools[0]").url == connects_to


def test_the_normalized_path_is_what_an_http_client_sends():
    """The rule above is the one httpx applies: the path it puts on the wire for the raw URL."""
    import httpx

    for raw in ("https://tools.internal/mcp/../admin", "https://tools.internal/mcp/a/./b/../c"):
        sent = httpx.Request("GET", raw).url.raw_path.decode()
        assert sent == normalized(raw).removeprefix("https://tools.internal")


def test_a_client_cannot_set_the_host_or_framing_of_the_connection():
    tool = {
        "type": "mcp",
        "server_label": "calc",
        "headers": {"Host": "admin.internal", "transfer-Encoding": "chunked", "X-Trace": "t-1"},
    }
    [server] = resolve_servers([(0, tool)], McpAllowlist(["calc=http://tools.internal:8080/mcp"]))
    assert dict(server.endpoint.headers) == {"X-Trace": "t-1"}
