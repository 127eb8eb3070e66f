"""Who called, behind a reverse proxy: ``Forwarded`` (RFC 7239) and ``X-Forwarded-For`` are
honoured only from the peers ``--trusted-proxies`` names (CIDRs), and whether the caller is on
this machine decides what the operator routes ask of it (``gateway.state.auth``).

:class:`ForwardedMiddleware` (pure ASGI) leaves ``scope["state"]["remote"]``: True when the caller
is not on loopback as far as this server can tell. That is the case when the peer is a trusted
proxy and the client it names (the rightmost address of the chain that is not itself a trusted
proxy) is off loopback, and when the peer is not trusted but sends forwarded headers anyway: a
proxy on this machine in front of a loopback-bound gateway carries the whole network's requests
from 127.0.0.1, and its headers are the only sign. From a trusted proxy ``scope["client"]`` becomes
the client named (logs, rate limits by address see it); uvicorn's own proxy handling is off.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence

from starlette.types import ASGIApp, Receive, Scope, Send

from agentgate.gateway.command.exposure import is_loopback
from agentgate.gateway.config.setting_values import parse_networks

_FORWARDED_FOR = re.compile(r'for="?\[?([^\]";,]+)', re.IGNORECASE)


def forwarded_chain(headers: Sequence[tuple[bytes, bytes]]) -> list[str] | None:
    """The addresses the forwarded headers name, client first (None: no such header)."""
    chain: list[str] | None = None
    for name, value in headers:
        if name == b"forwarded":
            chain = [*(chain or []), *_FORWARDED_FOR.findall(value.decode("latin-1"))]
        elif name == b"x-forwarded-for":
            chain = [*(chain or []), *(part.strip() for part in value.decode("latin-1").split(",") if part.strip())]
    return chain


class ForwardedMiddleware:
    def __init__(self, app: ASGIApp, trusted: Sequence[str]) -> None:
        self.app = app
        self.trusted = parse_networks(trusted)

    def _trusted(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address.split("%")[0])
        except ValueError:
            return False  # a name or "unknown": nothing to trust
        return any(ip in network for network in self.trusted)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            peer = (scope.get("client") or ("", 0))[0]
            chain = forwarded_chain(scope["headers"])
            remote = not is_loopback(peer) if peer else False
            if chain is not None:
                if self._trusted(peer):
                    client = next((a for a in reversed(chain) if not self._trusted(a)), chain[0] if chain else peer)
                    scope["client"] = (client, 0)
                    remote = not is_loopback(client)
                else:
                    remote = True  # forwarded by a proxy not trusted: its client may be anyone
            scope.setdefault("state", {})["remote"] = remote
        await self.app(scope, receive, send)


def is_remote(scope: Scope) -> bool:
    """Whether :class:`ForwardedMiddleware` found the caller off loopback."""
    return scope.get("state", {}).get("remote", False)
