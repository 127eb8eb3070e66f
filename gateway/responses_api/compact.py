"""``POST /v1/responses/compact``: a conversation made short, as the Open Responses spec has it.

The conversation (the ``previous_response_id`` chain, then ``input``) is read
as a turn reads it, and the model, on the chat core, writes a summary of it.
The answer is a new input window, not a stored response: every user message
of the conversation, then one ``compaction`` item holding the summary
(:func:`~gateway.responses_api.items.compaction_item`), which ``POST
/v1/responses`` and the WebSocket mode read back as an assistant message.
A client starts its next chain from that window, without
``previous_response_id``::

    compacted = client.responses.compact(model=..., input=long_input)
    client.responses.create(model=..., input=[*compacted.output, next_message])

Near the context limit (issue 35): the summary needs room beside the conversation it reads,
so when the whole conversation and the instruction leave fewer than ``MIN_SUMMARY_TOKENS``
of the context, the oldest turns are left out of what the model reads (whole turns, from a
user message on, so no tool output loses its call), the fewest that make room; the item
records how many messages were left out. The summary's budget is what is left, at most
``SUMMARY_TOKENS`` and the server's ``--max-tokens-cap``. A summary the budget or an abort cut
(anything but the model's own end) is marked: the item's ``status`` is ``incomplete`` and its
payload says ``cut`` (read back, the model is told so). When not even the last turn leaves
room, the 400 names ``input``, which the client sent, never ``max_tokens``, which it did not.
"""

from __future__ import annotations

import time
from typing import Any

import anyio

from agentgate.gateway.api_types.ids import new_id
from agentgate.gateway.api_types.response_items import user_message_item
from agentgate.gateway.api_types.responses import CompactedResponse, CompactRequest, InputTokensDetails, ResponseUsage
from agentgate.gateway.chat import ChatCore, ChatRun
from agentgate.gateway.context import RequestContext
from agentgate.gateway.errors import BadRequestError
from agentgate.gateway.prompts import chat_prompt
from agentgate.gateway.responses_api import items as it
from agentgate.gateway.responses_api.store import ResponseStore
from agentgate.gateway.responses_api.turn import need_store
from agentgate.gateway.served_model import ServedModel
from agentgate.gateway.state.sealing import Sealer
from agentgate.gateway.translation import chat_request

SUMMARY_TOKENS = 512  # the summary's budget (the server's --max-tokens-cap still applies)
MIN_SUMMARY_TOKENS = 64  # below this a summary says little: older turns are left out instead
INSTRUCTION = (
    "You are performing a CONTEXT CHECKPOINT COMPACTION. Write a concise summary of the conversation above that "
    "keeps every fact, name, number, decision and open task needed to continue it. Reply with the summary only."
)


async def conversation(
    store: ResponseStore | None, body: CompactRequest, owner: str, sealer: Sealer
) -> list[dict[str, Any]]:
    """The chain's messages, then ``input``'s (400 when both are empty, or a tool output answers no call)."""
    history: list[dict[str, Any]] = []
    if body.previous_response_id is not None:
        previous = await need_store(store, "previous_response_id").load(
            body.previous_response_id, owner, param="previous_response_id"
        )
        history = previous.messages
    messages = history + it.input_messages(body.input, sealer)[0]
    if not messages:
        raise BadRequestError(
            "there is nothing to compact: `input` and `previous_response_id` are both empty", param="input"
        )
    it.check_call_outputs(messages)
    return messages


async def start_compaction(
    core: ChatCore,
    body: CompactRequest,
    messages: list[dict[str, Any]],
    *,
    request_id: str,
    arrival: float,
    context: RequestContext,
) -> tuple[ChatRun, int]:
    """Start the summary of ``messages`` (:func:`conversation`) on the chat core; with it, how
    many of the oldest messages it leaves out to fit the context (see the module doc)."""
    system = [{"role": "system", "content": body.instructions}] if body.instructions else []
    dropped, budget = await anyio.to_thread.run_sync(fit_for_summary, core.model, system, messages)
    chat = chat_request(
        _with_instruction(system + messages[dropped:]),
        model=body.model,
        max_tokens=budget,
        prompt_cache_key=body.prompt_cache_key,
    )
    run = await core.start(chat, request_id=request_id, arrival=arrival, context=context)
    return run, dropped


def _with_instruction(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [*messages, {"role": "user", "content": INSTRUCTION}]


def fit_for_summary(
    model: ServedModel, system: list[dict[str, Any]], messages: list[dict[str, Any]]
) -> tuple[int, int]:
    """How many of the oldest ``messages`` to leave out (0, or up to a user message) so that the
    rest, after ``system`` and with the instruction, leaves a summary ``MIN_SUMMARY_TOKENS`` of
    the context; and the summary's budget then. A binary search over the turns' starts (a
    conversation's prompt only shortens as older turns go); 400 naming ``input`` when not even
    the last turn leaves room."""
    starts = [0] + [i for i, m in enumerate(messages) if i and m.get("role") == "user"]
    cap = min(SUMMARY_TOKENS, model.budget.cap or SUMMARY_TOKENS)

    def room(start: int) -> int:
        prompt = chat_prompt(model.tokenizer, chat_request(_with_instruction(system + messages[start:])))
        return model.max_model_len - len(prompt)

    if (whole := room(0)) >= MIN_SUMMARY_TOKENS:
        return 0, min(cap, whole)
    low, high = 1, len(starts) - 1  # starts[high] is the last turn's
    if high < 1 or (last := room(starts[high])) < MIN_SUMMARY_TOKENS:
        raise BadRequestError(
            f"the conversation's last turn leaves no room for a summary of at least {MIN_SUMMARY_TOKENS} tokens "
            f"within this model's context of {model.max_model_len} tokens: there is nothing older to leave out, "
            "so shorten its last message",
            param="input",
        )
    fits = {high: last}
    while low < high:
        middle = (low + high) // 2
        left = room(starts[middle])
        if left >= MIN_SUMMARY_TOKENS:
            high, fits[middle] = middle, left
        else:
            low = middle + 1
    return starts[low], min(cap, fits[low])


def compacted(run: ChatRun, messages: list[dict[str, Any]], sealer: Sealer, dropped: int = 0) -> CompactedResponse:
    """The compacted window of ``messages`` once the summary (``run``, collected) is written;
    ``dropped``: the oldest messages the summary did not read (:func:`fit_for_summary`)."""
    gen = run.generation
    choice = gen.choices[0]
    parsed = choice.reply
    users = [user_message_item(m["content"]) for m in messages if m["role"] == "user"]
    usage = gen.usage
    summary = it.compaction_item(
        (parsed.content or "").strip(), sealer, cut=choice.finish_reason != "stop", dropped=dropped
    )
    return CompactedResponse(
        id=new_id("resp"),
        created_at=int(time.time()),
        output=[*users, summary],
        usage=ResponseUsage(
            usage.prompt_tokens, usage.completion_tokens, usage.total_tokens, InputTokensDetails(usage.cached_tokens)
        ),
    )
