"""Bounds a request meets before anything costly is done with it: each raises
a 400 naming the parameter, so no input reaches a recursion, a tokenizer or
the engine that would cost the server more than the client.

- :func:`check_depth`: free-form JSON (tool schemas, ``response_format``,
  template kwargs) nested at most ``MAX_JSON_DEPTH`` deep, checked without
  recursion (2,000 levels used to be a RecursionError, a 500);
- :func:`check_context`: the prompt, and the prompt plus max_tokens, fit in
  ``max_model_len`` tokens (the output budget asks it: ``gateway.admission.output_budget``);
- :func:`check_prompt_chars`: a prompt with more characters than
  ``max_model_len`` tokens could ever hold is refused before it is tokenized
  (a token spans at most ``max_token_bytes`` bytes, a character at least one);
- :func:`check_engine_requests`: one HTTP request asks the engine for
  ``n × prompts`` requests, at most ``max_engine_requests`` of them; checked
  once, for every API, by :func:`~gateway.dispatch.dispatch`, before anything
  is admitted (a completions request's prompts are tokenized by then: their
  text is bounded by ``--max-body-bytes`` and each prompt by
  :func:`check_prompt_chars`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentgate.gateway.errors import BadRequestError

MAX_JSON_DEPTH = 64
# Above this many characters a prompt is rendered and tokenized on a worker thread (gateway.chat).
OFF_LOOP_CHARS = 16_384


def check_depth(value: Any, param: str, limit: int = MAX_JSON_DEPTH) -> None:
    """400 on ``param`` when the JSON ``value`` nests deeper than ``limit`` (objects and arrays)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            raise BadRequestError(f"`{param}` nests deeper than {limit} levels", param=param, code="too_deep")
        stack.extend((child, depth + 1) for child in children)


def check_prompt_chars(num_chars: int, max_model_len: int, max_token_bytes: int, param: str) -> None:
    """400 (context length) for a prompt whose ``num_chars`` cannot fit in ``max_model_len`` tokens."""
    bound = max_model_len * max(max_token_bytes, 1)
    if num_chars > bound:
        raise BadRequestError(
            f"This model's maximum context length is {max_model_len} tokens. However, your prompt has "
            f"{num_chars} characters, more than {max_model_len} tokens can hold.",
            param=param,
            code="context_length_exceeded",
        )


def check_engine_requests(num_prompts: int, n: int, max_engine_requests: int) -> int:
    """The engine requests of ``num_prompts`` prompts with ``n`` choices each; 400 above the cap."""
    count = num_prompts * n
    if count > max_engine_requests:
        raise BadRequestError(
            f"this request asks for {num_prompts} prompt(s) x n={n} = {count} generations; this server takes at most "
            f"{max_engine_requests} per request (--max-engine-requests-per-request)",
            param="n" if num_prompts == 1 else "prompt",
            code="too_many_generations",
        )
    return count


def message_chars(messages: Iterable[Any]) -> int:
    """Characters of the messages' text content (a lower bound of the rendered prompt's)."""
    total = 0
    for message in messages:
        content = message.content
        if isinstance(content, str):
            total += len(content)
        elif content:
            total += sum(len(part.text or "") for part in content)
    return total


def check_context(
    num_prompt_tokens: int,
    max_tokens: int | None,
    max_model_len: int,
    prompt_field: str,
    *,
    budget_param: str = "max_tokens",
) -> None:
    """400 when the prompt, or the prompt plus max_tokens, does not fit in the context
    (``budget_param``: the request's name for max_tokens)."""
    if num_prompt_tokens >= max_model_len:
        raise BadRequestError(
            f"This model's maximum context length is {max_model_len} tokens. However, your prompt has "
            f"{num_prompt_tokens} tokens, which leaves no room to generate.",
            param=prompt_field,
            code="context_length_exceeded",
        )
    if max_tokens is not None and num_prompt_tokens + max_tokens > max_model_len:
        raise BadRequestError(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{num_prompt_tokens + max_tokens} tokens ({num_prompt_tokens} in the prompt, {max_tokens} for the "
            f"completion). Please reduce the prompt or {budget_param}.",
            param=budget_param,
            code="context_length_exceeded",
        )
