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
  :func:`engine.text.chat_template.default_system_prompt`), so SmolLM2 keeps being "SmolLM";
- assistant tool calls become ``<tool_call>`` blocks after the message's text;
- tool results become ``<tool_response>…</tool_response>`` blocks in a **user**
  turn, consecutive results sharing one turn (as Qwen2.5/3 render them). Not a
  ``tool`` turn: ChatML models are trained on system/user/assistant only, and
  templates that check roles or their alternation accept a user turn where
  they would reject (or silently mis-render) an unknown role;
- null content becomes ``""`` and text parts are joined.

What a template supports, and its default system prompt, are read off it in
:mod:`engine.text.chat_template`, beside the renderer.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentgate.engine.errors import InvalidRequestError
from agentgate.engine.text.chat_template import (
    default_system_prompt,
    render_chat,
    renders_string_arguments,
    template_supports_tools,
)
from agentgate.gateway.tools.schema import resolve_tool_choice, to_builtins, validate_tools
from agentgate.gateway.tools.system_turns import place_system_turns

if TYPE_CHECKING:
    from agentgate.engine.text.tokenizer import Tokenizer


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

    The prompt does not depend on ``tool_choice`` (issue 35): every tool is presented, in the
    same words, whether the request forces a call, names one, leaves it to the model or forbids
    calls; what the choice implies is enforced by the grammar (``gateway.tools.constraints``:
    ``none`` excludes the tool-call markup). So a program whose turns alternate forced calls and a
    text answer keeps one prompt prefix, and its returning turns hit what they computed before.
    ``tool_choice`` is still checked against the tools (a 400 naming it). ``chat_template``
    overrides the model's; ``template_kwargs`` (``chat_template_kwargs``) reach the template.
    Raises InvalidRequestError.
    """
    tools_ = validate_tools(tools)
    resolve_tool_choice(tool_choice, tools_)
    presented = tools_ or None  # an empty list presents nothing, as no tools
    msgs = [_message(m, i) for i, m in enumerate(messages)]
    uses_tools = presented is not None or any(m.get("tool_calls") or m.get("role") == "tool" for m in msgs)
    template = chat_template or tokenizer.get_chat_template([] if uses_tools else None)
    variables = {**tokenizer.special_tokens_map, **template_kwargs}
    msgs = place_system_turns(template, msgs, tokenizer.special_tokens_map)

    if template_supports_tools(template):
        msgs = _native_messages(msgs, keep_string_arguments=renders_string_arguments(template))
        return render_chat(template, msgs, tools=presented, add_generation_prompt=add_generation_prompt, **variables)

    system = None
    if presented is not None:
        system = default_system_prompt(template, tuple(sorted(tokenizer.special_tokens_map.items())))
    msgs = _fallback_messages(msgs, presented, default_system=system)
    return render_chat(template, msgs, tools=None, add_generation_prompt=add_generation_prompt, **variables)


def _message(message: Any, i: int) -> dict[str, Any]:
    message = to_builtins(message)
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
            m = {**m, "tool_calls": [_with_decoded_arguments(c) for c in to_builtins(calls)]}
        out.append(m)
    return out


def _with_decoded_arguments(call: Any) -> Any:
    call = to_builtins(call)
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
            part = to_builtins(part)
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise InvalidRequestError(
                    f"messages[{i}].content: this model's chat template takes text parts only", param="messages"
                )
            parts.append(part["text"])
        return "\n".join(parts)
    raise InvalidRequestError(f"messages[{i}].content must be a string, an array of parts or null", param="messages")


def _tools_block(tools: list[dict[str, Any]]) -> str:
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
    return "\n".join(lines)


def _tool_call_block(call: Any, where: str) -> str:
    call = to_builtins(call)
    function = call.get("function") if isinstance(call, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        raise InvalidRequestError(f"{where}.function.name must be a string", param="messages")
    body = {"name": name, "arguments": _decode_arguments(function.get("arguments"))}  # type: ignore[union-attr]
    return "<tool_call>\n" + json.dumps(body, ensure_ascii=False) + "\n</tool_call>"


def _fallback_messages(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
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
        block = _tools_block(tools)
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
            blocks = [_tool_call_block(c, f"messages[{i}].tool_calls[{j}]") for j, c in enumerate(to_builtins(calls))]
            text = "\n".join([text, *blocks] if text else blocks)
        rewritten["content"] = text
        out.append(rewritten)
    return out
