"""Which MCP servers a request may name: the operator's, never any other (no SSRF).

A request's ``mcp`` tool names a ``server_url`` (and a ``server_label``); the gateway
would connect there from inside its network, so it connects only where the operator
said it may:

- ``--mcp-server LABEL=URL`` (repeatable): a server by name. A tool may give the label
  alone (the gateway knows the URL) or the label with that same URL.
- ``--mcp-allow-url PATTERN`` (repeatable): any URL whose scheme and host (with its
  port) equal the pattern's and whose path matches the pattern's path as a glob
  (``fnmatch``: ``*`` any run of characters). ``https://tools.internal/mcp/*`` allows
  every path under ``/mcp/`` on that host and nothing on any other host; the host is
  never a glob, so a pattern cannot be widened by what a client writes before an ``@``.

A URL with credentials in it (``user:pass@host``), a query, a fragment or a scheme
other than http(s) is refused whatever the lists say. With neither flag no MCP tool
is allowed. A refused tool is a 400 naming its URL and the field.

A path is matched, and connected to, as the HTTP client would send it: normalized first
(RFC 3986: percent-escapes of unreserved characters decoded, dot segments removed), so
``/mcp/../admin`` is ``/admin`` and matches no ``/mcp/*``. A path that hides a separator
or a dot segment in an escape (``%2F``, ``%5C``, ``%2E%2E``) or holds a backslash is
refused: servers and proxies disagree on what those mean.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from urllib.parse import SplitResult, urlsplit, urlunsplit

from agentgate.gateway.errors import BadRequestError

SCHEMES = ("http", "https")
UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")


@dataclass(frozen=True, slots=True)
class McpServer:
    """An MCP server a request may reach: its label (as the request names it) and URL."""

    label: str
    url: str


def _decode_unreserved(path: str) -> str | None:
    """``path`` with the escapes of unreserved characters decoded (uppercase hex for the rest), or
    None when an escape hides a separator (``/``, ``\\``) or a segment that would be a dot segment."""

    def decode(match: re.Match[str]) -> str:
        char = chr(int(match.group(1), 16))
        return char if char in UNRESERVED else "%" + match.group(1).upper()

    segments = path.split("/")
    decoded = [ESCAPE.sub(decode, s) for s in segments]
    if any("%2F" in s or "%5C" in s for s in decoded):
        return None
    if any(d in (".", "..") and s != d for s, d in zip(segments, decoded, strict=True)):
        return None
    return "/".join(decoded)


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4 for an absolute path: ``.`` segments dropped, ``..`` pops one."""
    out: list[str] = []
    segments = path.split("/")[1:] if path.startswith("/") else path.split("/")
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == ".":
            if last:
                out.append("")
        elif segment == "..":
            if out:
                out.pop()
            if last:
                out.append("")
        else:
            out.append(segment)
    return "/" + "/".join(out)


def _parts(url: str) -> SplitResult | None:
    """``url`` split with its path normalized, or None when it is no plain http(s) URL (see the
    module doc)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a port that is no number raises here)
    except ValueError:
        return None
    if parts.scheme not in SCHEMES or not parts.hostname or "@" in parts.netloc or parts.query or parts.fragment:
        return None
    if "\\" in parts.path:
        return None
    path = _decode_unreserved(parts.path or "/")
    if path is None:
        return None
    return parts._replace(path=_remove_dot_segments(path))


def normalized(url: str) -> str | None:
    """``url`` as the gateway connects to it (see the module doc), or None when it is refused."""
    parts = _parts(url)
    return None if parts is None else urlunsplit(parts)


def _origin(parts: SplitResult) -> tuple[str, str, int]:
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, (parts.hostname or "").lower(), port


class McpAllowlist:
    """The servers and URL patterns the operator allowed (``--mcp-server``, ``--mcp-allow-url``)."""

    def __init__(self, servers: Iterable[str] = (), patterns: Iterable[str] = ()) -> None:
        self.servers: dict[str, str] = {}
        for entry in servers:
            label, sep, url = entry.partition("=")
            if not sep or not label or _parts(url) is None:
                raise ValueError(f"--mcp-server takes LABEL=URL with an http(s) URL, got {entry!r}")
            self.servers[label] = url
        self.patterns: list[SplitResult] = []
        for pattern in patterns:
            parts = _parts(pattern)
            if parts is None or any(c in (parts.hostname or "") for c in "*?["):
                raise ValueError(f"--mcp-allow-url takes an http(s) URL whose path may hold globs, got {pattern!r}")
            self.patterns.append(parts)

    @property
    def empty(self) -> bool:
        return not self.servers and not self.patterns

    def allows(self, url: str) -> bool:
        """Whether ``url`` is a configured server's or matches a pattern, once normalized."""
        if url in self.servers.values():
            return True
        parts = _parts(url)
        if parts is None:
            return False
        if urlunsplit(parts) in self.servers.values():
            return True
        return any(_origin(parts) == _origin(p) and fnmatchcase(parts.path, p.path) for p in self.patterns)

    def resolve(
        self,
        label: object,
        url: object,
        param: str,
        *,
        label_field: str = "server_label",
        url_field: str = "server_url",
    ) -> McpServer:
        """The server a request names (``param``: its field, for the 400; ``label_field`` and
        ``url_field``: the API's names of the label and the URL)."""
        if not isinstance(label, str) or not label:
            raise BadRequestError(f"an MCP server needs a `{label_field}`", param=f"{param}.{label_field}")
        if url is None:
            if label not in self.servers:
                raise BadRequestError(
                    f"no MCP server is configured with the label {label!r}: give its `{url_field}` "
                    "(one the operator allowed)",
                    param=f"{param}.{url_field}",
                )
            return McpServer(label, self.servers[label])
        if not isinstance(url, str) or not self.allows(url):
            raise BadRequestError(
                f"MCP server {url!r} is not allowed on this server: the operator allows servers with "
                "--mcp-server LABEL=URL and --mcp-allow-url PATTERN",
                param=f"{param}.{url_field}",
                code="mcp_server_not_allowed",
            )
        return McpServer(label, url if url in self.servers.values() else urlunsplit(_parts(url)))
