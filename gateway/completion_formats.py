"""OpenAI response bodies and SSE chunks, for chat and for completions.

A format turns a :class:`~gateway.generation.Generation` (and the events of
its choices) into bytes: ``opening`` (the role chunk of chat, the echoed
prompt of completions), ``chunk`` per event, ``usage_chunk`` and the
non-streaming ``body``.

Chat replies are read by the shared core (:class:`gateway.chat.ReplyReader`,
one per choice): with tools, the model's markup becomes ``tool_calls``
(``message.tool_calls``, or deltas in OpenAI's shape: index, id, type and name
first, then the arguments), the rest stays content, and ``finish_reason`` is
``"tool_calls"`` when the reply made calls and ended normally. The
non-streaming reply is what the streamed deltas add up to. This module only
writes them in OpenAI's shape.
"""

from __future__ import annotations

from agentgate.engine.protocol import TokenLogprobs
from agentgate.engine.tokenizer import Tokenizer
from agentgate.gateway.chat import ChatRun, ReplyReader
from agentgate.gateway.generation import Choice, ChoiceEvent, Generation
from agentgate.gateway.http.sse import OpenAIStream, sse
from agentgate.gateway.schemas import (
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
    encode,
)
from agentgate.gateway.tools import Delta as ToolDelta

_EMPTY_DELTA = Delta()


def _delta(d: ToolDelta) -> Delta:
    return Delta(content=d.content, tool_calls=[t.to_dict() for t in d.tool_calls] or None)


def _token_text(tokenizer: Tokenizer, token_id: int) -> tuple[str, list[int]]:
    """A token's text and bytes, as OpenAI's logprobs show them."""
    table = tokenizer.token_bytes
    raw = table[token_id] if 0 <= token_id < len(table) else b""
    return raw.decode("utf-8", errors="replace"), list(raw)


class ChatFormat(OpenAIStream):
    def __init__(self, run: ChatRun, model: str, *, include_usage: bool) -> None:
        self.run = run
        self.gen = gen = run.generation
        self.model = model
        self.id = f"chatcmpl-{gen.request_id}"
        self.include_usage = include_usage
        self._plain = run.plan.parser is None  # no tool-call parser: the text is the content
        self._readers: dict[int, ReplyReader] = {}

    def _reader(self, index: int) -> ReplyReader:
        reader = self._readers.get(index)
        if reader is None:
            reader = self._readers[index] = self.run.reader()
        return reader

    def _chunk(self, choices: list[ChatChunkChoice]) -> bytes:
        return sse(encode(ChatCompletionChunk(self.id, self.gen.created, self.model, choices)))

    def opening(self) -> bytes:
        role = Delta(role="assistant", content="")
        return b"".join(self._chunk([ChatChunkChoice(c.index, role)]) for c in self.gen.choices)

    def chunk(self, choice: Choice, event: ChoiceEvent) -> bytes | None:
        logprobs = self._logprobs(event.token_ids, event.logprobs) if event.logprobs else None
        if not self._plain:
            return self._tool_chunks(choice, event, logprobs)
        if not event.text and logprobs is None and event.finish_reason is None:
            return None
        delta = Delta(content=event.text) if event.text else _EMPTY_DELTA
        return self._chunk([ChatChunkChoice(choice.index, delta, logprobs, event.finish_reason)])

    def _tool_chunks(self, choice: Choice, event: ChoiceEvent, logprobs: ChatLogprobs | None) -> bytes | None:
        """The chunks one event makes through the choice's parser: the event's logprobs ride on
        the first, its finish reason on the last."""
        deltas, finish = self._reader(choice.index).read(event.text, event.finish_reason)
        if not deltas:
            if logprobs is None and finish is None:
                return None
            return self._chunk([ChatChunkChoice(choice.index, _EMPTY_DELTA, logprobs, finish)])
        last = len(deltas) - 1
        chunks = []
        for i, d in enumerate(deltas):
            first_logprobs = logprobs if i == 0 else None
            chunks.append(
                self._chunk([ChatChunkChoice(choice.index, _delta(d), first_logprobs, finish if i == last else None)])
            )
        return b"".join(chunks)

    def usage_chunk(self) -> bytes:
        chunk = ChatCompletionChunk(self.id, self.gen.created, self.model, [], usage=self.gen.usage)
        return sse(encode(chunk))

    def body(self) -> bytes:
        choices = []
        for c in self.gen.choices:
            parsed, finish = self.run.reader().whole(c.text, c.finish_reason)
            calls = [t.to_openai() for t in parsed.tool_calls]
            message = AssistantMessage("assistant", parsed.content, calls or None)
            logprobs = self._logprobs(c.token_ids, c.logprobs) if c.params.logprobs is not None else None
            choices.append(ChatChoice(c.index, message, logprobs, finish))
        return encode(ChatCompletion(self.id, self.gen.created, self.model, choices, self.gen.usage))

    def _logprobs(self, token_ids: list[int], logprobs: list[TokenLogprobs]) -> ChatLogprobs:
        tokenizer = self.gen.tokenizer
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
    def __init__(self, gen: Generation, model: str, *, include_usage: bool, echo: bool) -> None:
        self.gen = gen
        self.model = model
        self.id = f"cmpl-{gen.request_id}"
        self.include_usage = include_usage
        self.echo = echo
        self._prompt_texts: dict[int, str] = {}
        self._offsets = [0] * len(gen.choices)  # text_offset of each choice's next token

    def prompt_text(self, prompt_index: int) -> str:
        text = self._prompt_texts.get(prompt_index)
        if text is None:
            ids = self.gen.prompts[prompt_index]
            text = self._prompt_texts[prompt_index] = self.gen.tokenizer.decode(ids, skip_special_tokens=False)
        return text

    def _chunk(self, choices: list[CompletionChoice]) -> bytes:
        return sse(encode(Completion(self.id, self.gen.created, self.model, choices)))

    def opening(self) -> bytes:
        if not self.echo:
            return b""
        return b"".join(
            self._chunk([CompletionChoice(c.index, self.prompt_text(c.prompt_index))]) for c in self.gen.choices
        )

    def chunk(self, choice: Choice, event: ChoiceEvent) -> bytes | None:
        logprobs = self._logprobs(choice.index, event.token_ids, event.logprobs) if event.logprobs else None
        if not event.text and logprobs is None and event.finish_reason is None:
            return None
        return self._chunk([CompletionChoice(choice.index, event.text, logprobs, event.finish_reason)])

    def usage_chunk(self) -> bytes:
        return sse(encode(Completion(self.id, self.gen.created, self.model, [], usage=self.gen.usage)))

    def body(self) -> bytes:
        choices = []
        for c in self.gen.choices:
            text = self.prompt_text(c.prompt_index) + c.text if self.echo else c.text
            logprobs = self._logprobs(c.index, c.token_ids, c.logprobs) if c.params.logprobs is not None else None
            choices.append(CompletionChoice(c.index, text, logprobs, c.finish_reason))
        return encode(Completion(self.id, self.gen.created, self.model, choices, usage=self.gen.usage))

    def _logprobs(self, index: int, token_ids: list[int], logprobs: list[TokenLogprobs]) -> CompletionLogprobs:
        tokenizer = self.gen.tokenizer
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
