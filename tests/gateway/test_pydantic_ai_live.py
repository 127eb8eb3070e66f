"""Pydantic AI against a live server, as its users write it: an ``Agent`` on ``OpenAIChatModel`` with
an ``OpenAIProvider`` pointed at the server, the library's defaults otherwise (no temperature, its
own tool definitions and ``tool_choice``).

A structured ``output_type`` is Pydantic AI's tool output mode: the output is a ``final_result``
tool the model must call (text is not an output, so the library sends ``tool_choice: "required"``),
so these tests hold the server to its forced-call contract through a real framework: the calls
parse, the arguments validate against the library's own schema on the first try (no retry
prompt), whole and streamed, beside a function tool of the agent's own."""

from __future__ import annotations

from typing import Literal

import anyio
import pytest
from pydantic import BaseModel, Field
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelResponse, RetryPromptPart, ToolCallPart
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.usage import UsageLimits

from tests.support.servers import LiveServer, start_server

MODEL = "SmolLM2-135M-Instruct"


class City(BaseModel):
    name: str = Field(max_length=40)
    country: str = Field(max_length=40)


class Forecast(BaseModel):
    city: str = Field(max_length=40)
    sky: Literal["sunny", "cloudy", "rainy"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    server = start_server(
        tmp_path_factory.mktemp("pydantic-ai-server"),
        "--dtype", "float32", "--quantization", "none", "--max-model-len", "2048",
        api_key="pydantic-ai-key",
    )  # fmt: skip
    yield server
    server.stop()


def _model(server: LiveServer) -> OpenAIChatModel:
    return OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=f"{server.url}/v1", api_key="pydantic-ai-key"))


def _calls(messages: list) -> list[ToolCallPart]:
    return [
        part for m in messages if isinstance(m, ModelResponse) for part in m.parts if isinstance(part, ToolCallPart)
    ]


def _retries(messages: list) -> list[RetryPromptPart]:
    return [part for m in messages for part in getattr(m, "parts", ()) if isinstance(part, RetryPromptPart)]


def test_a_structured_output_is_a_forced_call_that_validates_on_the_first_try(server):
    agent = Agent(_model(server), output_type=City, instructions="Answer with the city asked for.")
    result = agent.run_sync("Which city is the capital of France?", usage_limits=UsageLimits(request_limit=3))
    assert isinstance(result.output, City) and result.output.name
    messages = result.all_messages()
    assert [call.tool_name for call in _calls(messages)] == ["final_result"]
    assert _retries(messages) == [], "the server's call did not validate: Pydantic AI asked again"
    assert result.usage.requests == 1 and result.usage.output_tokens > 0


def test_a_streamed_structured_output_arrives_whole(server):
    agent = Agent(_model(server), output_type=City, instructions="Answer with the city asked for.")

    async def run() -> tuple[City, list]:
        async with agent.run_stream("Which city is the capital of Italy?") as streamed:
            output = await streamed.get_output()
            return output, streamed.all_messages()

    output, messages = anyio.run(run)
    assert isinstance(output, City) and output.name
    assert [call.tool_name for call in _calls(messages)] == ["final_result"]
    assert _retries(messages) == []


def test_an_agent_with_a_function_tool_ends_on_its_output_with_every_call_valid(server):
    """A function tool beside the output tool: whichever the model calls, every call's arguments
    validate (Pydantic AI would send a retry prompt otherwise), a ``get_sky`` call's result goes
    back, and the run ends on a ``final_result`` call within its request limit."""
    agent = Agent(_model(server), output_type=Forecast, instructions="Look up the sky, then answer.")
    asked: list[str] = []

    @agent.tool
    def get_sky(ctx: RunContext[None], city: str) -> str:
        """The sky over a city right now."""
        asked.append(city)
        return "sunny"

    result = agent.run_sync("What is the sky like in Paris?", usage_limits=UsageLimits(request_limit=6))
    assert isinstance(result.output, Forecast)
    messages = result.all_messages()
    calls = _calls(messages)
    assert calls[-1].tool_name == "final_result"
    assert {call.tool_name for call in calls} <= {"get_sky", "final_result"}
    assert len(asked) == sum(call.tool_name == "get_sky" for call in calls)
    assert _retries(messages) == []
