"""Settings as command-line flags: one flag per :class:`~gateway.config.settings.Settings`
field of the command (``--field-name``), each also an ``AGENTGATE_*`` variable;
a flag given on the command line wins over the environment. And the logging
every process of the command sets up from ``--log-level``."""

from __future__ import annotations

import argparse
import dataclasses
import logging
from typing import Any

from agentgate.gateway.config.setting_values import env_name, field_kind, flag_name, optional, parse_value
from agentgate.gateway.config.settings import Settings


def add_settings_flags(parser: argparse.ArgumentParser, command: str) -> None:
    for f in dataclasses.fields(Settings):
        if command not in f.metadata.get("commands", ("serve", "gateway")):
            continue
        flag = "--" + flag_name(f)
        kind = field_kind(f)
        default = f.default if f.default is not dataclasses.MISSING else None
        help = f"{f.metadata.get('help', '')} [env {env_name(f)}; default {default!r}]"
        if kind == "tuple":
            parser.add_argument(
                flag,
                dest=f.name,
                action="append",
                default=None,
                metavar="VALUE",
                help=help,
            )
        elif kind == "bool":
            parser.add_argument(
                flag,
                dest=f.name,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=help,
            )
        else:
            metavar = kind.upper() if kind != "str" else "TEXT"
            parser.add_argument(flag, dest=f.name, default=None, metavar=metavar, help=help)


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Environment first, then the flags given on the command line."""
    given: dict[str, Any] = {}
    for f in dataclasses.fields(Settings):
        value = getattr(args, f.name, None)
        if value is None:
            continue
        if field_kind(f) == "tuple":
            given[f.name] = tuple(part.strip() for item in value for part in item.split(",") if part.strip())
        elif field_kind(f) == "bool":
            given[f.name] = value
        else:
            given[f.name] = parse_value(f, value) if (optional(f) or field_kind(f) != "str") else value
    return Settings.from_env(**given)


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        force=True,
    )
