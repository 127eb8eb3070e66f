"""Tool definitions and ``tool_choice``, checked before anything renders or compiles.

Tool definitions are validated (type, name, parameters as a JSON Schema valid
against its metaschema) and ``tool_choice`` is resolved against them:
problems are :class:`engine.errors.InvalidRequestError` (a 400) naming the
problem and the field.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import jsonschema
import msgspec

from agentgate.engine.byte_lru import ByteLRU, str_bytes
from agentgate.engine.errors import InvalidRequestError

_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
# Schemas checked, by their canonical JSON (the clients'), with their verdicts: least recently used
# out past this many bytes (key and verdict counted).
SCHEMA_VERDICT_BYTES = 8 << 20
_verdicts: ByteLRU[str, str] = ByteLRU(SCHEMA_VERDICT_BYTES)
_verdicts_lock = threading.Lock()


def validate_tools(tools: Sequence[Any] | None) -> list[dict[str, Any]] | None:
    """Check OpenAI tool definitions; returns them as plain dicts (None-valued keys dropped), or None for none.

    Each tool must be ``{"type": "function", "function": {"name", "description"?,
    "parameters"?, "strict"?}}`` with a name matching ``^[a-zA-Z0-9_-]{1,64}$``,
    unique, and ``parameters`` (when given) a JSON Schema, valid against its
    metaschema (the draft its ``$schema`` names, else 2020-12), describing an object.
    """
    if tools is None:
        return None
    tools = to_builtins(tools)
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
    with _verdicts_lock:
        problem = _verdicts.get(key)
    if problem is None:
        problem = _schema_problem(key)
        with _verdicts_lock:
            _verdicts.put(key, problem, str_bytes(key, problem))
    if problem:
        raise InvalidRequestError(f"{where} is not a valid JSON Schema: {problem}", param=param)


def _check_parameters(schema: Any, where: str) -> None:
    check_json_schema(schema, where, param="tools")
    kind = schema.get("type", "object")
    if kind != "object" and not (isinstance(kind, list) and "object" in kind):
        raise InvalidRequestError(f'{where} must describe an object (type "object"), got type {kind!r}', param="tools")


def _schema_problem(schema_json: str) -> str:
    """The metaschema violation of a schema (given as canonical JSON), or "" when it is valid."""
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    error = jsonschema.exceptions.best_match(cls(cls.META_SCHEMA).iter_errors(schema))
    if error is None:
        return ""
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
    tool_choice = to_builtins(tool_choice)
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


def to_builtins(value: Any) -> Any:
    """A copy as plain dicts and lists: the gateway's request types are msgspec structs."""
    try:
        return msgspec.to_builtins(value)
    except TypeError as e:
        raise InvalidRequestError(f"not JSON-like: {e}") from e
