"""Chat templates, rendered the way HF transformers' ``apply_chat_template`` renders them.

Templates are untrusted Jinja code from model repositories: they run in an
immutable sandbox with the same environment, filters and globals as
transformers (``trim_blocks``, ``lstrip_blocks``, loop controls,
``raise_exception``, ``strftime_now``, an HTML-free ``tojson``, the
``{% generation %}`` tag), so a prompt renders byte for byte as it does there.
Messages get the same clean-up as in transformers 5: keys whose value is None
are dropped (OpenAI clients send ``"content": null`` beside ``tool_calls``) and
reasoning given as ``reasoning``/``thinking`` is also passed as
``reasoning_content`` (and vice versa).

What a template does is read off it with the same environment: whether it
renders tools itself (:func:`template_supports_tools`, on its syntax tree),
whether it writes string arguments verbatim, and the system prompt it writes
when a conversation has none (:func:`default_system_prompt`).
"""

from __future__ import annotations

import functools
import json
import re
from datetime import datetime
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment

from agentgate.engine.errors import InvalidRequestError

_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def render_chat(
    template: str,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    bos_token: str | None = None,
    eos_token: str | None = None,
    **kwargs: Any,
) -> str:
    """Render ``messages`` (and ``tools``, as given) with ``template``.

    ``bos_token``/``eos_token`` and every extra keyword become template
    variables; a special token left None stays undefined, as in transformers.
    Raises InvalidRequestError with the template's own message when it calls
    ``raise_exception`` or fails on the messages, and when it does not compile.
    """
    specials = {k: v for k, v in (("bos_token", bos_token), ("eos_token", eos_token)) if v is not None}
    context = {
        "messages": _normalize_messages(messages),
        "tools": tools,
        "documents": None,
        "add_generation_prompt": add_generation_prompt,
        **specials,
        **kwargs,
    }
    compiled = _compile(template)
    try:
        return compiled.render(**context)
    except jinja2.TemplateError as e:
        raise InvalidRequestError(e.message or type(e).__name__, param="messages") from e
    except Exception as e:  # the template is foreign code: any failure is this request's messages meeting it
        message = f"the chat template failed on these messages: {type(e).__name__}: {e}"
        raise InvalidRequestError(message, param="messages") from e


def _normalize_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    normalized = []
    for message in messages:
        if not isinstance(message, dict):
            raise InvalidRequestError(f"each message must be an object, got {message!r}", param="messages")
        message = {k: v for k, v in message.items() if v is not None}
        reasoning = next((message[k] for k in _REASONING_FIELDS if k in message), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        normalized.append(message)
    return normalized


@functools.lru_cache(maxsize=32)
def _compile(template: str) -> jinja2.Template:
    """Compile once per distinct template (a failed compile is not cached and raises each time)."""
    try:
        return _ENV.from_string(template)
    except jinja2.TemplateSyntaxError as e:
        raise InvalidRequestError(f"the chat template does not compile: {e.message} (line {e.lineno})") from e


class _GenerationTag(Extension):
    """``{% generation %}…{% endgeneration %}`` marks assistant text for HF's training masks; it renders its body."""

    tags = {"generation"}

    def parse(self, parser: Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: jinja2.runtime.Macro) -> str:
        return caller()


class _Namespace(jinja2.utils.Namespace):
    """``namespace()`` that refuses underscore-prefixed attributes (CPython internals), as transformers does."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # Jinja's signature trick, so namespace(self=...) works
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"chat templates cannot set underscore attributes ({name!r})")


class _Dict:
    """``dict`` for templates: callable and ``fromkeys`` only, no type object to climb out of."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False
) -> str:
    """transformers' ``tojson``: Jinja's own escapes HTML characters, this one does not."""
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _Dict()
    env.globals["namespace"] = _Namespace
    return env


_ENV = _environment()


# -- what a template does ---------------------------------------------------------


@functools.lru_cache(maxsize=32)
def template_supports_tools(template: str) -> bool:
    """Whether a chat template renders tools itself: it reads the ``tools`` variable, assistant
    ``tool_calls`` and a ``tool`` (or Llama's ``ipython``) role. Decided on the template's syntax
    tree, so text in comments or strings (``"<tools>"``) does not count."""
    try:
        ast = _ENV.parse(template)
    except jinja2.TemplateSyntaxError:
        return False  # rendering will report it
    reads_tools = any(n.name in ("tools", "custom_tools") and n.ctx == "load" for n in ast.find_all(nodes.Name))
    consts = {n.value for n in ast.find_all(nodes.Const) if isinstance(n.value, str)}
    reads_calls = "tool_calls" in consts or any(n.attr == "tool_calls" for n in ast.find_all(nodes.Getattr))
    return reads_tools and reads_calls and bool(consts & {"tool", "ipython"})


def renders_string_arguments(template: str) -> bool:
    """Qwen3-style templates write ``arguments`` verbatim when it is a string (``arguments is string``)."""
    return re.search(r"arguments\s+is\s+string", template) is not None


_SYSTEM_PROBE = "\x00agentgate-system\x00"
_USER_PROBE = "\x00agentgate-user\x00"


@functools.lru_cache(maxsize=32)
def default_system_prompt(template: str, special_tokens: tuple[tuple[str, str], ...]) -> str | None:
    """The system prompt a template writes when the conversation has none (SmolLM2's "You are a
    helpful AI assistant named SmolLM…"), or None; ``special_tokens``: the template's variables
    (``bos_token``, ...) as sorted pairs.

    Found without knowing the template: render [system S, user U] = P + S + Q and
    [user U]; if the latter is P + D + Q, D is the default.
    """
    variables = dict(special_tokens)
    try:
        with_system = render_chat(
            template,
            [{"role": "system", "content": _SYSTEM_PROBE}, {"role": "user", "content": _USER_PROBE}],
            add_generation_prompt=False,
            **variables,
        )
        without = render_chat(
            template, [{"role": "user", "content": _USER_PROBE}], add_generation_prompt=False, **variables
        )
    except InvalidRequestError:
        return None
    if with_system.count(_SYSTEM_PROBE) != 1:
        return None
    prefix, suffix = with_system.split(_SYSTEM_PROBE)
    if len(without) <= len(prefix) + len(suffix) or not (without.startswith(prefix) and without.endswith(suffix)):
        return None
    return without[len(prefix) : len(without) - len(suffix)] or None
