"""Prompts whose greedy answers hold with margin on the default model, and
the check that they still do where a test runs.

Greedy decoding follows the largest logit; where the runner-up is close, the
rounding of a kernel (int4 against bf16, AVX2 against AMX) picks the answer.
"What is the capital of France?" is such a prompt on SmolLM2-135M: Paris by
0.1 logit on one CPU, "L'Étoile, la Marseillaise…" on another. A test that
needs a right answer asks `CAPITAL_CHAT` or `CAPITAL_PROMPT` instead (at
least 1.5 logits between every greedy token and its runner-up, dense and
int4, alone and batched, when chosen) and checks the margin it got with
`require_margin`, so a thin margin fails as a broken set-up, loudly, not as a
broken feature. Plumbing tests (streaming against non-streaming, the SDKs,
the CLI, the playground) compare against the same server's own output
instead of a word.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import httpx
import pytest

CAPITAL_CHAT = [{"role": "user", "content": "Complete the sentence: The capital of France is"}]
CAPITAL_PROMPT = "The capital of France is"
# Logits between each greedy token and its runner-up below which the answer
# is a matter of rounding. bf16 logits move by ~0.1-0.4 between kernels.
MIN_MARGIN = 0.75


def require_margin(top_two: Iterable[Sequence[float]], what: str = "the answer") -> None:
    """Fail the test as a set-up error when some token's two best logprobs
    (equal to their logits' difference) are closer than `MIN_MARGIN`."""
    margins = [first - second for first, second, *_ in top_two]
    assert margins, f"no logprobs came back for {what}"
    thin = [(i, round(m, 3)) for i, m in enumerate(margins) if m < MIN_MARGIN]
    if thin:
        pytest.fail(
            f"SET-UP: {what} is decided by rounding here (tokens {thin} lead their runner-up by < {MIN_MARGIN} "
            "logits): pick a prompt whose greedy answer holds with margin on this CPU (tests/support/answers.py)",
            pytrace=False,
        )


def engine_top_two(logprobs: Sequence[Any]) -> list[list[float]]:
    """The two best logprobs of each token from the engine's `TokenLogprobs`."""
    return [entry.top_logprobs[:2] for entry in logprobs]


def chat_top_two(choice: dict[str, Any]) -> list[list[float]]:
    """The two best logprobs of each token of an OpenAI chat choice (JSON)."""
    return [[alt["logprob"] for alt in entry["top_logprobs"][:2]] for entry in choice["logprobs"]["content"]]


def completion_top_two(choice: dict[str, Any]) -> list[list[float]]:
    """The two best logprobs of each token of an OpenAI completion choice (JSON)."""
    return [sorted(alts.values(), reverse=True)[:2] for alts in choice["logprobs"]["top_logprobs"]]


def reference_chat(url: str, messages: list[dict[str, Any]], max_tokens: int, **fields: Any) -> dict[str, Any]:
    """The server's own non-streamed greedy reply to ``messages`` (the choice's
    JSON), its margin checked: what a plumbing test compares against."""
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "logprobs": True, "top_logprobs": 2}
    response = httpx.post(f"{url}/v1/chat/completions", json=body | fields, timeout=300)
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    require_margin(chat_top_two(choice), f"the reply to {messages[-1]['content']!r}")
    return choice


def reference_completion(url: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    """The server's own non-streamed greedy completion of ``prompt``, its margin checked."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "logprobs": 2}
    response = httpx.post(f"{url}/v1/completions", json=body, timeout=300)
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    require_margin(completion_top_two(choice), f"the completion of {prompt!r}")
    return choice
