"""The reasoning and chat-template settings' checks (issue 48): ``--reasoning-parser``,
``--reasoning-budget``, ``--chat-template PATH`` and ``--default-chat-template-kwargs JSON``. Each
raises a ValueError naming the value (the command exits 2 with it): an unknown parser by name, a
template file that does not render a one-message conversation by file and line. Their fields are
:class:`ReasoningSettings`, a base of :class:`~gateway.config.settings.Settings`."""

from __future__ import annotations

import json
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentgate.gateway.config.setting_values import setting
from agentgate.gateway.reasoning.parsers import PARSER_NAMES, ReasoningParser, resolve_parser

PROBE = [{"role": "user", "content": "Hello"}]
"""The conversation a ``--chat-template`` must render at start-up."""


@dataclass(frozen=True)
class ReasoningSettings:
    reasoning_parser: str = setting(
        "reasoning parser: auto (from the chat template), qwen3, deepseek_r1, none", default="auto"
    )
    reasoning_budget: int | None = setting(
        "default thinking budget in tokens (kept under half of a request's max_tokens)", default=None
    )
    chat_template: str | None = setting("a Jinja chat template file replacing the model's", default=None)
    default_chat_template_kwargs: str | None = setting(
        "JSON object of template variables; a request's chat_template_kwargs win", default=None
    )


def check_reasoning_settings(settings: Any) -> None:
    """ValueError for the first reasoning or chat-template value of ``settings`` (a Settings) that
    the gateway cannot run with."""
    if settings.reasoning_parser not in PARSER_NAMES:
        raise ValueError(
            f"unknown reasoning parser {settings.reasoning_parser!r}: choose one of {', '.join(PARSER_NAMES)}"
        )
    if settings.reasoning_budget is not None and settings.reasoning_budget < 0:
        raise ValueError(f"reasoning_budget must be 0 or more, got {settings.reasoning_budget}")
    kwargs = template_kwargs(settings.default_chat_template_kwargs)
    if settings.chat_template is not None:
        check_template_file(Path(settings.chat_template), kwargs)


def apply_template_settings(tokenizer: Any, settings: Any) -> ReasoningParser | None:
    """At start: ``--chat-template``'s file replaces the model's templates on ``tokenizer`` (every
    rendering, /tokenize and tool-parser choice included, uses it), and the reasoning parser is
    resolved, once, from the template in use (``auto``: :func:`resolve_parser`)."""
    if settings.chat_template is not None:
        tokenizer.chat_templates = {"default": Path(settings.chat_template).read_text(encoding="utf-8")}
    return resolve_parser(settings.reasoning_parser, tokenizer.chat_template)


def template_kwargs(text: str | None) -> dict[str, Any]:
    """``--default-chat-template-kwargs``: a JSON object (None: none)."""
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"default_chat_template_kwargs is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ValueError(f"default_chat_template_kwargs must be a JSON object, got {text!r}")
    return value


def check_template_file(path: Path, kwargs: dict[str, Any]) -> str:
    """The template's text, once it renders :data:`PROBE` with ``kwargs``; else a ValueError naming
    the file and the template's line."""
    from agentgate.engine.errors import InvalidRequestError
    from agentgate.engine.text.chat_template import render_chat

    try:
        template = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"chat template {path}: cannot be read: {exc}") from exc
    try:
        render_chat(template, PROBE, **kwargs)
    except InvalidRequestError as exc:
        line = _template_line(exc)
        where = f"{path}, line {line}" if line is not None else str(path)
        raise ValueError(f"chat template {where} does not render: {exc}") from exc
    return template


def _template_line(exc: BaseException) -> int | None:
    """The template line an error of ``render_chat`` points at: a syntax error's own, or the last
    frame of the compiled template (Jinja names it ``<template>``) in the cause's traceback."""
    cause = exc.__cause__
    if cause is None:
        return None
    lineno = getattr(cause, "lineno", None)
    if lineno is not None:
        return lineno
    frames = [f for f in traceback.extract_tb(cause.__traceback__) if f.filename == "<template>"]
    return frames[-1].lineno if frames else None
