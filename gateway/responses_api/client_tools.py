"""A Responses request's tools, as Codex CLI sends them, on the chat core's function tools.

- ``function``: offered as it is (``strict`` defaults to true, as in OpenAI's API).
- ``namespace``: each function (or custom) tool inside is offered as ``NAMESPACE__NAME``
  (chat's tool names allow no dot); a call of it comes back as a ``function_call`` (or
  ``custom_tool_call``) item with ``name`` and ``namespace`` apart, as the openai SDK's types say.
- ``custom``: free-form input, offered as a function of one string argument ``input``; its call
  is a ``custom_tool_call`` item with that string. A ``grammar`` format of ``regex`` syntax
  constrains the string (a JSON Schema ``pattern``, compiled by the engine's xgrammar);
  ``lark`` is a 400 naming it (xgrammar compiles EBNF and regex, not Lark).
- ``mcp``: the server runs them (:mod:`gateway.tool_loop`).
- hosted tools (``web_search``, ``file_search``, ``code_interpreter``, ``image_generation``,
  ``computer_use``): a 400 naming the tool, unless ``--hosted-tool web_search=LABEL`` hands
  ``web_search`` to an operator's MCP server (an ``mcp`` tool of that label, run by the same
  loop) or ``--omit-unrunnable-tools`` leaves them out (named in :attr:`ClientTools.omitted`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentgate.gateway.api_types.response_items import flat_name
from agentgate.gateway.errors import BadRequestError

HOSTED = ("web_search", "web_search_preview", "file_search", "code_interpreter", "image_generation")
HOSTED_PREFIXES = ("web_search", "computer_use", "computer")
FREE_FORM = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}


@dataclass
class ClientTools:
    functions: list[dict[str, Any]] = field(default_factory=list)  # function tools as a response echoes them
    echoed: list[dict[str, Any]] = field(default_factory=list)  # the request's client tools, echoed
    mcp: list[tuple[int, dict[str, Any]]] = field(default_factory=list)  # (index, mcp tool) the server runs
    names: dict[str, tuple[str | None, str, bool]] = field(default_factory=dict)  # response_items.CallNames
    omitted: list[str] = field(default_factory=list)  # hosted tools left out (--omit-unrunnable-tools)


def _custom_parameters(tool: dict[str, Any], param: str) -> dict[str, Any]:
    fmt = tool.get("format") or {"type": "text"}
    if fmt.get("type") == "text":
        return FREE_FORM
    if fmt.get("type") == "grammar" and fmt.get("syntax") == "regex" and isinstance(fmt.get("definition"), str):
        properties = {"input": {"type": "string", "pattern": fmt["definition"]}}
        return {**FREE_FORM, "properties": properties}
    if fmt.get("type") == "grammar":
        raise BadRequestError(
            f"custom tool grammars of syntax {fmt.get('syntax')!r} are not supported: this server's grammar "
            "engine (xgrammar) compiles regex here, not lark",
            param=f"{param}.format.syntax",
        )
    raise BadRequestError(f"custom tool format of type {fmt.get('type')!r} is not supported", param=f"{param}.format")


def _function(tool: dict[str, Any], namespace: str | None, param: str, out: ClientTools) -> None:
    name = flat_name(namespace, str(tool.get("name")))
    out.names[name] = (namespace, str(tool.get("name")), tool.get("type") == "custom")
    if tool.get("type") == "custom":
        parameters, strict = _custom_parameters(tool, param), True
    elif tool.get("type") == "function":
        parameters, strict = tool.get("parameters"), tool.get("strict")
    else:
        raise BadRequestError(
            f"tools of type {tool.get('type')!r} are not supported inside a namespace", param=f"{param}.type"
        )
    out.functions.append(
        {
            "type": "function",
            "name": name,
            "description": tool.get("description"),
            "parameters": parameters,
            "strict": True if strict is None else strict,
        }
    )


def _hosted(kind: str) -> bool:
    return kind in HOSTED or kind.startswith(HOSTED_PREFIXES)


def client_tools(tools: list[dict[str, Any]] | None, hosted_by: dict[str, str], omit: bool) -> ClientTools:
    """The request's ``tools`` sorted (see the module doc); ``hosted_by``: ``--hosted-tool``'s
    {tool: MCP server label}; ``omit``: ``--omit-unrunnable-tools``."""
    out = ClientTools()
    for i, tool in enumerate(tools or ()):
        param, kind = f"tools[{i}]", str(tool.get("type"))
        if kind == "mcp":
            out.mcp.append((i, tool))
        elif kind in ("function", "custom"):
            _function(tool, None, param, out)
            out.echoed.append(tool if kind == "custom" else out.functions[-1])
        elif kind == "namespace":
            namespace = str(tool.get("name"))
            for j, inner in enumerate(tool.get("tools") or ()):
                _function(inner, namespace, f"{param}.tools[{j}]", out)
            out.echoed.append(tool)
        elif kind.startswith("web_search") and "web_search" in hosted_by:
            out.mcp.append((i, {"type": "mcp", "server_label": hosted_by["web_search"], "require_approval": "never"}))
        elif _hosted(kind) and omit:
            out.omitted.append(kind)
        elif _hosted(kind):
            raise BadRequestError(
                f"tools of type {kind!r} are hosted tools this server cannot run; leave it out, or ask the "
                "operator for --hosted-tool web_search=LABEL (an MCP server runs it) or --omit-unrunnable-tools",
                param=f"{param}.type",
            )
        else:
            raise BadRequestError(
                f"tools of type {kind!r} are not supported; this server runs function, custom, namespace and mcp tools",
                param=f"{param}.type",
            )
    return out
