"""Chat prompts with tools, for any chat model.

A template that supports tools natively (it reads ``tools`` and renders
assistant ``tool_calls`` and ``tool``-role messages: Qwen2.5/3, Hermes, Llama
3.1, Mistral) renders them itself, exactly as transformers would, given the
OpenAI-shaped messages.

Any other template (the default model SmolLM2's ChatML template has no tool
support, and fails on a message whose content is null) gets the conversation
rewritten first, in the Hermes/Qwen style the ``hermes`` parser reads back:

- the tool definitions go into the system message, Qwen2.5's wording: a
  ``<tools>…</tools>`` list and the instruction to answer with
  ``<tool_call>{"name": …, "arguments": …}</tool_call>``; after the
  conversation's own system message, or after the template's default system
  prompt when the conversation has none (found by rendering the template, see
  :func:`_default_system_prompt`), so SmolLM2 keeps being "SmolLM";
- assistant tool calls become ``<tool_call>`` blocks after the message's text;
- tool results become ``<tool_response>…</tool_response>`` blocks in a **user**
  turn, consecutive results sharing one turn (as Qwen2.5/3 render them). Not a
  ``tool`` turn: ChatML models are trained on system/user/assistant only, and
  templates that check roles or their alternation accept a user turn where
  they would reject (or silently mis-render) an unknown role;
- null content becomes ``""`` and text parts are joined.

Tool definitions are validated (type, name, parameters as a JSON Schema) and
``tool_choice`` is checked against them: problems are
:class:`engine.errors.InvalidRequestError` (a 400) naming the problem.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import jinja2
import jsonschema
import msgspec
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.parser import Parser

from agentgate.engine.chat_template import render_chat
from agentgate.engine.errors import InvalidRequestError

if TYPE_CHECKING:
    from agentgate.engine.tokenizer import Tokenizer

__all__ = [
    "ToolChoice",
    "check_json_schema",
    "render_chat_prompt",
    "resolve_tool_choice",
    "template_supports_tools",
    "validate_tools",
]

_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


# --- tool definitions and tool_choice ------------------------------------------


def validate_tools(tools: Sequence[Any] | None) -> list[dict[str, Any]] | None:
    """Check OpenAI tool definitions; returns them as plain dicts (None-valued keys dropped), or None for none.

    Each tool must be ``{"type": "function", "function": {"name", "description"?,
    "parameters"?, "strict"?}}`` with a name matching ``^[a-zA-Z0-9_-]{1,64}$``,
    unique, and ``parameters`` (when given) a JSON Schema, valid against its
    metaschema (the draft its ``$schema`` names, else 2020-12), describing an object.
    """
    if tools is None:
        return None
    tools = _builtins(tools)
    if not isinstance(tools, list):
        raise InvalidRequestError("tools must be an array of tool definitions", param="tools")
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise InvalidRequestError(f"{where} must be an object", param="tools")
        if tool.get("type") != "function":
            raise InvalidRequestError(f'{where}.type must be "function", got {tool.get("type")!r}', param="tools")
        function = tool.get("function")
        if not isinstance(function, dict):
            raise InvalidRequestError(f"{where}.function must be an object", param="tools")
        function = {k: v for k, v in function.items() if v is not None}
        name = function.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise InvalidRequestError(
                f"{where}.function.name {name!r} is invalid: it must match ^[a-zA-Z0-9_-]{{1,64}}$", param="tools"
            )
        if name in seen:
            raise InvalidRequestError(f"{where}.function.name {name!r} is defined twice", param="tools")
        seen.add(name)
        if "description" in function and not isinstance(function["description"], str):
            raise InvalidRequestError(f"{where}.function.description must be a string", param="tools")
        if "strict" in function and not isinstance(function["strict"], bool):
            raise InvalidRequestError(f"{where}.function.strict must be a boolean", param="tools")
        if "parameters" in function:
            _check_parameters(function["parameters"], f"{where}.function.parameters")
        out.append({**{k: v for k, v in tool.items() if v is not None}, "function": function})
    return out or None


def check_json_schema(schema: Any, where: str, *, param: str) -> None:
    """InvalidRequestError (on ``param``) unless ``schema`` is a JSON Schema object valid against its
    metaschema (the draft its ``$schema`` names, else 2020-12); ``where`` names it in the message."""
    if not isinstance(schema, dict):
        raise InvalidRequestError(f"{where} must be a JSON Schema object, got {type(schema).__name__}", param=param)
    try:
        key = json.dumps(schema, sort_keys=True)
    except (TypeError, ValueError) as e:
        raise InvalidRequestError(f"{where} is not JSON: {e}", param=param) from e
    problem = _schema_problem(key)
    if problem:
        raise InvalidRequestError(f"{where} is not a valid JSON Schema: {problem}", param=param)


def _check_parameters(schema: Any, where: str) -> None:
    check_json_schema(schema, where, param="tools")
    kind = schema.get("type", "object")
    if kind != "object" and not (isinstance(kind, list) and "object" in kind):
        raise InvalidRequestError(f'{where} must describe an object (type "object"), got type {kind!r}', param="tools")


@functools.lru_cache(maxsize=512)
def _schema_problem(schema_json: str) -> str | None:
    """The metaschema violation of a schema (given as canonical JSON, to cache on), or None."""
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    error = jsonschema.exceptions.best_match(cls(cls.META_SCHEMA).iter_errors(schema))
    if error is None:
        return None
    path = "/".join(str(p) for p in error.absolute_path)
    return f"{error.message} (at {'/' + path if path else 'the root'})"


@dataclass(frozen=True, slots=True)
class ToolChoice:
    """A request's ``tool_choice``, resolved: ``named`` carries the function name."""

    mode: Literal["none", "auto", "required", "named"]
    name: str | None = None


def resolve_tool_choice(tool_choice: Any, tools: list[dict[str, Any]] | None) -> ToolChoice:
    """OpenAI's ``tool_choice`` against validated ``tools``: the default is ``auto`` with tools, else ``none``.

    ``required`` or a named function without tools, or a name that is not among
    them, is an InvalidRequestError on ``tool_choice``.
    """
    tool_choice = _builtins(tool_choice)
    if tool_choice is None:
        return ToolChoice("auto" if tools else "none")
    if tool_choice in ("none", "auto"):
        return ToolChoice(tool_choice if tools else "none")
    if tool_choice == "required":
        if not tools:
            raise InvalidRequestError('tool_choice "required" needs tools', param="tool_choice")
        return ToolChoice("required")
    if isinstance(tool_choice, dict) and tool_choice.get("type") == "function":
        function = tool_choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str):
            raise InvalidRequestError("tool_choice.function.name must be a string", param="tool_choice")
        known = [t["function"]["name"] for t in tools or ()]
        if name not in known:
            raise InvalidRequestError(
                f"tool_choice names function {name!r}, which is not among the tools ({', '.join(known) or 'none'})",
                param="tool_choice",
            )
        return ToolChoice("named", name)
    raise InvalidRequestError(
        'tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}, '
        f"got {tool_choice!r}",
        param="tool_choice",
    )


# --- templates -------------------------------------------------------------------


class _GenerationTag(Extension):
    """Lets ``{% generation %}`` (HF's training-mask tag) parse; rendering is engine.chat_template's."""

    tags = {"generation"}

    def parse(self, parser: Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body).set_lineno(lineno)


_PARSE_ENV = jinja2.Environment(extensions=[loopcontrols, _GenerationTag])


@functools.lru_cache(maxsize=32)
def template_supports_tools(template: str) -> bool:
    """Whether a chat template renders tools itself: it reads the ``tools`` variable, assistant
    ``tool_calls`` and a ``tool`` (or Llama's ``ipython``) role. Decided on the template's syntax
    tree, so text in comments or strings (``"<tools>"``) does not count."""
    try:
        ast = _PARSE_ENV.parse(template)
    except jinja2.TemplateSyntaxError:
        return False  # rendering will report it
    reads_tools = any(n.name in ("tools", "custom_tools") and n.ctx == "load" for n in ast.find_all(nodes.Name))
    consts = {n.value for n in ast.find_all(nodes.Const) if isinstance(n.value, str)}
    reads_calls = "tool_calls" in consts or any(n.attr == "tool_calls" for n in ast.find_all(nodes.Getattr))
    return reads_tools and reads_calls and bool(consts & {"tool", "ipython"})


def _renders_string_arguments(template: str) -> bool:
    """Qwen3-style templates write ``arguments`` verbatim when it is a string (``arguments is string``)."""
    return re.search(r"arguments\s+is\s+string", template) is not None


# --- rendering -------------------------------------------------------------------


def render_chat_prompt(
    tokenizer: Tokenizer,
    messages: Sequence[Any],
    *,
    tools: Sequence[Any] | None = None,
    tool_choice: Any = None,
    add_generation_prompt: bool = True,
    chat_template: str | None = None,
    **template_kwargs: Any,
) -> str:
    """The prompt for OpenAI-shaped ``messages`` (dicts or msgspec structs) and ``tools``.

    ``tool_choice`` ``none`` presents no tools (the conversation's past calls
    and results still render); a named function presents only that tool;
    ``required``/named also say so in the fallback prompt (constrained decoding
    enforces it). ``chat_template`` overrides the model's; ``template_kwargs``
    (``chat_template_kwargs``) reach the template. Raises InvalidRequestError.
    """
    tools_ = validate_tools(tools)
    choice = resolve_tool_choice(tool_choice, tools_)
    presented: list[dict[str, Any]] | None = None
    if choice.mode == "named":
        presented = [t for t in tools_ or () if t["function"]["name"] == choice.name]
    elif choice.mode != "none":
        presented = tools_
    msgs = [_message(m, i) for i, m in enumerate(messages)]
    uses_tools = presented is not None or any(m.get("tool_calls") or m.get("role") == "tool" for m in msgs)
    template = chat_template or tokenizer.get_chat_template([] if uses_tools else None)
    variables = {**tokenizer.special_tokens_map, **template_kwargs}

    if template_supports_tools(template):
        msgs = _native_messages(msgs, keep_string_arguments=_renders_string_arguments(template))
        return render_chat(template, msgs, tools=presented, add_generation_prompt=add_generation_prompt, **variables)

    system = None
    if presented is not None:
        system = _default_system_prompt(template, tuple(sorted(tokenizer.special_tokens_map.items())))
    msgs = _fallback_messages(msgs, presented, choice, default_system=system)
    return render_chat(template, msgs, tools=None, add_generation_prompt=add_generation_prompt, **variables)


def _builtins(value: Any) -> Any:
    """A copy as plain dicts and lists: the gateway's request types are msgspec structs."""
    try:
        return msgspec.to_builtins(value)
    except TypeError as e:
        raise InvalidRequestError(f"not JSON-like: {e}") from e


def _message(message: Any, i: int) -> dict[str, Any]:
    message = _builtins(message)
    if not isinstance(message, dict):
        raise InvalidRequestError(f"messages[{i}] must be an object", param="messages")
    return message


def _native_messages(messages: list[dict[str, Any]], *, keep_string_arguments: bool) -> list[dict[str, Any]]:
    """OpenAI's ``function.arguments`` is a JSON string; tool-aware templates expect the mapping
    (transformers' documented form, what vLLM hands them). Strings that are not JSON stay strings,
    and so do all strings for templates that render string arguments verbatim."""
    out = []
    for m in messages:
        calls = m.get("tool_calls")
        if calls and not keep_string_arguments:
            m = {**m, "tool_calls": [_with_decoded_arguments(c) for c in _builtins(calls)]}
        out.append(m)
    return out


def _with_decoded_arguments(call: Any) -> Any:
    call = _builtins(call)
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("arguments"), str):
        return call
    return {**call, "function": {**function, "arguments": _decode_arguments(function["arguments"])}}


def _decode_arguments(arguments: Any) -> Any:
    """A call's arguments as a value: "" or None -> {}; JSON text decoded; other text kept as is."""
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def _text(message: dict[str, Any], i: int) -> str:
    """A message's content as text: null -> "", text parts joined with newlines."""
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            part = _builtins(part)
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise InvalidRequestError(
                    f"messages[{i}].content: this model's chat template takes text parts only", param="messages"
                )
            parts.append(part["text"])
        return "\n".join(parts)
    raise InvalidRequestError(f"messages[{i}].content must be a string, an array of parts or null", param="messages")


def _tools_block(tools: list[dict[str, Any]], choice: ToolChoice) -> str:
    """Qwen2.5's tool instructions, which SmolLM2/Qwen/Hermes-style models follow."""
    lines = [
        "# Tools",
        "",
        "You may call one or more functions to assist with the user query.",
        "",
        "You are provided with function signatures within <tools></tools> XML tags:",
        "<tools>",
        *(json.dumps(t, ensure_ascii=False) for t in tools),
        "</tools>",
        "",
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:",
        "<tool_call>",
        '{"name": <function-name>, "arguments": <args-json-object>}',
        "</tool_call>",
    ]
    if choice.mode == "required":
        lines += ["", "You must call at least one function."]
    elif choice.mode == "named":
        lines += ["", f"You must call the function {choice.name}."]
    return "\n".join(lines)


def _tool_call_block(call: Any, where: str) -> str:
    call = _builtins(call)
    function = call.get("function") if isinstance(call, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        raise InvalidRequestError(f"{where}.function.name must be a string", param="messages")
    body = {"name": name, "arguments": _decode_arguments(function.get("arguments"))}  # type: ignore[union-attr]
    return "<tool_call>\n" + json.dumps(body, ensure_ascii=False) + "\n</tool_call>"


def _fallback_messages(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    choice: ToolChoice,
    *,
    default_system: str | None,
) -> list[dict[str, Any]]:
    """The conversation rewritten for a template without tool support (see the module docstring)."""
    out: list[dict[str, Any]] = []
    rest = list(enumerate(messages))
    if tools is not None:
        system = default_system
        if messages and messages[0].get("role") == "system":
            system = _text(messages[0], 0)
            rest = rest[1:]
        block = _tools_block(tools, choice)
        out.append({"role": "system", "content": f"{system}\n\n{block}" if system else block})
    after_tool = False
    for i, m in rest:
        role = m.get("role")
        if role == "tool":
            response = f"<tool_response>\n{_text(m, i)}\n</tool_response>"
            if after_tool:
                out[-1]["content"] += "\n" + response
            else:
                out.append({"role": "user", "content": response})
            after_tool = True
            continue
        after_tool = False
        rewritten = {k: v for k, v in m.items() if k not in ("tool_calls", "content")}
        text = _text(m, i)
        calls = m.get("tool_calls")
        if role == "assistant" and calls:
            blocks = [_tool_call_block(c, f"messages[{i}].tool_calls[{j}]") for j, c in enumerate(_builtins(calls))]
            text = "\n".join([text, *blocks] if text else blocks)
        rewritten["content"] = text
        out.append(rewritten)
    return out


_SYSTEM_PROBE = "\x00agentgate-system\x00"
_USER_PROBE = "\x00agentgate-user\x00"


@functools.lru_cache(maxsize=32)
def _default_system_prompt(template: str, special_tokens: tuple[tuple[str, str], ...]) -> str | None:
    """The system prompt a template writes when the conversation has none (SmolLM2's "You are a
    helpful AI assistant named SmolLM…"), or None.

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

