"""The core under every chat-shaped API: a chat request in, a running
generation and API-neutral reply pieces out.

An API module translates its wire request into a
:class:`~gateway.schemas.ChatCompletionRequest` (OpenAI's chat completions
need no translation; the Responses and Anthropic Messages APIs map their
items and content blocks onto messages, tools and tool_choice), calls
:func:`start_chat`, and writes what a :class:`ReplyReader` reads in its own
wire shape::

    run = await start_chat(gw, request, request_id=..., arrival=..., context=...)
    reader = run.reader()                                  # one per choice
    piece = reader.read(event.text, event.finish_reason)   # content and tool-call deltas
    run.generation.usage                                   # prompt and completion tokens

Shared by all of them, so that no API module repeats it: the prompt (the
chat template, tools presented, past calls rendered back), the tool plan
(which parser reads the reply, how many calls are kept, the grammar the
engine enforces), sampling parameters, admission, routing and registration
(``gateway.dispatch``), tool-call parsing and the finish reason, usage.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

import anyio
import msgspec

from agentgate.gateway.app_state import GatewayState
from agentgate.gateway.context import RequestContext
from agentgate.gateway.dispatch import Job, dispatch
from agentgate.gateway.generation import Generation
from agentgate.gateway.limits import OFF_LOOP_CHARS, check_prompt_chars, message_chars
from agentgate.gateway.programs import program_tag
from agentgate.gateway.prompts import (
    ToolPlan,
    chat_logprobs,
    chat_prompt_text,
    check_n,
    check_request_json,
    program_prompt,
    sampling_params,
    tool_plan,
)
from agentgate.gateway.schemas import ChatCompletionRequest
from agentgate.gateway.tools import Delta, ParsedOutput, accumulate, finish_reason
from agentgate.gateway.tools.constraints import CALL_FORMATS
from agentgate.gateway.tools.deltas import FunctionDelta, ToolCallDelta
from agentgate.gateway.turn_tokens import TurnStart


@dataclass(frozen=True, slots=True)
class ChatRun:
    """A chat request admitted and running: its generation and how its replies are read."""

    generation: Generation
    plan: ToolPlan

    def reader(self) -> ReplyReader:
        return ReplyReader(self.plan)


async def start_chat(
    gw: GatewayState,
    request: ChatCompletionRequest,
    *,
    request_id: str,
    arrival: float,
    context: RequestContext,
    budget_param: str | None = None,
) -> ChatRun:
    """Validate ``request`` (400-class errors name the field), build its prompt, tool plan and
    sampling parameters, and dispatch it. ``budget_param``: the API's name for max_tokens in
    its errors (Responses: ``max_output_tokens``); the server's output budget applies
    (:mod:`gateway.output_budget`). A prompt too long for the context is refused by its
    characters before it is tokenized; a large one is rendered and tokenized on a worker thread,
    so the event loop (every other stream, ``/health``) never waits on it."""
    model = gw.model
    model.check(request.model)
    check_n(request.n)
    check_request_json(request)
    chars = message_chars(request.messages)
    check_prompt_chars(chars, model.max_model_len, model.tokenizer.max_token_bytes, "messages")
    program = program_tag(context, request.messages, tools_offered=bool(request.tools),
                          prompt_cache_key=request.prompt_cache_key, user=request.user)  # fmt: skip
    program_id = program.program_id if program is not None else None
    if chars > OFF_LOOP_CHARS:
        text, prompt, plan = await anyio.to_thread.run_sync(_prompt_and_plan, gw, request, program_id)
    else:
        text, prompt, plan = _prompt_and_plan(gw, request, program_id)
    requested, param = request.max_tokens, "max_tokens"
    if request.max_completion_tokens is not None:
        requested, param = request.max_completion_tokens, "max_completion_tokens"
    param = budget_param or param
    max_tokens = model.budget.resolve(requested, prompt_tokens=len(prompt), max_model_len=model.max_model_len,
                                      param=param)  # fmt: skip
    structured = plan.structured
    if structured is not None and plan.forced:  # the reply must end whole within its budget
        budget = max_tokens if max_tokens is not None else model.max_model_len - len(prompt)
        structured = msgspec.structs.replace(structured, max_tokens=budget)
    params = sampling_params(
        request, max_tokens=max_tokens, logprobs=chat_logprobs(request), vocab_size=model.vocab_size,
        structured=structured, defaults=model.sampling,
    )  # fmt: skip
    turn = None
    if gw.turn_tokens is not None and program_id is not None and request.n == 1:
        turn = TurnStart(gw.turn_tokens, program_id, text, prompt)
    job = Job(request_id, arrival, [prompt], params, request.n, program, turn)
    generation = await dispatch(gw, job, context, conversation=request.messages)
    generation.constraint_param = plan.constraint_param
    generation.budget_param = param
    generation.reply_message = partial(recorded_reply, plan)
    return ChatRun(generation, plan)


def _prompt_and_plan(
    gw: GatewayState, request: ChatCompletionRequest, program_id: str | None
) -> tuple[str, list[int], ToolPlan]:
    """The prompt's text and token ids (a program's turn starts with its last turn's own tokens:
    :mod:`gateway.turn_tokens`), and the tool plan."""
    tokenizer = gw.model.tokenizer
    text = chat_prompt_text(tokenizer, request)
    prompt = program_prompt(tokenizer, request, text, gw.turn_tokens, program_id)
    return text, prompt, tool_plan(tokenizer, request, gw.model.tool_call_parser, gw.model.max_forced_tool_calls)


def recorded_reply(plan: ToolPlan, text: str) -> dict[str, Any]:
    """A reply as a session records it: the assistant message, its tool calls parsed by the
    plan (with ids of their own: the client's come back with the next turn's messages)."""
    parsed, _ = ReplyReader(plan).whole(text, None)
    message: dict[str, Any] = {"role": "assistant", "content": parsed.content}
    if parsed.tool_calls:
        message["tool_calls"] = [call.to_openai() for call in parsed.tool_calls]
    return message


class ReplyPiece(NamedTuple):
    """What one choice event adds to a reply: content and tool-call deltas, and on its
    last event the finish reason as the APIs report it."""

    deltas: list[Delta]
    finish_reason: str | None


class ReplyReader:
    """One choice's reply, read through the plan's tool-call parser (if any), keeping at
    most ``plan.max_calls`` calls. The finish reason becomes ``"tool_calls"`` when the
    reply made calls and ended normally.

    A call goes out whole: its header (id, name) is held until its arguments are
    known, so a call that ``max_tokens`` cuts is never returned, streamed or not:
    it is dropped, and so is any call markup the cut left in the text (the start
    of a call's tag, or of the closing tag after a whole call: ``</tool_ca``); the
    finish reason stays ``"length"``. (The parser keeps such a piece as content
    when the reply ended otherwise: it loses no text the model meant.)

    Under a forced plan (``plan.forced``: the grammar, not the model, keeps a reply of
    calls going) a call identical to an earlier one of the reply (same name, same
    arguments) is dropped and the calls after it renumbered: a small model repeats
    its call until the grammar's bound; the reply holds it once."""

    __slots__ = ("max_calls", "parser", "_markup", "_pending", "_unique", "_seen", "_index", "_dropped")

    def __init__(self, plan: ToolPlan) -> None:
        self.parser = plan.parser() if plan.parser is not None else None
        self.max_calls = plan.max_calls
        call_format = CALL_FORMATS.get(plan.parser.name) if plan.parser is not None else None
        # The tags whose start a cut can leave at the end of the text: a call's opening and closing tags.
        self._markup = tuple(t for t in (call_format.trigger, call_format.closing_tag) if t) if call_format else ()
        self._pending: dict[int, ToolCallDelta] = {}  # call headers waiting for their arguments
        self._unique = plan.forced
        self._seen: set[tuple[str | None, str | None]] = set()  # (name, arguments) of the calls sent
        self._index: dict[int, int] = {}  # the parser's index of a call sent -> its index in the reply
        self._dropped = 0  # calls dropped as repeats

    @property
    def num_calls(self) -> int:
        if self.parser is None:
            return 0
        n = self.parser.num_tool_calls
        return (n if self.max_calls is None else min(n, self.max_calls)) - self._dropped

    def feed(self, text: str) -> list[Delta]:
        if not text:
            return []
        if self.parser is None:
            return [Delta(content=text)]
        return self._whole_calls(self._keep(self.parser.feed(text)))

    def finish(self, cut: bool = False) -> list[Delta]:
        """The rest of the reply; ``cut``: it ended at ``max_tokens`` (an open call is dropped)."""
        if self.parser is None:
            return []
        deltas = self._keep(self.parser.finish())
        if not cut:
            deltas = self._whole_calls(deltas)
            return deltas + [Delta(tool_calls=(t,)) for t in self._pending.values()]
        cut_calls = set(self._pending)
        kept = []
        for d in deltas:
            renumbered = (self._renumbered(t) for t in d.tool_calls if t.index not in cut_calls)
            calls = tuple(t for t in renumbered if t is not None)
            content = self._before_markup(d.content)
            if content or calls:
                kept.append(Delta(content, calls))
        return kept

    def _whole_calls(self, deltas: list[Delta]) -> list[Delta]:
        """``deltas`` with each call's header held back until its arguments come, then sent with them."""
        out = []
        for d in deltas:
            calls = []
            for t in d.tool_calls:
                if t.id is not None and not t.function.arguments:
                    self._pending[t.index] = t
                    continue
                header = self._pending.pop(t.index, None)
                if header is not None:
                    function = FunctionDelta(header.function.name, t.function.arguments)
                    t = ToolCallDelta(t.index, function, header.id, header.type)
                if t.id is not None:  # a whole call
                    call = (t.function.name, t.function.arguments)
                    if self._unique and call in self._seen:
                        self._dropped += 1  # a repeat of a call this reply made
                        continue
                    self._seen.add(call)
                    self._index[t.index] = t.index - self._dropped
                t = self._renumbered(t)
                if t is not None:
                    calls.append(t)
            if d.content is not None or calls:
                out.append(Delta(d.content, tuple(calls)))
        return out

    def _renumbered(self, t: ToolCallDelta) -> ToolCallDelta | None:
        """``t`` at its call's index in the reply (None: a piece of a repeat that was dropped)."""
        if not self._unique:
            return t
        index = self._index.get(t.index)
        if index is None:
            return None
        return t if index == t.index else dataclasses.replace(t, index=index)

    def _before_markup(self, text: str | None) -> str | None:
        """The text before any call markup (or the start of a tag at its end), right-stripped."""
        if not text or not self._markup:
            return text
        trigger = self._markup[0]
        at = text.find(trigger)
        if at >= 0:
            return text[:at].rstrip()  # as before any call: the text is right-stripped
        for tag in self._markup:
            for n in range(min(len(tag), len(text)), 0, -1):
                if text.endswith(tag[:n]):
                    return text[:-n].rstrip()
        return text

    def read(self, text: str, engine_finish: str | None) -> ReplyPiece:
        """The piece an event adds (``engine_finish``: its finish reason, on the last)."""
        deltas = self.feed(text)
        if engine_finish is None:
            return ReplyPiece(deltas, None)
        deltas += self.finish(cut=engine_finish == "length")
        return ReplyPiece(deltas, finish_reason(engine_finish, tool_calls=self.num_calls > 0))

    def whole(self, text: str, engine_finish: str | None) -> tuple[ParsedOutput, str | None]:
        """A whole reply at once (non-streaming): what its streamed pieces add up to."""
        parsed = accumulate([*self.feed(text), *self.finish(cut=engine_finish == "length")])
        return parsed, finish_reason(engine_finish, tool_calls=bool(parsed.tool_calls))

    def _keep(self, deltas: list[Delta]) -> list[Delta]:
        if self.max_calls is None:
            return deltas
        kept = []
        for d in deltas:
            calls = tuple(t for t in d.tool_calls if t.index < self.max_calls)
            if d.content is not None or calls:
                kept.append(d if len(calls) == len(d.tool_calls) else Delta(d.content, calls))
        return kept
