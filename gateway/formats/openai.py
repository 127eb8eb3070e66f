"""OpenAI response bodies and SSE chunks, for chat and for completions.

A format writes a generation's events as bytes: ``opening`` (the role chunk of chat,
the echoed prompt of completions), ``chunk`` per event, ``closing`` (the usage chunk
when asked for, then ``[DONE]``) and the non-streaming ``body``.

Chat replies come read: each choice read its reply through the tool plan as it ran
(``gateway.choice``, :class:`gateway.replies.ReplyReader`), and its events carry the
pieces: with tools, the model's markup as ``tool_calls`` (``message.tool_calls``, or
deltas in OpenAI's shape: index, id, type and name first, then the arguments), the rest
as content, and ``finish_reason`` ``"tool_calls"`` when the reply made calls and ended
normally. The non-streaming reply is what the streamed deltas add up to. This module
only writes them in OpenAI's shape.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentgate.engine.front.protocol import TokenLogprobs
from agentgate.engine.text.tokenizer import Tokenizer
from agentgate.gateway.api_types.openai import (
    AssistantMessage,
    ChatChoice,
    ChatChunkChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatLogprobs,
    ChatTokenLogprob,
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    Delta,
    TopLogprob,
    Usage,
    encode,
)
from agentgate.gateway.errors import error_json
from agentgate.gateway.events import ChoiceEvent, FinishedChoice
from agentgate.gateway.formats.framing import DONE, sse
from agentgate.gateway.tools import Delta as ToolDelta

_EMPTY_DELTA = Delta()


def _delta(d: ToolDelta) -> Delta:
    """A reply piece as a chat delta: a reasoning model's thinking as ``reasoning`` and, the same
    text, ``reasoning_content``."""
    calls = [t.to_dict() for t in d.tool_calls] or None
    return Delta(content=d.content, reasoning=d.reasoning, reasoning_content=d.reasoning, tool_calls=calls)


def _token_text(tokenizer: Tokenizer, token_id: int) -> tuple[str, list[int]]:
    """A token's text and bytes, as OpenAI's logprobs show them."""
    table = tokenizer.token_bytes
    raw = table[token_id] if 0 <= token_id < len(table) else b""
    return raw.decode("utf-8", errors="replace"), list(raw)


class OpenAIStream:
    """OpenAI's chat and completions framing: the usage chunk when asked for, then ``[DONE]``;
    an error is an event holding the OpenAI error body, then ``[DONE]``."""

    request_id: str
    include_usage: bool

    def usage_chunk(self, usage: Usage) -> bytes:
        raise NotImplementedError

    def closing(self, usage: Usage) -> bytes:
        return self.usage_chunk(usage) + DONE if self.include_usage else DONE

    def error(self, exc: BaseException) -> bytes:
        return sse(error_json(exc, self.request_id)) + DONE


class ChatFormat(OpenAIStream):
    """``chat.completion.chunk``\\ s and ``chat.completion`` bodies of a request's ``num_choices``
    choices, written from their replies as read; ``created``: the request's timestamp."""

    def __init__(
        self,
        request_id: str,
        created: int,
        model: str,
        tokenizer: Tokenizer,
        *,
        num_choices: int,
        include_usage: bool,
    ) -> None:
        self.request_id = request_id
        self.id = f"chatcmpl-{request_id}"
        self.created = created
        self.model = model
        self.tokenizer = tokenizer
        self.num_choices = num_choices
        self.include_usage = include_usage

    def _chunk(self, choices: list[ChatChunkChoice]) -> bytes:
        return sse(encode(ChatCompletionChunk(self.id, self.created, self.model, choices)))

    def opening(self) -> bytes:
        role = Delta(role="assistant", content="")
        return b"".join(self._chunk([ChatChunkChoice(index, role)]) for index in range(self.num_choices))

    def chunk(self, index: int, event: ChoiceEvent) -> bytes | None:
        """The chunks of one event, one per piece of the reply it read (content, or a call): the
        event's logprobs ride on the first, its finish reason on the last."""
        logprobs = self._logprobs(event.token_ids, event.logprobs) if event.logprobs else None
        deltas, finish = event.deltas, event.reply_finish
        if not deltas:
            if logprobs is None and finish is None:
                return None
            return self._chunk([ChatChunkChoice(index, _EMPTY_DELTA, logprobs, finish)])
        last = len(deltas) - 1
        chunks = []
        for i, d in enumerate(deltas):
            first_logprobs = logprobs if i == 0 else None
            chunks.append(
                self._chunk([ChatChunkChoice(index, _delta(d), first_logprobs, finish if i == last else None)])
            )
        return b"".join(chunks)

    def usage_chunk(self, usage: Usage) -> bytes:
        return sse(encode(ChatCompletionChunk(self.id, self.created, self.model, [], usage=usage)))

    def body(self, choices: Sequence[FinishedChoice], usage: Usage) -> bytes:
        out = []
        for c in choices:
            parsed = c.reply
            calls = [t.to_openai() for t in parsed.tool_calls]
            message = AssistantMessage("assistant", parsed.content, calls or None, parsed.reasoning, parsed.reasoning)
            logprobs = self._logprobs(c.token_ids, c.logprobs) if c.params.logprobs is not None else None
            out.append(ChatChoice(c.index, message, logprobs, c.reply_finish))
        return encode(ChatCompletion(self.id, self.created, self.model, out, usage))

    def _logprobs(self, token_ids: list[int], logprobs: list[TokenLogprobs]) -> ChatLogprobs:
        tokenizer = self.tokenizer
        content = []
        for token_id, lp in zip(token_ids, logprobs):
            text, raw = _token_text(tokenizer, token_id)
            top = []
            for top_id, top_lp in zip(lp.top_token_ids, lp.top_logprobs):
                top_text, top_raw = _token_text(tokenizer, top_id)
                top.append(TopLogprob(top_text, top_lp, top_raw))
            content.append(ChatTokenLogprob(text, lp.logprob, raw, top))
        return ChatLogprobs(content)


class CompletionFormat(OpenAIStream):
    """``text_completion`` chunks and bodies of ``prompts`` with ``n`` choices each (choice
    ``i`` answers prompt ``i // n``); ``echo``: the prompt's text leads each choice."""

    def __init__(
        self,
        request_id: str,
        created: int,
        model: str,
        tokenizer: Tokenizer,
        prompts: Sequence[Sequence[int]],
        n: int,
        *,
        include_usage: bool,
        echo: bool,
    ) -> None:
        self.request_id = request_id
        self.id = f"cmpl-{request_id}"
        self.created = created
        self.model = model
        self.tokenizer = tokenizer
        self.prompts = prompts
        self.n = n
        self.include_usage = include_usage
        self.echo = echo
        self._prompt_texts: dict[int, str] = {}
        self._offsets = [0] * (len(prompts) * n)  # text_offset of each choice's next token

    def prompt_text(self, prompt_index: int) -> str:
        text = self._prompt_texts.get(prompt_index)
        if text is None:
            ids = list(self.prompts[prompt_index])
            text = self._prompt_texts[prompt_index] = self.tokenizer.decode(ids, skip_special_tokens=False)
        return text

    def _chunk(self, choices: list[CompletionChoice]) -> bytes:
        return sse(encode(Completion(self.id, self.created, self.model, choices)))

    def opening(self) -> bytes:
        if not self.echo:
            return b""
        return b"".join(
            self._chunk([CompletionChoice(index, self.prompt_text(index // self.n))])
            for index in range(len(self._offsets))
        )

    def chunk(self, index: int, event: ChoiceEvent) -> bytes | None:
        logprobs = self._logprobs(index, event.token_ids, event.logprobs) if event.logprobs else None
        if not event.text and logprobs is None and event.finish_reason is None:
            return None
        return self._chunk([CompletionChoice(index, event.text, logprobs, event.finish_reason)])

    def usage_chunk(self, usage: Usage) -> bytes:
        return sse(encode(Completion(self.id, self.created, self.model, [], usage=usage)))

    def body(self, choices: Sequence[FinishedChoice], usage: Usage) -> bytes:
        out = []
        for c in choices:
            text = self.prompt_text(c.prompt_index) + c.text if self.echo else c.text
            logprobs = self._logprobs(c.index, c.token_ids, c.logprobs) if c.params.logprobs is not None else None
            out.append(CompletionChoice(c.index, text, logprobs, c.finish_reason))
        return encode(Completion(self.id, self.created, self.model, out, usage=usage))

    def _logprobs(self, index: int, token_ids: list[int], logprobs: list[TokenLogprobs]) -> CompletionLogprobs:
        tokenizer = self.tokenizer
        tokens: list[str] = []
        token_logprobs: list[float | None] = []
        tops: list[dict[str, float] | None] = []
        offsets: list[int] = []
        offset = self._offsets[index]
        for token_id, lp in zip(token_ids, logprobs):
            text, _ = _token_text(tokenizer, token_id)
            tokens.append(text)
            token_logprobs.append(lp.logprob)
            top = {_token_text(tokenizer, t)[0]: v for t, v in zip(lp.top_token_ids, lp.top_logprobs)}
            tops.append(top)
            offsets.append(offset)
            offset += len(text)
        self._offsets[index] = offset
        return CompletionLogprobs(tokens, token_logprobs, tops, offsets)
