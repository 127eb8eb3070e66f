"""Constrained decoding for tool calls and ``response_format``: what the gateway asks the engine
to enforce, built as plain JSON (the gateway never imports xgrammar; the engine compiles it).

What is enforced (``tool_choice`` resolved by :func:`gateway.tools.schema.resolve_tool_choice`):

- ``required``: the reply is one or more tool calls (exactly one with
  ``parallel_tool_calls: false``, at most ``max_calls`` with parallel calls:
  ``--max-forced-tool-calls``, default :data:`DEFAULT_MAX_FORCED_CALLS`) and
  nothing else; each call names one of the tools and its arguments match that
  tool's ``parameters`` schema. The bound is in the grammar: after the last
  allowed call only the end of the reply may follow, so a small model that
  would repeat its call stops instead of running into ``max_tokens``; a call
  identical to an earlier one is dropped by the chat core's reader.
- named function: the reply is exactly one call of that function, arguments
  matching its schema (``parallel_tool_calls`` does not add calls: "call this
  function" is one call, as in vLLM).
- ``auto`` with a ``response_format`` of ``json_object``/``json_schema``: the reply is
  either the JSON the format asks for or tool calls (OpenAI lets a model answer
  or call).
- ``auto`` with at least one ``strict: true`` tool: free text, but once the model
  opens a call (the parser's trigger, ``<tool_call>``) the call must be
  well-formed and its arguments match the schema (OpenAI's strict function calling).
- ``none`` with tools: free text that never contains the parser's trigger
  (``<tool_call>``), so no call can open. The tools are in the prompt whatever
  ``tool_choice`` says (``gateway.tools.render``: a prompt that does not change
  with it keeps a program's prefix cached), so ``none`` is the grammar's to enforce.
- ``response_format`` alone: the reply is that JSON (``json_object``: any object).
- ``auto`` otherwise: nothing is enforced.

The markup is the selected parser's, so the parser reads back exactly what the
grammar allows:

- ``hermes``: ``<tool_call>\\n{"name": "NAME", "arguments": ARGS}\\n</tool_call>``, calls
  separated by a newline;
- ``llama3_json``: ``{"name": "NAME", "parameters": ARGS}``, calls separated by ``"; "``.

The calls are an xgrammar *structural tag*: one ``tag`` per tool whose ``begin``
is the call's fixed prefix up to the arguments, ``content`` the arguments'
JSON schema and ``end`` the fixed suffix, combined with ``tags_with_separator``
(``at_least_one``; ``stop_after_first`` unless parallel calls are allowed; a
bounded number of parallel calls nests ``or``/``sequence`` of the one-call
format, which every xgrammar with structural tags compiles),
``triggered_tags`` (strict ``auto``) or ``or`` (``auto`` + ``response_format``). JSON inside
a tag allows at most :data:`MAX_WHITESPACE` consecutive whitespace characters, so
a small model cannot spin in whitespace until ``max_tokens``.

Where the reply is nothing but the structure (``required``, named, ``response_format``)
the chat core gives the engine the request's ``max_tokens`` with it
(``StructuredOutput.max_tokens``): the engine's grammar then never starts what it
cannot close, closes in time and ends the reply on its end token, so the reply
is whole calls (finish reason ``tool_calls``), and a budget below the shortest
call is a 400 naming ``max_tokens`` and the minimum (``engine/structured/structured_output.py``).

Schemas are checked against their JSON Schema metaschema before anything
reaches the engine (a 400 naming the problem); what is valid JSON Schema but
beyond the grammar compiler (rare keywords) comes back from the engine as a
400 too.

With the overlapped runner, the bitmask of a constrained row at step N+1
depends on the token sampled at step N, which is still on the device when
N+1 is launched. The engine launches such a step's forward pass at once (it
does not depend on the token's *value*: the input token is read on the device)
and defers only its sampling until step N has resolved and the grammar has
accepted that token; steps without constrained rows keep the full overlap.
See ``engine/core.py`` (``EngineCore.step``) and ``loadtests/constrained_bench.py``
for the measured cost.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentgate.engine.errors import InvalidRequestError
from agentgate.engine.sampling_params import StructuredOutput
from agentgate.gateway.tools.schema import ToolChoice, check_json_schema

__all__ = [
    "CALL_FORMATS",
    "DEFAULT_MAX_FORCED_CALLS",
    "MAX_WHITESPACE",
    "CallFormat",
    "ResponseFormat",
    "parse_response_format",
    "structured_output",
    "tool_call_structural_tag",
]

DEFAULT_MAX_FORCED_CALLS = 4
"""Most calls in one reply under ``tool_choice`` required (Anthropic ``any``) with parallel calls."""

MAX_WHITESPACE = 8
"""Most consecutive whitespace characters in constrained JSON inside a tool call: room for a
newline and indentation (models pretty-print), none for an endless run of blanks."""

_NO_PARAMETERS = {"type": "object", "properties": {}, "additionalProperties": False}


@dataclass(frozen=True, slots=True)
class CallFormat:
    """The markup of one call in a parser's format: ``begin`` (with the name) + arguments + ``end``."""

    begin: str  # a format string with {name}: the JSON-quoted function name
    end: str
    separator: str  # between parallel calls
    trigger: str  # what opens a call in free text (a prefix of every begin)
    closing_tag: str = ""  # what closes a call after its JSON, if anything ("</tool_call>")

    def tag(self, name: str, parameters: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "tag",
            "begin": self.begin.format(name=json.dumps(name)),
            "content": _json(parameters),
            "end": self.end,
        }


CALL_FORMATS: dict[str, CallFormat] = {
    "hermes": CallFormat(
        begin='<tool_call>\n{{"name": {name}, "arguments": ',
        end="}\n</tool_call>",
        separator="\n",
        trigger="<tool_call>",
        closing_tag="</tool_call>",
    ),
    "llama3_json": CallFormat(begin='{{"name": {name}, "parameters": ', end="}", separator="; ", trigger='{"name": '),
}


def _json(schema: Any) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": schema, "max_whitespace_cnt": MAX_WHITESPACE}


def _parameters(tool: dict[str, Any]) -> dict[str, Any]:
    return tool["function"].get("parameters") or _NO_PARAMETERS


def tool_call_structural_tag(
    tools: list[dict[str, Any]],
    choice: ToolChoice,
    *,
    parser: str,
    parallel: bool,
    or_json: Any = None,
    max_calls: int | None = None,
) -> dict[str, Any]:
    """The structural tag enforcing ``choice`` over validated ``tools`` in ``parser``'s markup.

    ``required``: one or more calls (one unless ``parallel``; at most ``max_calls``), nothing else;
    ``named``: exactly one call of that function; ``auto``: free text in which
    every call that opens is well-formed, or, with ``or_json`` (a JSON schema),
    either that JSON or one or more calls; ``none``: free text in which no call opens.
    """
    fmt = CALL_FORMATS.get(parser)
    if fmt is None:
        raise ValueError(f"no call format for tool-call parser {parser!r}; known: {', '.join(CALL_FORMATS)}")
    if choice.mode == "none":
        return _structural_tag({"type": "any_text", "excludes": [fmt.trigger]})
    if choice.mode == "named":
        [tool] = [t for t in tools if t["function"]["name"] == choice.name]
        return _structural_tag(fmt.tag(choice.name, _parameters(tool)))  # type: ignore[arg-type]
    tags = [fmt.tag(t["function"]["name"], _parameters(t)) for t in tools]
    if choice.mode == "required" or (choice.mode == "auto" and or_json is not None):
        calls = {
            "type": "tags_with_separator",
            "tags": tags,
            "separator": fmt.separator,
            "at_least_one": True,
            "stop_after_first": not parallel,
        }
        if choice.mode == "required" and parallel and max_calls is not None:
            return _structural_tag(_at_most(tags, fmt.separator, max_calls))
        if choice.mode == "required":
            return _structural_tag(calls)
        return _structural_tag({"type": "or", "elements": [_json(or_json), calls]})
    if choice.mode == "auto":
        return _structural_tag(
            {
                "type": "triggered_tags",
                "triggers": [fmt.trigger],
                "tags": tags,
                "at_least_one": False,
                "stop_after_first": not parallel,
            }
        )
    raise ValueError(f"tool_choice {choice.mode!r} enforces nothing")


def _at_most(tags: list[dict[str, Any]], separator: str, max_calls: int) -> dict[str, Any]:
    """One to ``max_calls`` calls of any of ``tags``, separated by ``separator``:
    ``one | one sep (one | one sep (...))``."""
    one = tags[0] if len(tags) == 1 else {"type": "or", "elements": tags}
    calls = one
    for _ in range(max_calls - 1):
        more = {"type": "sequence", "elements": [one, {"type": "const_string", "value": separator}, calls]}
        calls = {"type": "or", "elements": [one, more]}
    return calls


def _structural_tag(fmt: dict[str, Any]) -> dict[str, Any]:
    return {"type": "structural_tag", "format": fmt}


# --- response_format -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResponseFormat:
    """A validated ``response_format`` that constrains: ``schema`` None means any JSON object."""

    schema: dict[str, Any] | bool | None
    name: str | None = None
    strict: bool = False

    @property
    def json_schema(self) -> Any:
        """The schema the reply must match (``json_object``: an object)."""
        return {"type": "object"} if self.schema is None else self.schema

    def structured(self) -> StructuredOutput:
        if self.schema is None:
            return StructuredOutput(json_object=True)
        return StructuredOutput(json_schema=json.dumps(self.schema))


def parse_response_format(response_format: Any) -> ResponseFormat | None:
    """OpenAI's ``response_format``: ``{"type": "text"}`` (or none) -> None; ``json_object``;
    ``json_schema`` with ``{"name", "schema", "strict"?, "description"?}``. InvalidRequestError
    (400, param ``response_format``) naming the problem otherwise."""
    if response_format is None:
        return None
    param = "response_format"
    if not isinstance(response_format, dict):
        raise InvalidRequestError("response_format must be an object", param=param)
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return ResponseFormat(None)
    if kind != "json_schema":
        raise InvalidRequestError(
            f'response_format.type must be "text", "json_object" or "json_schema", got {kind!r}', param=param
        )
    spec = response_format.get("json_schema")
    if not isinstance(spec, dict):
        raise InvalidRequestError(
            'response_format.json_schema must be an object: {"name": ..., "schema": {...}, "strict": ...}', param=param
        )
    name = spec.get("name")
    if name is not None and not isinstance(name, str):
        raise InvalidRequestError("response_format.json_schema.name must be a string", param=param)
    strict = spec.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise InvalidRequestError("response_format.json_schema.strict must be a boolean", param=param)
    if "schema" not in spec or spec["schema"] is None:
        raise InvalidRequestError("response_format.json_schema.schema is missing: give the JSON Schema", param=param)
    schema = spec["schema"]
    if not isinstance(schema, (dict, bool)):
        raise InvalidRequestError(
            f"response_format.json_schema.schema must be a JSON Schema object, got {type(schema).__name__}",
            param=param,
        )
    if isinstance(schema, dict):
        check_json_schema(schema, "response_format.json_schema.schema", param=param)
    return ResponseFormat(schema, name, bool(strict))


# --- all together -------------------------------------------------------------------


def structured_output(
    tools: list[dict[str, Any]] | None,
    choice: ToolChoice,
    response_format: ResponseFormat | None,
    *,
    parser: str,
    parallel: bool,
    max_calls: int | None = None,
) -> StructuredOutput | None:
    """What the engine enforces for a chat request (see the module docstring), or None."""
    if choice.mode in ("required", "named"):
        tag = tool_call_structural_tag(tools or [], choice, parser=parser, parallel=parallel, max_calls=max_calls)
        return StructuredOutput(structural_tag=json.dumps(tag))
    if choice.mode == "auto" and tools:
        if response_format is not None:
            tag = tool_call_structural_tag(
                tools, choice, parser=parser, parallel=parallel, or_json=response_format.json_schema
            )
            return StructuredOutput(structural_tag=json.dumps(tag))
        if any(t["function"].get("strict") for t in tools):
            tag = tool_call_structural_tag(tools, choice, parser=parser, parallel=parallel)
            return StructuredOutput(structural_tag=json.dumps(tag))
        return None
    if response_format is not None:
        return response_format.structured()
    if choice.mode == "none" and tools:
        return StructuredOutput(
            structural_tag=json.dumps(tool_call_structural_tag(tools, choice, parser=parser, parallel=False))
        )
    return None
