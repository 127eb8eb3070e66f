"""OpenAI response bodies and SSE chunks, for chat and for completions.

A format turns a :class:`~gateway.generation.Generation` (and the events of
its choices) into bytes: ``opening`` (the role chunk of chat, the echoed
prompt of completions), ``chunk`` per event, ``usage_chunk`` and the
non-streaming ``body``.
"""

from __future__ import annotations

from engine.protocol import TokenLogprobs
from engine.tokenizer import Tokenizer
from gateway.generation import Choice, ChoiceEvent, Generation
from gateway.schemas import (
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
from gateway.streaming import sse

_EMPTY_DELTA = Delta()


def _token_text(tokenizer: Tokenizer, token_id: int) -> tuple[str, list[int]]:
    """A token's text and bytes, as OpenAI's logprobs show them."""
    table = tokenizer.token_bytes
    raw = table[token_id] if 0 <= token_id < len(table) else b""
    return raw.decode("utf-8", errors="replace"), list(raw)


class ChatFormat:
    def __init__(self, gen: Generation, model: str, *, include_usage: bool) -> None:
        self.gen = gen
        self.model = model
        self.id = f"chatcmpl-{gen.request_id}"
        self.include_usage = include_usage

    def _chunk(self, choices: list[ChatChunkChoice]) -> bytes:
        return sse(encode(ChatCompletionChunk(self.id, self.gen.created, self.model, choices)))

    def opening(self) -> bytes:
        role = Delta(role="assistant", content="")
        return b"".join(self._chunk([ChatChunkChoice(c.index, role)]) for c in self.gen.choices)

    def chunk(self, choice: Choice, event: ChoiceEvent) -> bytes | None:
        logprobs = self._logprobs(event.token_ids, event.logprobs) if event.logprobs else None
        if not event.text and logprobs is None and event.finish_reason is None:
            return None
        delta = Delta(content=event.text) if event.text else _EMPTY_DELTA
        return self._chunk([ChatChunkChoice(choice.index, delta, logprobs, event.finish_reason)])

    def usage_chunk(self) -> bytes:
        chunk = ChatCompletionChunk(self.id, self.gen.created, self.model, [], usage=self.gen.usage)
        return sse(encode(chunk))

    def body(self) -> bytes:
        choices = [
            ChatChoice(
                c.index,
                AssistantMessage("assistant", c.text),
                self._logprobs(c.token_ids, c.logprobs) if c.params.logprobs is not None else None,
                c.finish_reason,
            )
            for c in self.gen.choices
        ]
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


class CompletionFormat:
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
