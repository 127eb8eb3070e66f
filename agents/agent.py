"""A tool-calling loop over Python functions.

    agent = Agent(client, tools=[add, multiply], system="You are a calculator.")
    result = await agent.run("What is (3 + 4) * 5?")
    print(result.output, result.turns, [r.call.name for r in result.tool_results])

Each turn sends the conversation with the tools' schemas; when the model
answers with tool calls, they all run at once (an anyio task group; sync
functions in worker threads), each under the per-tool timeout, and their
results (or errors, as text) go back as ``tool`` messages for the next turn.
The loop ends at the first answer without tool calls, or after ``max_turns``.

``tool_choice`` may be one value for every turn ("auto", "required", "none",
a tool or its name), a list (one per turn; "auto" after its end), or a
function of the turn number. ``Agent(..., tool_choice=["required"])`` makes
the first turn call a tool and lets the model answer afterwards. The server
enforces "required" and named choices by constrained decoding.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from agentgate.agents.client import AsyncClient
from agentgate.agents.events import ChatResult, Event, ToolCall, Usage
from agentgate.agents.tools import Tool, ToolResult, as_tool

ToolChoice = Any  # "auto" | "none" | "required" | name | Tool | dict


@dataclass
class AgentResult:
    output: str | None
    messages: list[dict[str, Any]]
    turns: int
    tool_results: list[ToolResult] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    stop_reason: str = "answer"  # "answer" or "max_turns"
    finish_reason: str | None = None

    @property
    def tools_called(self) -> list[str]:
        return [r.call.name for r in self.tool_results]


class Agent:
    def __init__(
        self,
        client: AsyncClient,
        tools: Sequence[Callable[..., Any] | Tool] = (),
        *,
        system: str | None = None,
        model: str | None = None,
        max_turns: int = 8,
        tool_timeout: float | None = 30.0,
        tool_choice: ToolChoice | Sequence[ToolChoice] | Callable[[int], ToolChoice] = "auto",
        parallel_tool_calls: bool | None = None,
        max_tokens: int | None = 256,
        temperature: float | None = 0.0,
        stream: bool = False,
        on_event: Callable[[Event], Any] | None = None,
        on_tool_result: Callable[[ToolResult], Any] | None = None,
        **params: Any,
    ) -> None:
        if max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        self.client = client
        self.tools: dict[str, Tool] = {}
        for t in tools:
            self.add_tool(t)
        self.system = system
        self.model = model
        self.max_turns = max_turns
        self.tool_timeout = tool_timeout
        self.tool_choice = tool_choice
        self.parallel_tool_calls = parallel_tool_calls
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.stream = stream or on_event is not None
        self.on_event = on_event
        self.on_tool_result = on_tool_result
        self.params = params

    def add_tool(self, function: Callable[..., Any] | Tool) -> Tool:
        t = as_tool(function)
        if t.name in self.tools:
            raise ValueError(f"two tools are named {t.name!r}")
        self.tools[t.name] = t
        return t

    def choice_for(self, turn: int) -> ToolChoice:
        """The tool_choice of turn ``turn`` (0-based)."""
        choice = self.tool_choice
        if callable(choice) and not isinstance(choice, Tool):
            return choice(turn)
        if isinstance(choice, (list, tuple)):
            return choice[turn] if turn < len(choice) else "auto"
        return choice

    async def run(self, task: str | Sequence[dict[str, Any]]) -> AgentResult:
        """Run the loop on a task (a user message, or a whole conversation to continue)."""
        if isinstance(task, str):
            messages: list[dict[str, Any]] = [{"role": "user", "content": task}]
            if self.system:
                messages.insert(0, {"role": "system", "content": self.system})
        else:
            messages = [dict(m) for m in task]
        result = AgentResult(None, messages, 0)
        schemas = [t.schema for t in self.tools.values()]
        for turn in range(self.max_turns):
            choice = self.choice_for(turn) if self.tools else None
            reply = await self._complete(messages, schemas if self.tools else None, choice)
            result.turns = turn + 1
            result.usage = result.usage + reply.usage
            result.finish_reason = reply.finish_reason
            result.output = reply.content
            calls = [self._with_id(call, turn, i) for i, call in enumerate(reply.tool_calls)]
            messages.append(reply.message())  # the calls in it carry the ids _with_id gave them
            if not calls:
                result.stop_reason = "answer"
                return result
            outcomes = await self.run_tools(calls)
            result.tool_results += outcomes
            messages += [o.message() for o in outcomes]
        result.stop_reason = "max_turns"
        return result

    async def _complete(self, messages: list[dict[str, Any]], schemas: Any, choice: ToolChoice) -> ChatResult:
        options: dict[str, Any] = dict(
            model=self.model,
            tools=schemas,
            tool_choice=choice,
            parallel_tool_calls=self.parallel_tool_calls,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            **self.params,
        )
        if not self.stream:
            return await self.client.chat(messages, **options)
        async with self.client.chat_stream(messages, **options) as stream:
            async for event in stream:
                if self.on_event is not None:
                    outcome = self.on_event(event)
                    if inspect.isawaitable(outcome):
                        await outcome
        return stream.result()

    @staticmethod
    def _with_id(call: ToolCall, turn: int, index: int) -> ToolCall:
        if not call.id:
            call.id = f"call_{turn}_{index}"
        return call

    async def run_tools(self, calls: Sequence[ToolCall]) -> list[ToolResult]:
        """Run calls concurrently; results in the calls' order. Never raises for a tool's failure."""
        results: list[ToolResult | None] = [None] * len(calls)

        async def one(i: int, call: ToolCall) -> None:
            t = self.tools.get(call.name)
            if t is None:
                known = ", ".join(self.tools) or "none"
                error = f"there is no tool named {call.name!r} (the tools are: {known})"
                results[i] = ToolResult(call, f"Error: {error}", error)
            else:
                results[i] = await t.invoke(call, self.tool_timeout)
            if self.on_tool_result is not None:
                outcome = self.on_tool_result(results[i])
                if inspect.isawaitable(outcome):
                    await outcome

        if len(calls) == 1:
            await one(0, calls[0])
        else:
            async with anyio.create_task_group() as tasks:
                for i, call in enumerate(calls):
                    tasks.start_soon(one, i, call)
        return results  # type: ignore[return-value]
