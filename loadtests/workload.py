"""Simulated agent traffic: what each agent sends, seeded.

An agent runs conversations. Each conversation starts from the shared system
prompt (tool descriptions, ~300 tokens; identical for every agent, so the
prefix cache can share it) and a task of its own; every turn sends the whole
conversation so far and gets a short reply (``reply_tokens``, greedy,
``ignore_eos`` so every reply has exactly that length). After each reply but
the last, the agent "calls" 1-4 tools in parallel: it waits for the slowest
simulated latency, then appends the calls and their results, so the next
prompt grows by the reply plus ~20-25 tokens per call.

Two message formats:

- ``text`` (default): the conversation is plain system/user/assistant
  messages; the tools are described in the system message and calls/results
  are written as ``<tool_call>`` / ``<tool_response>`` blocks, which is what
  the gateway itself renders for a ChatML model such as the default one. Works
  against any OpenAI-compatible server.
- ``openai``: ``tools`` in the request, assistant messages with
  ``tool_calls`` and ``tool`` messages; the server renders them (issue 7).
- ``tools``: the model itself writes the calls, which are run against
  simulated tools and answered (see :mod:`loadtests.tool_agents`).

Everything random comes from ``random.Random`` seeded per (seed, agent,
conversation), so the requests of a run do not depend on timing.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

# Formatted by hand: wire examples, one tool schema per entry.
TOOLS: list[dict[str, Any]] = [
    {"name": "search_docs", "description": "Search the documentation index and return matching page titles.",
     "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                    "required": ["query"]}},
    {"name": "read_page", "description": "Read one documentation page by its title.",
     "parameters": {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}},
    {"name": "run_sql", "description": "Run a read-only SQL query on the analytics database.",
     "parameters": {"type": "object", "properties": {"sql": {"type": "string"}}, "required": ["sql"]}},
    {"name": "get_weather", "description": "Current weather for a city.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                     "unit": {"type": "string", "enum": ["C", "F"]}},
                    "required": ["city"]}},
    {"name": "send_email", "description": "Send a short email to a colleague.",
     "parameters": {"type": "object", "properties": {"to": {"type": "string"}, "subject": {"type": "string"},
                                                     "body": {"type": "string"}}, "required": ["to", "body"]}},
    {"name": "calendar_free", "description": "Free slots in a person's calendar on a day.",
     "parameters": {"type": "object", "properties": {"person": {"type": "string"}, "day": {"type": "string"}},
                    "required": ["person", "day"]}},
]  # fmt: skip

PREAMBLE = (
    "You are a helpful operations assistant working for an engineering team. "
    "You may call one or more functions to assist with the user query. "
    "You are provided with function signatures within <tools></tools> XML tags. Call a function only when "
    "it helps; prefer one call per fact you need, several calls at once when they are independent, and "
    "summarise what the functions returned in plain words for the user before you finish.\n<tools>\n"
)
POSTAMBLE = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)

SUBJECTS = [
    "the billing service",
    "the login page",
    "the nightly export",
    "the search index",
    "the mobile app",
    "the payments queue",
    "the staging cluster",
    "the onboarding flow",
    "the data warehouse",
    "the email digest",
]
VERBS = [
    "is slow since yesterday",
    "returns errors for some users",
    "needs a capacity review",
    "missed its deadline",
    "has a new owner",
    "must be migrated next week",
]
PEOPLE = ["alice", "bob", "chen", "dana", "emeka", "fatima", "goran", "hana"]
CITIES = ["Paris", "Lagos", "Lima", "Osaka", "Oslo", "Pune", "Quito", "Tunis"]
WORDS = (
    "latency error budget owner region cache queue report page shard replica index job deploy metric alert "
    "window quota user trace log table row column day week"
).split()
TASK_WORDS = 24  # random words in each conversation's task


def _signature(t: dict[str, Any]) -> str:
    """A compact one-line signature: name(arg: type, ...) - description."""
    props = t["parameters"]["properties"]
    required = set(t["parameters"].get("required", ()))
    args = ", ".join(f"{k}{'' if k in required else '?'}: {v.get('type', 'any')}" for k, v in props.items())
    return f"{t['name']}({args}): {t['description']}"


def system_prompt() -> str:
    """The shared system prompt: the tools' signatures (~300 tokens with the default model's tokenizer)."""
    return PREAMBLE + "\n".join(_signature(t) for t in TOOLS) + POSTAMBLE


def openai_tools() -> list[dict[str, Any]]:
    return [{"type": "function", "function": t} for t in TOOLS]


@dataclass(frozen=True)
class WorkloadConfig:
    turns: int = 4  # requests per conversation
    reply_tokens: int = 32
    min_calls: int = 1
    max_calls: int = 4
    tool_latency: tuple[float, float] = (0.05, 0.4)  # seconds, uniform, per call (the turn waits for the slowest)
    think_time: float = 0.0  # seconds between a conversation's end and the next one's start (closed loop)
    format: str = "text"  # "text", "openai" or "tools" (the model writes the calls: loadtests.tool_agents)

    def __post_init__(self) -> None:
        if self.format not in ("text", "openai", "tools"):
            raise ValueError("format must be 'text', 'openai' or 'tools'")
        if not 1 <= self.min_calls <= self.max_calls:
            raise ValueError("need 1 <= min_calls <= max_calls")
        if self.turns < 1 or self.reply_tokens < 1:
            raise ValueError("turns and reply_tokens must be positive")


@dataclass
class ToolCallSim:
    id: str
    name: str
    arguments: dict[str, Any]
    result: dict[str, Any]
    latency: float


def _arguments(rng: random.Random, name: str) -> dict[str, Any]:
    if name == "search_docs":
        return {"query": f"{rng.choice(SUBJECTS)} {rng.choice(WORDS)}", "limit": rng.randint(2, 5)}
    if name == "read_page":
        return {"title": f"{rng.choice(SUBJECTS).title()} {rng.choice(WORDS)}"}
    if name == "run_sql":
        return {"sql": f"SELECT {rng.choice(WORDS)} FROM {rng.choice(WORDS)}s LIMIT {rng.randint(1, 9)}"}
    if name == "get_weather":
        return {"city": rng.choice(CITIES), "unit": rng.choice("CF")}
    if name == "send_email":
        return {"to": rng.choice(PEOPLE), "body": " ".join(rng.choices(WORDS, k=4))}
    return {"person": rng.choice(PEOPLE), "day": f"2025-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}"}


def _result(rng: random.Random) -> dict[str, Any]:
    return {rng.choice(WORDS): rng.randint(1, 99)}


class Conversation:
    """One simulated agent conversation: the messages to send, grown turn by turn."""

    def __init__(self, config: WorkloadConfig, seed: int, agent: int, number: int) -> None:
        self.config = config
        self.rng = random.Random(f"{seed}/{agent}/{number}")
        self.agent = agent
        self.number = number
        self.turn = 0
        task = (
            f"Task {agent}-{number}: {self.rng.choice(SUBJECTS)} {self.rng.choice(VERBS)}. "
            f"Please investigate with {self.rng.choice(PEOPLE)} and report on "
            + " ".join(self.rng.choices(WORDS, k=TASK_WORDS))
            + "."
        )
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": system_prompt() if config.format == "text" else SYSTEM_OPENAI},
            {"role": "user", "content": task},
        ]

    @property
    def done(self) -> bool:
        return self.turn >= self.config.turns

    @property
    def min_tokens(self) -> int:
        """Tokens every complete reply has (``ignore_eos``: exactly ``reply_tokens``)."""
        return self.config.reply_tokens

    def request_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {
            "max_tokens": self.config.reply_tokens,
            "min_tokens": self.config.reply_tokens,
            "ignore_eos": True,
            "temperature": 0.0,
        }
        if self.config.format == "openai":
            options["tools"] = openai_tools()
            options["tool_choice"] = "none"  # replies stay plain text of a fixed length
        return options

    def tool_calls(self) -> list[ToolCallSim]:
        """The calls the agent makes after this turn's reply (1-4, seeded)."""
        k = self.rng.randint(self.config.min_calls, self.config.max_calls)
        low, high = self.config.tool_latency
        calls = []
        for i in range(k):
            name = self.rng.choice(TOOLS)["name"]
            arguments, result = _arguments(self.rng, name), _result(self.rng)
            calls.append(
                ToolCallSim(f"call_{self.number}_{self.turn}_{i}", name, arguments, result, self.rng.uniform(low, high))
            )
        return calls

    def add_reply(self, text: str, calls: list[ToolCallSim]) -> None:
        """Append the model's reply, the calls made after it and their results; the turn is over."""
        self.turn += 1
        if self.config.format == "openai":
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if calls:
                message["tool_calls"] = [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                    for c in calls
                ]
            self.messages.append(message)
            for c in calls:
                self.messages.append({"role": "tool", "tool_call_id": c.id, "content": json.dumps(c.result)})
            return
        # The reply stands for the model's tool-call markup (it is what the model wrote); the results follow
        # in a <tool_response> block in a user turn, as the gateway renders tool messages for ChatML models.
        self.messages.append({"role": "assistant", "content": text})
        if calls:
            results = "<tool_response>" + json.dumps([c.result for c in calls]) + "</tool_response>"
            self.messages.append({"role": "user", "content": results})


SYSTEM_OPENAI = "You are a helpful operations assistant working for an engineering team."


@dataclass
class Arrivals:
    """Open-loop conversation start times: a Poisson process of ``rate`` per second, seeded."""

    rate: float
    seed: int
    _rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        if self.rate <= 0:
            raise ValueError("the arrival rate must be positive")
        self._rng = random.Random(f"{self.seed}/arrivals")

    def gaps(self):
        while True:
            yield self._rng.expovariate(self.rate)
