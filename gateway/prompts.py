"""From an OpenAI request to what the engine takes: prompt token ids and
validated SamplingParams. Everything here raises 400-class errors naming the
field, so a bad request never reaches the engine.

Chat requests with tools: the prompt presents them through the chat template
(or the ``<tools>`` fallback, see :mod:`gateway.tools.render`), and
:func:`tool_plan` decides how the reply is read (which tool-call parser, if
any) and what the engine enforces (:mod:`gateway.tools.constraints`).
"""

from __future__ import annotations

import functools
from typing import Any

from agentgate.engine.sampling_params import MAX_LOGPROBS, SamplingParams, StructuredOutput
from agentgate.engine.text.tokenizer import Tokenizer
from agentgate.gateway.admission.bounds import check_depth
from agentgate.gateway.api_types.openai import (
    MAX_N,
    ChatCompletionRequest,
    ChatMessage,
    CompletionRequest,
    SamplingFields,
)
from agentgate.gateway.config.sampling_defaults import OPENAI_DEFAULTS, SamplingDefaults
from agentgate.gateway.errors import BadRequestError, GatewayError
from agentgate.gateway.programs.turn_tokens import TurnTokens
from agentgate.gateway.tools import (
    StreamingToolParser,
    render_chat_prompt,
    resolve_tool_choice,
    select_tool_parser,
    validate_tools,
)
from agentgate.gateway.tools.constraints import DEFAULT_MAX_FORCED_CALLS, parse_response_format, structured_output
from agentgate.gateway.tools.plan import ToolPlan


def chat_prompt(tokenizer: Tokenizer, request: ChatCompletionRequest) -> list[int]:
    """The conversation rendered with the model's chat template, as token ids: the tools
    presented as ``tool_choice`` says, past tool calls and tool results rendered back."""
    return tokenizer.encode(chat_prompt_text(tokenizer, request), add_special_tokens=False)


def chat_prompt_text(tokenizer: Tokenizer, request: ChatCompletionRequest) -> str:
    """The text of :func:`chat_prompt` (the template writes the special tokens)."""
    if not request.messages:
        raise BadRequestError("`messages` must hold at least one message", param="messages")
    return _render_request(tokenizer, request, len(request.messages), request.add_generation_prompt)


def program_prompt(
    tokenizer: Tokenizer, request: ChatCompletionRequest, text: str, turns: TurnTokens | None, program_id: str | None
) -> list[int]:
    """The token ids of ``text``, the prompt of ``request``, a turn of ``program_id``: its last
    turn's own tokens first when ``turns`` kept one that this conversation carries
    (:mod:`gateway.programs.turn_tokens`), else ``text`` tokenized."""
    returning = None
    if turns is not None and program_id is not None:
        returning = turns.returning(program_id, text, request.messages)
    if returning is not None:
        through = _render_request(tokenizer, request, returning.last + 1, False)
        ids = turns.prompt_ids(returning, text, through)
        if ids is not None:
            return ids
    return tokenizer.encode(text, add_special_tokens=False)


def _render_request(tokenizer: Tokenizer, request: ChatCompletionRequest, count: int, generation_prompt: bool) -> str:
    """The first ``count`` messages of ``request`` rendered with its tools and template options."""
    return render_messages(
        tokenizer,
        request.messages[:count],
        tools=request.tools,
        tool_choice=request.tool_choice,
        add_generation_prompt=generation_prompt,
        template_kwargs=request.chat_template_kwargs,
    )


# What render_messages passes to the template itself: chat_template_kwargs may not set them.
RESERVED_TEMPLATE_KWARGS = frozenset({"messages", "tools", "tool_choice", "add_generation_prompt", "chat_template"})


def check_request_json(request: ChatCompletionRequest) -> None:
    """400 for free-form JSON nested too deep (``gateway.admission.bounds``) and for ``chat_template_kwargs``
    that set what the request's own fields set."""
    for param in ("tools", "tool_choice", "response_format", "chat_template_kwargs"):
        check_depth(getattr(request, param), param)
    for i, message in enumerate(request.messages):
        check_depth(message.tool_calls, f"messages[{i}].tool_calls")
    clash = sorted(RESERVED_TEMPLATE_KWARGS.intersection(request.chat_template_kwargs or ()))
    if clash:
        raise BadRequestError(
            f"`chat_template_kwargs` may not set {', '.join(clash)}: use the request's own field",
            param="chat_template_kwargs",
        )


def render_messages(
    tokenizer: Tokenizer,
    messages: list[ChatMessage],
    *,
    tools: list[dict[str, Any]] | None = None,
    tool_choice: Any = None,
    add_generation_prompt: bool = True,
    template_kwargs: dict[str, Any] | None = None,
) -> str:
    """The prompt text of chat ``messages`` with ``tools`` (also what /tokenize counts)."""
    return render_chat_prompt(
        tokenizer,
        [message_dict(m, i) for i, m in enumerate(messages)],
        tools=tools,
        tool_choice=tool_choice,
        add_generation_prompt=add_generation_prompt,
        **(template_kwargs or {}),
    )


def tool_plan(
    tokenizer: Tokenizer,
    request: ChatCompletionRequest,
    parser_override: str | None = None,
    max_forced_calls: int = DEFAULT_MAX_FORCED_CALLS,
) -> ToolPlan:
    """Decide a chat request's tool-call parsing and constrained decoding (400s name the field).

    The parser comes from the chat template (``--tool-call-parser`` overrides
    it); ``tool_choice`` required/named and ``response_format`` are enforced
    by the engine (see :mod:`gateway.tools.constraints`), with at most
    ``max_forced_calls`` parallel calls under ``required``.
    """
    tools = validate_tools(request.tools)
    choice = resolve_tool_choice(request.tool_choice, tools)
    response_format = parse_response_format(request.response_format)
    parallel = request.parallel_tool_calls is not False
    template_parser = parser_for(tokenizer.get_chat_template([]), parser_override) if tools else None
    parser = template_parser if choice.mode != "none" else None  # none: the reply is plain content
    max_calls = None if parallel else 1
    if parallel and choice.mode == "required":
        max_calls = max_forced_calls
    structured = structured_output(
        tools,
        choice,
        response_format,
        parser=template_parser.name if template_parser else "hermes",
        parallel=parallel,
        max_calls=max_calls,
    )
    if structured is None:
        param = None
    elif structured.structural_tag is not None:
        param = "tool_choice" if choice.mode == "none" else "tools"
    else:
        param = "response_format"
    # Free text, some of it checked: strict tools' calls, or (none) no call opening.
    free_text = choice.mode in ("auto", "none") and bool(tools) and response_format is None
    return ToolPlan(parser, max_calls, structured, param, forced=structured is not None and not free_text)


@functools.lru_cache(maxsize=16)
def parser_for(template: str, override: str | None) -> type[StreamingToolParser]:
    """The tool-call parser of a chat template (or the ``--tool-call-parser`` override)."""
    try:
        return select_tool_parser(template, override)
    except ValueError as exc:  # a bad --tool-call-parser (the CLI rejects it before start-up)
        raise GatewayError(f"this server is misconfigured: {exc}") from None


def message_dict(message: ChatMessage, index: int) -> dict[str, Any]:
    """A message as the chat template sees it; content parts joined into text."""
    content = message.content
    if isinstance(content, list):
        texts = []
        for part in content:
            if part.type != "text" or part.text is None:
                raise BadRequestError(
                    f"content parts of type {part.type!r} are not supported (this model reads text only)",
                    param=f"messages[{index}].content",
                )
            texts.append(part.text)
        content = "".join(texts)
    if message.role == "tool" and not message.tool_call_id:
        raise BadRequestError(
            "a message with role `tool` needs `tool_call_id`: the id of the call it answers",
            param=f"messages[{index}].tool_call_id",
        )
    out: dict[str, Any] = {"role": message.role, "content": "" if content is None else content}
    for key in ("name", "tool_calls", "tool_call_id", "reasoning_content"):
        value = getattr(message, key)
        if value is not None:
            out[key] = value
    if message.reasoning is not None and message.reasoning_content is None:
        out["reasoning_content"] = message.reasoning  # what reasoning templates (Qwen3's) read
    return out


def completion_prompts(tokenizer: Tokenizer, request: CompletionRequest, vocab_size: int) -> list[list[int]]:
    """The prompts of a completion request (a string, token ids, or a batch of either)."""
    prompt = request.prompt
    if isinstance(prompt, str):
        batch: list[Any] = [prompt]
    elif not prompt:
        raise BadRequestError("`prompt` must not be empty", param="prompt")
    elif all(isinstance(p, int) for p in prompt):
        batch = [prompt]
    elif all(isinstance(p, str) for p in prompt) or all(isinstance(p, list) for p in prompt):
        batch = list(prompt)
    else:
        raise BadRequestError(
            "`prompt` must be a string, a list of token ids, or a list of strings or of token-id lists", param="prompt"
        )
    prompts = []
    for item in batch:
        ids = tokenizer.encode(item, add_special_tokens=request.add_special_tokens) if isinstance(item, str) else item
        if not ids:
            raise BadRequestError("`prompt` must not be empty", param="prompt")
        if min(ids) < 0 or max(ids) >= vocab_size:
            raise BadRequestError(f"prompt token ids must be in [0, {vocab_size})", param="prompt")
        prompts.append(ids)
    return prompts


def check_n(n: int) -> None:
    if not 1 <= n <= MAX_N:
        raise BadRequestError(f"`n` must be in [1, {MAX_N}], got {n}", param="n")


def chat_logprobs(request: ChatCompletionRequest) -> int | None:
    """Chat's ``logprobs`` (bool) + ``top_logprobs`` as the engine's top-k count."""
    top = request.top_logprobs
    if top is not None and not 0 <= top <= MAX_LOGPROBS:
        raise BadRequestError(f"`top_logprobs` must be in [0, {MAX_LOGPROBS}], got {top}", param="top_logprobs")
    if not request.logprobs:
        if top:
            raise BadRequestError("`top_logprobs` needs `logprobs` set to true", param="top_logprobs")
        return None
    return top or 0


def sampling_params(
    request: SamplingFields,
    *,
    max_tokens: int | None,
    logprobs: int | None,
    vocab_size: int,
    structured: StructuredOutput | None = None,
    defaults: SamplingDefaults = OPENAI_DEFAULTS,
) -> SamplingParams:
    """The engine's SamplingParams for ``request``, validated (400 naming the field); the fields
    it leaves unset come from ``defaults`` (see :mod:`gateway.config.sampling_defaults`)."""
    stop = [request.stop] if isinstance(request.stop, str) else list(request.stop or [])

    def pick(name: str) -> Any:
        value = getattr(request, name)
        return getattr(defaults, name) if value is None else value

    params = SamplingParams(
        max_tokens=max_tokens,
        temperature=pick("temperature"),
        top_p=pick("top_p"),
        top_k=pick("top_k"),
        min_p=pick("min_p"),
        seed=request.seed,
        presence_penalty=request.presence_penalty,
        frequency_penalty=request.frequency_penalty,
        repetition_penalty=pick("repetition_penalty"),
        logit_bias=request.logit_bias or None,
        logprobs=logprobs,
        min_tokens=request.min_tokens,
        ignore_eos=request.ignore_eos,
        stop_token_ids=list(request.stop_token_ids or []),
        stop=stop,
        include_stop_str_in_output=request.include_stop_str_in_output,
        skip_special_tokens=request.skip_special_tokens,
        structured=structured,
    )
    return params.validate(vocab_size)
