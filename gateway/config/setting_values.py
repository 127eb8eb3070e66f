"""A setting as text: the field a :class:`~gateway.config.settings.Settings` setting is declared
with (`setting`: its help, flag and commands), the flag and the ``AGENTGATE_*`` variable it is
given by, its kind, and its value parsed from a flag or a variable (``gateway.config.flags``
builds the command line from them)."""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

ENV_PREFIX = "AGENTGATE_"
COMMANDS = ("serve", "gateway", "engine")


def setting(
    help: str,
    *,
    flag: str | None = None,
    secret: bool = False,
    engine: bool = False,
    commands: tuple[str, ...] | None = None,
    **kw: Any,
) -> Any:
    """A field with its CLI help; ``flag`` overrides the derived flag name; ``secret``: kept out of
    ``repr``; ``commands``: the commands that take it (default: by ``engine``)."""
    if commands is None:
        commands = ("serve", "engine") if engine else ("serve", "gateway")
    metadata = {"help": help, "flag": flag, "engine": engine, "commands": commands}
    return dataclasses.field(metadata=metadata, repr=not secret, **kw)


def flag_name(f: dataclasses.Field) -> str:
    return f.metadata.get("flag") or f.name.replace("_", "-")


def env_name(f: dataclasses.Field) -> str:
    return ENV_PREFIX + flag_name(f).replace("-", "_").upper()


def field_kind(f: dataclasses.Field) -> str:
    """'tuple', 'bool', 'int', 'float' or 'str' (the annotation, read as a string)."""
    annotation = str(f.type)
    for kind in ("tuple", "bool", "int", "float"):
        if annotation.startswith(kind):
            return kind
    return "str"


def optional(f: dataclasses.Field) -> bool:
    return "None" in str(f.type)


def env_values(fields: Iterable[dataclasses.Field], environ: Mapping[str, str]) -> dict[str, Any]:
    """The values ``environ``'s ``AGENTGATE_*`` variables give ``fields``, by field name."""
    return {f.name: parse_value(f, environ[env_name(f)]) for f in fields if env_name(f) in environ}


def parse_value(f: dataclasses.Field, raw: str) -> Any:
    """One setting from its text (an environment variable or a flag)."""
    kind = field_kind(f)
    if kind == "tuple":
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    if optional(f) and raw.strip().lower() in ("", "none"):
        return None
    if kind == "bool":
        value = raw.strip().lower()
        if value in ("1", "true", "yes", "on"):
            return True
        if value in ("0", "false", "no", "off", ""):
            return False
        raise ValueError(f"{env_name(f)}: expected a boolean, got {raw!r}")
    try:
        return {"int": int, "float": float, "str": str}[kind](raw)
    except ValueError:
        raise ValueError(f"{flag_name(f)}: expected {kind}, got {raw!r}") from None


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(cidrs: Sequence[str]) -> list[Network]:
    """``--trusted-proxies`` as networks (ValueError naming a value that is not an address or CIDR)."""
    networks = []
    for cidr in cidrs:
        try:
            networks.append(ipaddress.ip_network(cidr.strip(), strict=False))
        except ValueError:
            raise ValueError(f"--trusted-proxies takes addresses or CIDRs (10.0.0.0/8, ::1), got {cidr!r}") from None
    return networks
