"""Python functions as tools: JSON schemas from signatures, and calling them safely.

    @tool
    def get_weather(city: str, unit: Literal["C", "F"] = "C") -> str:
        \"\"\"The current weather in a city.

        Args:
            city: the city's name, e.g. "Paris".
            unit: the temperature unit.
        \"\"\"

``get_weather`` stays callable; ``get_weather.schema`` is OpenAI's tool
definition: the name, the docstring's first paragraph as the description, a
JSON Schema of the parameters from the type hints (str, int, float, bool,
None, list/tuple/set, dict, Literal, Enum, Optional/unions, Annotated[T,
"description"], TypedDict and dataclasses), defaults, and per-parameter
descriptions from the docstring (Google ``Args:``, NumPy ``Parameters``, or
Sphinx ``:param x:``). Parameters without a default are required.

:meth:`Tool.invoke` runs the function with the model's JSON arguments: async
functions on the event loop, sync ones in a worker thread, under an optional
timeout; what it returns becomes the tool message's text (str as is, anything
else as JSON). A tool that raises, times out, or gets arguments it cannot take
gives a :class:`ToolResult` with ``error`` set instead of raising, so the
model can read what went wrong and try again.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import json
import re
import time
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

import anyio
import anyio.to_thread

from agentgate.agents.errors import ToolError
from agentgate.agents.events import ToolCall

__all__ = ["Tool", "ToolResult", "openai_tools", "tool", "json_schema"]

_PRIMITIVES: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
    Any: {},
    object: {},
    bytes: {"type": "string"},
}


def json_schema(hint: Any) -> dict[str, Any]:
    """The JSON Schema of a type hint (unknown types give ``{}``, which allows anything)."""
    if hint in _PRIMITIVES:
        return dict(_PRIMITIVES[hint])
    if hint is inspect.Parameter.empty:
        return {}
    origin, args = get_origin(hint), get_args(hint)
    if origin is typing.Annotated:
        schema = json_schema(args[0])
        for extra in args[1:]:
            if isinstance(extra, str):
                schema["description"] = extra
            elif isinstance(extra, Mapping):
                schema.update(extra)
        return schema
    if origin is Literal:
        return _enum_schema(list(args))
    if origin in (Union, types.UnionType):
        options = [json_schema(a) for a in args]
        non_null = [o for o in options if o != {"type": "null"}]
        if len(non_null) == 1 and len(options) == 2:
            inner = non_null[0]
            if set(inner) == {"type"} and isinstance(inner["type"], str):
                return {"type": [inner["type"], "null"]}
        return {"anyOf": options}
    if origin in (list, Sequence, set, frozenset, typing.AbstractSet) or hint in (list, set, frozenset):
        schema = {"type": "array"}
        if args:
            schema["items"] = json_schema(args[0])
        if origin in (set, frozenset) or hint in (set, frozenset):
            schema["uniqueItems"] = True
        return schema
    if origin is tuple or hint is tuple:
        if not args or (len(args) == 2 and args[1] is Ellipsis):
            return {"type": "array", "items": json_schema(args[0])} if args else {"type": "array"}
        return {
            "type": "array",
            "prefixItems": [json_schema(a) for a in args],
            "minItems": len(args),
            "maxItems": len(args),
        }
    if origin in (dict, Mapping) or hint in (dict, Mapping):
        schema = {"type": "object"}
        if len(args) == 2:
            schema["additionalProperties"] = json_schema(args[1])
        return schema
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _enum_schema([m.value for m in hint])
    if isinstance(hint, type) and typing.is_typeddict(hint):
        hints = typing.get_type_hints(hint, include_extras=True)
        return {
            "type": "object",
            "properties": {k: json_schema(v) for k, v in hints.items()},
            "required": sorted(hint.__required_keys__),  # type: ignore[attr-defined]
        }
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        hints = typing.get_type_hints(hint, include_extras=True)
        properties, required = {}, []
        for f in dataclasses.fields(hint):
            properties[f.name] = json_schema(hints.get(f.name, Any))
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                required.append(f.name)
            elif f.default is not dataclasses.MISSING:
                properties[f.name]["default"] = _jsonable(f.default)
        return {"type": "object", "properties": properties, "required": required}
    return {}


def _enum_schema(values: list[Any]) -> dict[str, Any]:
    """``{"enum": values}``, with their ``type`` when they are all of one primitive type."""
    schema: dict[str, Any] = {"enum": values}
    kinds = {type(v) for v in values}
    if len(kinds) == 1 and next(iter(kinds)) in _PRIMITIVES:
        schema = {**_PRIMITIVES[next(iter(kinds))], **schema}
    return schema


def _jsonable(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    return value


# -- docstrings --------------------------------------------------------------------------

_SECTION = re.compile(
    r"^\s*(Args|Arguments|Parameters|Params|Keyword Args|Returns?|Raises|Yields|Examples?|Notes?|See Also)\s*:?\s*$"
)
_PARAM_SECTIONS = ("args", "arguments", "parameters", "params", "keyword args")
_SPHINX = re.compile(r"^\s*:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")
_GOOGLE_ARG = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_NUMPY_ARG = re.compile(r"^(\w+)\s*(?::.*)?$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """(description, {parameter: description}) from a Google, NumPy or Sphinx style docstring."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    description: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None
    numpy = False
    base: int | None = None  # indent of a parameter line in the current section
    current: str | None = None

    def add(name: str, text: str) -> None:
        params[name] = (params.get(name, "") + " " + text.strip()).strip()

    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        header = _SECTION.match(line)
        ruled = i + 1 < len(lines) and len(lines[i + 1].strip()) > 2 and set(lines[i + 1].strip()) == {"-"}
        if header and (stripped.endswith(":") or ruled):
            section, numpy, base, current = header.group(1).lower(), ruled, None, None
            i += 2 if ruled else 1
            continue
        sphinx = _SPHINX.match(line)
        if sphinx:
            section, current = "sphinx", sphinx.group(1)
            add(current, sphinx.group(2))
        elif stripped.startswith(":"):
            section, current = "sphinx", None  # :returns: and friends
        elif section is None:
            description.append(line)
        elif section in _PARAM_SECTIONS and stripped:
            if base is None:
                base = indent
            match = (_NUMPY_ARG if numpy else _GOOGLE_ARG).match(stripped) if indent <= base else None
            if match:
                current = match.group(1)
                add(current, "" if numpy else match.group(2))
            elif current:
                add(current, stripped)
        elif section == "sphinx" and current and stripped:
            add(current, stripped)
        i += 1
    text = "\n".join(description).strip()
    return text.split("\n\n")[0].replace("\n", " ").strip(), params


# -- tools ---------------------------------------------------------------------------------


@dataclass
class ToolResult:
    """One call's outcome: ``content`` is what the model reads (the error text when ``error`` is set)."""

    call: ToolCall
    content: str
    error: str | None = None
    seconds: float = 0.0
    value: Any = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def message(self) -> dict[str, Any]:
        """The ``tool`` message that answers the call."""
        return {"role": "tool", "tool_call_id": self.call.id, "name": self.call.name, "content": self.content}


def _to_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


class Tool:
    """A Python function the model may call."""

    def __init__(
        self,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        strict: bool = False,
    ) -> None:
        if not callable(function):
            raise ToolError(f"a tool must be callable, got {function!r}")
        self.function = function
        self.name = name or getattr(function, "__name__", None) or type(function).__name__
        if not re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", self.name):
            raise ToolError(f"tool name {self.name!r} must match ^[a-zA-Z0-9_-]{{1,64}}$")
        self.timeout = timeout
        self.strict = strict
        target = function.func if isinstance(function, functools.partial) else function
        self.is_async = inspect.iscoroutinefunction(target) or (
            not inspect.isroutine(target) and inspect.iscoroutinefunction(type(target).__call__)
        )
        doc_description, param_docs = parse_docstring(inspect.getdoc(target))
        self.description = description if description is not None else doc_description
        self.signature = inspect.signature(function)
        try:
            hints = typing.get_type_hints(target, include_extras=True)
        except Exception:  # noqa: BLE001 - unresolvable annotations: fall back to the raw ones
            hints = {}
        properties: dict[str, Any] = {}
        required: list[str] = []
        self._accepts_any = False
        for param in self.signature.parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.POSITIONAL_ONLY):
                if param.kind is param.POSITIONAL_ONLY and param.default is param.empty:
                    raise ToolError(f"tool {self.name}: positional-only parameter {param.name!r} cannot be named")
                continue
            if param.kind is param.VAR_KEYWORD:
                self._accepts_any = True
                continue
            schema = json_schema(hints.get(param.name, param.annotation))
            if param.name in param_docs and "description" not in schema:
                schema["description"] = param_docs[param.name]
            if param.default is param.empty:
                required.append(param.name)
            elif param.default is not None or "null" in str(schema.get("type", "")) or not schema:
                default = _jsonable(param.default)
                try:
                    json.dumps(default)
                    schema["default"] = default
                except (TypeError, ValueError):
                    pass
            properties[param.name] = schema
        self.parameters: dict[str, Any] = {"type": "object", "properties": properties, "required": required}
        if strict:
            self.parameters["additionalProperties"] = False
        self._hints = hints
        functools.update_wrapper(self, function)  # type: ignore[arg-type]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"

    @property
    def schema(self) -> dict[str, Any]:
        """OpenAI's tool definition."""
        function: dict[str, Any] = {"name": self.name, "parameters": self.parameters}
        if self.description:
            function["description"] = self.description
        if self.strict:
            function["strict"] = True
        return {"type": "function", "function": function}

    def _arguments(self, call: ToolCall) -> dict[str, Any]:
        try:
            arguments = call.parsed_arguments()
        except ValueError as exc:
            raise ToolError(f"the arguments are not a JSON object ({exc}): {call.arguments!r}") from None
        known = self.parameters["properties"]
        unknown = [k for k in arguments if k not in known]
        if unknown and not self._accepts_any:
            raise ToolError(f"unknown argument(s) {', '.join(unknown)}; {self.name} takes {', '.join(known) or 'none'}")
        missing = [k for k in self.parameters["required"] if k not in arguments]
        if missing:
            raise ToolError(f"missing required argument(s): {', '.join(missing)}")
        return {k: self._coerce(k, v) for k, v in arguments.items()}

    def _coerce(self, name: str, value: Any) -> Any:
        """JSON has no enums, tuples or float-typed integers: give the function what its hints say."""
        hint = self._hints.get(name)
        if get_origin(hint) is typing.Annotated:
            hint = get_args(hint)[0]
        if isinstance(hint, type):
            if issubclass(hint, enum.Enum):
                try:
                    return hint(value)
                except ValueError:
                    return value
            if hint is float and isinstance(value, int) and not isinstance(value, bool):
                return float(value)
            if hint is int and isinstance(value, float) and value.is_integer():
                return int(value)
            if hint is tuple and isinstance(value, list):
                return tuple(value)
        return value

    async def invoke(self, call: ToolCall, timeout: float | None = None) -> ToolResult:
        """Run the call; never raises for the tool's own failures (see :class:`ToolResult`)."""
        start = time.monotonic()
        limit = self.timeout if self.timeout is not None else timeout
        try:
            arguments = self._arguments(call)
            with anyio.fail_after(limit):
                if self.is_async:
                    value = await self.function(**arguments)
                else:
                    value = await anyio.to_thread.run_sync(
                        functools.partial(self.function, **arguments), abandon_on_cancel=True
                    )
        except TimeoutError:
            return self._failed(call, f"timed out after {limit:g} s", start)
        except ToolError as exc:
            return self._failed(call, str(exc), start)
        except Exception as exc:  # noqa: BLE001 - the model reads the tool's error and may try again
            return self._failed(call, f"{type(exc).__name__}: {exc}", start)
        return ToolResult(call, _to_text(value), None, time.monotonic() - start, value)

    def _failed(self, call: ToolCall, error: str, start: float) -> ToolResult:
        content = f"Error: the tool {self.name} failed: {error}"
        return ToolResult(call, content, error, time.monotonic() - start)


def tool(
    function: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    strict: bool = False,
) -> Any:
    """Decorator (bare or with options) turning a function into a :class:`Tool`."""

    def wrap(fn: Callable[..., Any]) -> Tool:
        return Tool(fn, name=name, description=description, timeout=timeout, strict=strict)

    return wrap(function) if function is not None else wrap


def as_tool(value: Any) -> Tool:
    return value if isinstance(value, Tool) else Tool(value)


def openai_tools(tools: Sequence[Any]) -> list[dict[str, Any]]:
    """Tool definitions for a request: :class:`Tool` objects, plain functions, or OpenAI dicts as they are."""
    return [t if isinstance(t, dict) else as_tool(t).schema for t in tools]
