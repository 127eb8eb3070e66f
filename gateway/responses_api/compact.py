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
"""

from __future__ import annotations

import time
from typing import Any

from agentgate.gateway.app_state import GatewayState
from agentgate.gateway.chat import ChatRun, start_chat
from agentgate.gateway.context import RequestContext
from agentgate.gateway.errors import BadRequestError
from agentgate.gateway.replies import ReplyReader
from agentgate.gateway.responses_api import items as it
from agentgate.gateway.responses_api.store import ResponseStore
from agentgate.gateway.responses_api.turn import need_store
from agentgate.gateway.responses_api.types import CompactedResponse, CompactRequest, InputTokensDetails, ResponseUsage
from agentgate.gateway.translation import chat_request, new_id

SUMMARY_TOKENS = 512  # the summary's budget (the server's --max-tokens-cap still applies)
INSTRUCTION = (
    "You are performing a CONTEXT CHECKPOINT COMPACTION. Write a concise summary of the conversation above that "
    "keeps every fact, name, number, decision and open task needed to continue it. Reply with the summary only."
)


async def conversation(store: ResponseStore | None, body: CompactRequest, owner: str) -> list[dict[str, Any]]:
    """The chain's messages, then ``input``'s (400 when both are empty, or a tool output answers no call)."""
    history: list[dict[str, Any]] = []
    if body.previous_response_id is not None:
        previous = await need_store(store, "previous_response_id").load(
            body.previous_response_id, owner, param="previous_response_id"
        )
        history = previous.messages
    messages = history + it.input_messages(body.input)[0]
    if not messages:
        raise BadRequestError(
            "there is nothing to compact: `input` and `previous_response_id` are both empty", param="input"
        )
    it.check_call_outputs(messages)
    return messages


async def start_compaction(
    gw: GatewayState,
    body: CompactRequest,
    messages: list[dict[str, Any]],
    *,
    request_id: str,
    arrival: float,
    context: RequestContext,
) -> ChatRun:
    """Start the summary of ``messages`` (:func:`conversation`) on the chat core."""
    system = [{"role": "system", "content": body.instructions}] if body.instructions else []
    chat = chat_request(
        system + messages + [{"role": "user", "content": INSTRUCTION}],
        model=body.model,
        max_tokens=SUMMARY_TOKENS,
        prompt_cache_key=body.prompt_cache_key,
    )
    return await start_chat(
        gw.model, gw.dispatcher, chat, turns=gw.turn_tokens, request_id=request_id, arrival=arrival, context=context
    )


def compacted(run: ChatRun, messages: list[dict[str, Any]]) -> CompactedResponse:
    """The compacted window of ``messages`` once the summary (``run``, collected) is written."""
    gen = run.generation
    choice = gen.choices[0]
    parsed, _ = ReplyReader(run.plan).whole(choice.text, choice.finish_reason)
    users = [it.user_message_item(m["content"]) for m in messages if m["role"] == "user"]
    usage = gen.usage
    return CompactedResponse(
        id=new_id("resp"),
        created_at=int(time.time()),
        output=[*users, it.compaction_item((parsed.content or "").strip())],
        usage=ResponseUsage(
            usage.prompt_tokens, usage.completion_tokens, usage.total_tokens, InputTokensDetails(usage.cached_tokens)
        ),
    )
