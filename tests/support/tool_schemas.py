"""Seeded random tool definitions for the tool-call tests: nested objects, enums, arrays,
required fields, bounded so a small model's arguments stay short."""

from __future__ import annotations

import random
from typing import Any

WORDS = [
    "order",
    "city",
    "user",
    "ticket",
    "file",
    "query",
    "price",
    "color",
    "date",
    "item",
    "note",
    "score",
    "region",
    "status",
    "limit",
    "label",
    "owner",
    "size",
    "mode",
    "title",
    "email",
    "count",
    "tag",
    "level",
]
VERBS = ["get", "create", "update", "search", "delete", "book", "send", "list", "check", "find"]
ENUMS = [["low", "medium", "high"], ["red", "green", "blue"], ["asc", "desc"], ["draft", "open", "closed"]]


def random_schema(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    """An object schema of 1-3 properties (at least one required), nesting at most two levels."""
    names = rng.sample(WORDS, rng.randint(1, 3))
    properties = {name: _value(rng, depth) for name in names}
    required = sorted(rng.sample(names, rng.randint(1, len(names))), key=names.index)
    schema: dict[str, Any] = {"type": "object", "properties": properties, "required": required}
    if rng.random() < 0.5:
        schema["additionalProperties"] = False
    return schema


def _value(rng: random.Random, depth: int) -> dict[str, Any]:
    kinds = ["string", "integer", "number", "boolean", "enum", "array"] + (["object"] * 2 if depth < 1 else [])
    kind = rng.choice(kinds)
    if kind == "string":
        return {"type": "string", "maxLength": rng.choice([8, 12, 16])}
    if kind == "integer":
        low = rng.randint(-5, 10)
        return {"type": "integer", "minimum": low, "maximum": low + rng.choice([10, 100])}
    if kind == "number":
        return {"type": "number"}
    if kind == "boolean":
        return {"type": "boolean"}
    if kind == "enum":
        return {"type": "string", "enum": rng.choice(ENUMS)}
    if kind == "array":
        items = rng.choice([{"type": "string", "maxLength": 8}, {"type": "integer"}, {"enum": rng.choice(ENUMS)}])
        return {"type": "array", "items": items, "minItems": 1, "maxItems": 3}
    return random_schema(rng, depth + 1)


def random_tool(seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    name = f"{rng.choice(VERBS)}_{rng.choice(WORDS)}_{seed}"
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name.split('_')[0].capitalize()} a {name.split('_')[1]}.",
            "parameters": random_schema(rng),
        },
    }
