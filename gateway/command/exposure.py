"""Who can reach the gateway, from its bind address, and what start-up says about it.

A gateway bound to loopback (127.0.0.0/8, ::1, ``localhost``) is reached from
this machine only: with no key, everything stays open, as it always has. Bound
anywhere else (``0.0.0.0``, ``::``, a LAN or pod address, a host name) anyone
who reaches the port is a client, so unless the operator starts it with
``--allow-unauthenticated-ops`` (a private network):

- the operator routes (pause, resume, aborts, the request, session and replica
  listings), the dashboard page and its stats refuse with 403 when no
  ``--admin-key`` is set, and need the admin key when one is;
- ``/metrics`` needs a key (an API key or the admin key), and refuses with 403
  when none is set (:mod:`gateway.state.auth` says why);

and start-up logs a WARNING for what is open to everyone: inference without
``--api-key``, and the operator routes under ``--allow-unauthenticated-ops``.
"""

from __future__ import annotations

import ipaddress

from agentgate.gateway.config.settings import Settings

LOOPBACK_NAMES = frozenset({"localhost"})
ALL_INTERFACES = frozenset({"", "0.0.0.0", "::"})


def is_loopback(host: str) -> bool:
    """Whether a server bound to ``host`` is reached from this machine only. A host name other
    than ``localhost`` is not: what it resolves to is not ours to trust."""
    name = host.strip().removeprefix("[").removesuffix("]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        address = ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1
    return (mapped or address).is_loopback


def ops_exposed(settings: Settings) -> bool:
    """Whether the operator routes, the dashboard and ``/metrics`` must be guarded by a key even
    where none is configured: bound off loopback, without ``--allow-unauthenticated-ops``."""
    return not is_loopback(settings.host) and not settings.allow_unauthenticated_ops


def reach(settings: Settings) -> str:
    """Who reaches the server, in words, for the start-up warnings."""
    if settings.host.strip() in ALL_INTERFACES:
        return f"anyone who can reach port {settings.port} on any address of this machine"
    return f"anyone who can reach {settings.host}:{settings.port}"


def auth_summary(settings: Settings) -> str:
    """The ``auth:`` part of the start-up line."""
    loopback = is_loopback(settings.host)
    if loopback and not settings.api_keys and settings.admin_key is None:
        return "open"
    parts = [f"{len(settings.api_keys)} API key(s)" if settings.api_keys else "open /v1"]
    if settings.admin_key is not None:
        parts.append("admin key")
    elif settings.api_keys:
        parts.append("no admin key (operator routes closed)")
    elif not loopback and settings.allow_unauthenticated_ops:
        parts.append("operator routes open (--allow-unauthenticated-ops)")
    elif not loopback:
        parts.append("no admin key (operator routes, dashboard and /metrics closed off loopback)")
    return ", ".join(parts)


def exposure_warnings(settings: Settings) -> list[str]:
    """The WARNING lines start-up logs: what anyone who reaches a non-loopback address may do."""
    if is_loopback(settings.host):
        return []
    who = reach(settings)
    warnings = []
    if not settings.api_keys:
        warnings.append(
            f"inference is open: {who} can generate with /v1/chat/completions, /v1/completions, /v1/responses "
            f"and /v1/messages, and call /tokenize and /detokenize, without a key; start with --api-key to "
            f"require one"
        )
    if settings.allow_unauthenticated_ops:
        if settings.admin_key is None and not settings.api_keys:
            warnings.append(
                f"operator routes are unauthenticated (--allow-unauthenticated-ops): {who} can pause, resume "
                f"and abort every request (/pause, /resume, /abort_requests, DELETE /v1/requests/{{id}}), and "
                f"read the requests in flight, sessions, engine addresses and load (/dashboard, "
                f"/dashboard/stats, /v1/requests, /v1/sessions, /v1/replicas, /metrics); use it on a private "
                f"network only, or start with --admin-key"
            )
        else:
            warnings.append(
                f"/metrics is open (--allow-unauthenticated-ops): {who} can read the load, latencies "
                f"and engine addresses it reports"
            )
    return warnings
