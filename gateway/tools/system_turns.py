"""System messages after the first turn (Claude Code's mid-conversation system messages,
Codex's later developer messages), placed where the model's chat template can take them.

A template that renders a ``system`` message anywhere (ChatML: SmolLM2, Qwen2.5; Llama 3's
headers) gets it as a system turn where it stands. One that cannot (it raises on a system
message that is not first, as Mistral's and Gemma's do, or drops it) gets its text folded into
the next user turn, or, with no user turn after it, appended to the user turn before it,
so nothing the client said is lost. Which a template does is probed once per template
(:func:`renders_later_system`): the start-up log line says it, and the docs list it per template.
"""

from __future__ import annotations

import functools
from typing import Any

from agentgate.engine.errors import InvalidRequestError
from agentgate.engine.text.chat_template import render_chat

_PROBE = "\x00agentgate-later-system\x00"


@functools.lru_cache(maxsize=32)
def renders_later_system(template: str, special_tokens: tuple[tuple[str, str], ...]) -> bool:
    """Whether ``template`` renders a system message that follows a user turn, as its own text
    (``special_tokens``: the template's variables as sorted pairs)."""
    probe = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "system", "content": _PROBE},
        {"role": "user", "content": "c"},
    ]
    try:
        return _PROBE in render_chat(template, probe, add_generation_prompt=True, **dict(special_tokens))
    except InvalidRequestError:
        return False


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else ""


def place_system_turns(
    template: str, messages: list[dict[str, Any]], special_tokens: dict[str, str]
) -> list[dict[str, Any]]:
    """``messages`` with every system message after the leading ones kept as a turn (the
    template renders it) or folded into a user turn (see the module doc)."""
    lead = 0
    while lead < len(messages) and messages[lead].get("role") == "system":
        lead += 1
    later = [i for i in range(lead, len(messages)) if messages[i].get("role") == "system"]
    if not later or renders_later_system(template, tuple(sorted(special_tokens.items()))):
        return messages
    out = [dict(m) for m in messages]
    for i in later:
        after = next((j for j in range(i + 1, len(out)) if out[j].get("role") == "user"), None)
        before = next((j for j in range(i - 1, -1, -1) if out[j].get("role") == "user"), None)
        target = after if after is not None else before
        if target is None:  # no user turn at all: it stays where it is (the template says if it can)
            continue
        text = _text(out[i])
        joined = [text, _text(out[target])] if target == after else [_text(out[target]), text]
        out[target]["content"] = "\n\n".join(t for t in joined if t)
        out[i] = {}
    return [m for m in out if m]
