"""Agents that really call tools: ``--format tools``.

Each turn sends the conversation with the tools (OpenAI ``tools``); turns
before the last ask for one call (``tool_choice: required``, one call per
turn), which the server enforces with its tool-call grammar, so the model
writes the call's markup and arguments itself. The agent runs every call the
reply carries against simulated tools (deterministic results computed from
the arguments, after a seeded latency) and sends the results back as
``tool`` messages; the last turn asks for a plain-text summary
(``tool_choice: none``). A reply without a call ends the conversation early.

This is the traffic speculative decoding is made for: calls of the same
tools with the same JSON shape, turn after turn and agent after agent, and
arguments copied from the task (a city, a person, a page title).
"""

from __future__ import annotations

import json
import random
import zlib
from typing import Any

from agentgate.agents.events import ToolCall
from agentgate.loadtests.workload import CITIES, PEOPLE, SUBJECTS, WORDS, WorkloadConfig, openai_tools

SYSTEM = (
    "You are an operations assistant. Use the tools to look things up, one call at a time, "
    "then answer the user in two sentences."
)
CALL_TOKENS = 96  # room for one call: markup, name and arguments


def run_tool(call: ToolCall) -> dict[str, Any]:
    """A simulated tool: a result that depends only on the call."""
    try:
        args = call.parsed_arguments()
    except ValueError:
        return {"error": "arguments are not a JSON object"}
    key = zlib.crc32(json.dumps([call.name, args], sort_keys=True).encode())
    if call.name == "get_weather":
        return {"city": args.get("city"), "temperature": key % 35, "unit": args.get("unit", "C"), "sky": "clear"}
    if call.name == "search_docs":
        return {"titles": [f"{args.get('query', '')} guide", f"{args.get('query', '')} faq"][: args.get("limit", 2)]}
    if call.name == "read_page":
        return {"title": args.get("title"), "text": " ".join(WORDS[key % 7 : key % 7 + 12])}
    if call.name == "run_sql":
        return {"rows": [[key % 97], [key % 89]]}
    if call.name == "send_email":
        return {"sent": True, "to": args.get("to")}
    if call.name == "calendar_free":
        return {"person": args.get("person"), "free": ["09:00", "14:30"]}
    return {"error": f"no tool named {call.name!r}"}


class ToolConversation:
    """One agent conversation whose tool calls are written by the model."""

    def __init__(self, config: WorkloadConfig, seed: int, agent: int, number: int) -> None:
        self.config = config
        self.rng = rng = random.Random(f"{seed}/{agent}/{number}")
        self.agent, self.number, self.turn = agent, number, 0
        self.ended = False
        city, person, subject = rng.choice(CITIES), rng.choice(PEOPLE), rng.choice(SUBJECTS)
        task = (
            f"Task {agent}-{number}: {subject} is slow when it rains. Get the weather in {city}, "
            f"search the docs for {subject}, check when {person} is free on 2025-06-1{rng.randint(0, 9)}, "
            f"and email {person} what you found."
        )
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": task},
        ]

    @property
    def done(self) -> bool:
        return self.ended or self.turn >= self.config.turns

    @property
    def last_turn(self) -> bool:
        return self.turn >= self.config.turns - 1

    @property
    def min_tokens(self) -> int:
        """Tokens a complete reply has at least: only the summary has a fixed length."""
        return self.config.reply_tokens if self.last_turn else 1

    def request_options(self) -> dict[str, Any]:
        if self.last_turn:
            return {
                "tools": openai_tools(),
                "tool_choice": "none",
                "temperature": 0.0,
                "max_tokens": self.config.reply_tokens,
                "min_tokens": self.config.reply_tokens,
                "ignore_eos": True,
            }
        return {
            "tools": openai_tools(),
            "tool_choice": "required",
            "parallel_tool_calls": False,
            "temperature": 0.0,
            "max_tokens": CALL_TOKENS,
        }

    def tool_latency(self, num_calls: int) -> float:
        """Seconds the turn's calls take (run in parallel: the slowest counts)."""
        low, high = self.config.tool_latency
        return max((self.rng.uniform(low, high) for _ in range(num_calls)), default=0.0)

    def add_reply(self, message: dict[str, Any], calls: list[ToolCall]) -> None:
        """Append the model's reply and, for each call in it, the tool's result."""
        self.turn += 1
        self.messages.append(message)
        for call in calls:
            self.messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(run_tool(call))})
        if not calls:
            self.ended = True
