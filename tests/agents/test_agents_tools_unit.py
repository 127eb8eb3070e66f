"""Tools: JSON schemas from signatures and docstrings, and calling them with the model's arguments."""

from __future__ import annotations

import dataclasses
import enum
import json
import threading
import time
from typing import Annotated, Any, Literal, Optional, TypedDict

import anyio
import jsonschema
import pytest

from agentgate.agents import Tool, ToolCall, tool
from agentgate.agents.errors import ToolError
from agentgate.agents.tools import json_schema, openai_tools, parse_docstring

pytestmark = pytest.mark.anyio


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(TypedDict):
    x: float
    y: float


@dataclasses.dataclass
class Box:
    width: int
    label: str = "box"


def test_schemas_of_type_hints():
    assert json_schema(str) == {"type": "string"} and json_schema(bool) == {"type": "boolean"}
    assert json_schema(list[int]) == {"type": "array", "items": {"type": "integer"}}
    assert json_schema(dict[str, float]) == {"type": "object", "additionalProperties": {"type": "number"}}
    assert json_schema(Literal["a", "b"]) == {"type": "string", "enum": ["a", "b"]}
    assert json_schema(Color) == {"type": "string", "enum": ["red", "blue"]}
    assert json_schema(Optional[int]) == {"type": ["integer", "null"]}  # noqa: UP045 (the old spelling, on purpose)
    assert json_schema(int | str) == {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert json_schema(Annotated[int, "how many"]) == {"type": "integer", "description": "how many"}
    assert json_schema(tuple[int, str])["prefixItems"] == [{"type": "integer"}, {"type": "string"}]
    assert json_schema(Point) == {
        "type": "object",
        "required": ["x", "y"],
        "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
    }
    assert json_schema(Box) == {
        "type": "object",
        "required": ["width"],
        "properties": {"width": {"type": "integer"}, "label": {"type": "string", "default": "box"}},
    }
    assert json_schema(Any) == {}


def test_google_numpy_and_sphinx_docstrings():
    google = """Search the index.

    Longer text that is not the description.

    Args:
        query (str): what to look for,
            across lines.
        limit: at most this many.

    Returns:
        hits
    """
    assert parse_docstring(google) == (
        "Search the index.",
        {"query": "what to look for, across lines.", "limit": "at most this many."},
    )
    numpy = """Add.

    Parameters
    ----------
    a : int
        the first
    b : int
        the second

    Returns
    -------
    int
    """
    assert parse_docstring(numpy) == ("Add.", {"a": "the first", "b": "the second"})
    sphinx = """Multiply two numbers
    together.

    :param a: left
    :param int b: right
        side
    :returns: the product
    """
    assert parse_docstring(sphinx) == ("Multiply two numbers together.", {"a": "left", "b": "right side"})


@tool(timeout=5)
def search(
    query: str, limit: int = 3, color: Color = Color.RED, where: Point | None = None, tags: list[str] | None = None
) -> list[str]:
    """Search the index.

    Args:
        query: what to look for.
        limit: at most this many.
    """
    return [f"{query}-{i}-{color.value}" for i in range(limit)]


def test_tool_schema_is_an_openai_definition_and_valid_json_schema():
    schema = search.schema
    assert schema["type"] == "function"
    function = schema["function"]
    assert function["name"] == "search" and function["description"] == "Search the index."
    params = function["parameters"]
    jsonschema.Draft202012Validator.check_schema(params)
    assert params["required"] == ["query"]
    assert params["properties"]["query"] == {"type": "string", "description": "what to look for."}
    assert params["properties"]["limit"] == {"type": "integer", "description": "at most this many.", "default": 3}
    assert params["properties"]["color"] == {"type": "string", "enum": ["red", "blue"], "default": "red"}
    jsonschema.validate({"query": "q", "limit": 2, "where": {"x": 1, "y": 2}}, params)
    assert search("q", 1) == ["q-0-red"]  # still callable
    assert openai_tools([search, {"type": "function", "function": {"name": "raw"}}])[1]["function"]["name"] == "raw"


def test_bad_tools_are_refused():
    with pytest.raises(ToolError):
        Tool(lambda x: x, name="has space")

    def positional_only(a, /):
        return a

    with pytest.raises(ToolError, match="positional-only"):
        Tool(positional_only)


async def test_invoke_converts_arguments_and_reports_errors_as_text():
    ok = await search.invoke(ToolCall("c1", "search", json.dumps({"query": "cat", "limit": 2.0, "color": "blue"})))
    assert ok.ok and json.loads(ok.content) == ["cat-0-blue", "cat-1-blue"] and ok.value == ["cat-0-blue", "cat-1-blue"]
    assert ok.message() == {"role": "tool", "tool_call_id": "c1", "name": "search", "content": ok.content}
    for arguments, error in (
        ("{not json", "not a JSON object"),
        ('["a"]', "not a JSON object"),
        ('{"qery": "x"}', "unknown argument(s) qery"),
        ("{}", "missing required argument(s): query"),
    ):
        result = await search.invoke(ToolCall("c2", "search", arguments))
        assert not result.ok and error in result.error and result.content.startswith("Error: the tool search failed")


async def test_sync_tools_run_in_threads_async_ones_on_the_loop_with_timeouts():
    main_thread = threading.get_ident()

    @tool
    def blocking(seconds: float) -> int:
        time.sleep(seconds)
        return threading.get_ident()

    @tool
    async def sleeper(seconds: float) -> str:
        await anyio.sleep(seconds)
        return "slept"

    @tool
    def broken() -> None:
        raise ValueError("disk on fire")

    result = await blocking.invoke(ToolCall("a", "blocking", '{"seconds": 0}'))
    assert result.value != main_thread
    assert (await sleeper.invoke(ToolCall("b", "sleeper", '{"seconds": 0}'))).content == "slept"
    start = time.monotonic()
    slow = await sleeper.invoke(ToolCall("c", "sleeper", '{"seconds": 10}'), timeout=0.2)
    assert not slow.ok and "timed out after 0.2 s" in slow.error and time.monotonic() - start < 2
    slow_sync = await blocking.invoke(ToolCall("d", "blocking", '{"seconds": 1}'), timeout=0.1)
    assert not slow_sync.ok and "timed out" in slow_sync.error
    failed = await broken.invoke(ToolCall("e", "broken", ""))
    assert failed.error == "ValueError: disk on fire"


async def test_bound_methods_and_kwargs():
    class Store:
        def __init__(self) -> None:
            self.items = {"a": 1}

        def get(self, key: str) -> int:
            """Get an item."""
            return self.items[key]

    getter = Tool(Store().get)
    assert list(getter.parameters["properties"]) == ["key"]
    assert (await getter.invoke(ToolCall("x", "get", '{"key": "a"}'))).content == "1"
    missing = await getter.invoke(ToolCall("x", "get", '{"key": "zz"}'))
    assert missing.error == "KeyError: 'zz'"

    def anything(**options: Any) -> dict:
        return options

    loose = Tool(anything)
    assert (await loose.invoke(ToolCall("y", "anything", '{"p": 1}'))).value == {"p": 1}
