"""Fifty short agent-shaped chat prompts whose replies repeat text from the prompt (tool-call JSON,
quotations, lists, paths, code), so that drafts taken from the prompt are proposed and accepted."""

from __future__ import annotations

CITIES = ("Paris", "Berlin", "Tokyo", "Lima", "Oslo", "Cairo", "Austin", "Seoul", "Rome", "Quito")
TEMPLATES = (
    'Repeat this tool call exactly: {{"name": "get_weather", "arguments": {{"city": "{city}", "unit": "celsius"}}}}',
    'Quote this sentence word for word: "The train to {city} leaves at nine and arrives at noon."',
    "Copy this list exactly: {city}, apples, pears, plums, {city}, apples, pears, plums.",
    "Say the path back to me: /home/agent/projects/{city}/src/main.py and /home/agent/projects/{city}/README.md",
    "Rewrite this code unchanged: def visit_{city}(days): return [day for day in range(days)]",
)


def agent_prompts(count: int = 50) -> list[list[dict[str, str]]]:
    """``count`` one-message conversations: every template with every city, in turn."""
    prompts = []
    for i in range(count):
        template, city = TEMPLATES[i % len(TEMPLATES)], CITIES[(i // len(TEMPLATES)) % len(CITIES)]
        prompts.append([{"role": "user", "content": template.format(city=city)}])
    return prompts
