"""OpenAI (and vLLM) request and response types, as msgspec structs.

Requests decode straight from the body bytes: unknown fields are ignored (the
OpenAI SDK sends new ones all the time), a wrong type is a 400 naming the
field (:func:`decode_body`). Responses and SSE chunks encode with msgspec too.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, TypeVar

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType, field

from agentgate.engine.sampling_params import MAX_LOGPROBS
from agentgate.gateway.errors import BadRequestError

T = TypeVar("T")
MAX_N = 128  # choices per request
MAX_CACHE_SALT = 256  # characters of a request's cache_salt
# vLLM's per-request prefix-cache salt: requests share cached prefixes only with requests of the same salt
CacheSalt = Annotated[str, Meta(min_length=1, max_length=MAX_CACHE_SALT)]

# -- requests ---------------------------------------------------------------------


class StreamOptions(Struct, kw_only=True):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class ContentPart(Struct, kw_only=True):
    type: str
    text: str | None = None


Role = Literal["system", "developer", "user", "assistant", "tool", "function"]


class ChatMessage(Struct, kw_only=True, omit_defaults=True):
    role: Role
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None  # the same as reasoning_content (vLLM's name): the template gets reasoning_content


class SamplingExtras(Struct, kw_only=True):
    """The sampling fields chat, completions and Responses all take, with the same ranges (a value
    out of range is a 400 naming the field): OpenAI's penalties, stop and logit_bias, then vLLM's
    extras. Responses has no such fields in OpenAI's API; clients send them through ``extra_body``."""

    stop: str | list[str] | None = None
    presence_penalty: Annotated[float, Meta(ge=-2, le=2)] = 0.0
    frequency_penalty: Annotated[float, Meta(ge=-2, le=2)] = 0.0
    logit_bias: dict[int, Annotated[float, Meta(ge=-100, le=100)]] | None = None
    # vLLM extras
    top_k: Annotated[int, Meta(ge=-1)] | None = None
    min_p: Annotated[float, Meta(ge=0, le=1)] | None = None
    repetition_penalty: Annotated[float, Meta(gt=0, le=2)] | None = None
    ignore_eos: bool = False
    min_tokens: Annotated[int, Meta(ge=0)] = 0
    stop_token_ids: list[int] | None = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False


class SamplingFields(SamplingExtras, kw_only=True):
    """Fields common to chat and completions: OpenAI's, then vLLM's extras (and those of
    :class:`SamplingExtras`)."""

    model: str | None = None
    n: Annotated[int, Meta(ge=1, le=MAX_N)] = 1
    max_tokens: Annotated[int, Meta(ge=1)] | None = None
    temperature: Annotated[float, Meta(ge=0, le=2)] | None = None
    top_p: Annotated[float, Meta(gt=0, le=1)] | None = None
    seed: int | None = None  # 64 bits, checked by the engine (msgspec bounds stop at int64)
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    cache_salt: CacheSalt | None = None  # vLLM's extra


class ChatCompletionRequest(SamplingFields, kw_only=True):
    messages: Annotated[list[ChatMessage], Meta(min_length=1)]
    max_completion_tokens: Annotated[int, Meta(ge=1)] | None = None
    logprobs: bool = False
    top_logprobs: Annotated[int, Meta(ge=0, le=MAX_LOGPROBS)] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    prompt_cache_key: str | None = None  # names the agent program the request is a turn of
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None
    add_generation_prompt: bool = True
    chat_template_kwargs: dict[str, Any] | None = None
    thinking_token_budget: int | None = None  # vLLM's: thinking tokens at most (gateway.reasoning.requests)
    reasoning_effort: str | None = None  # OpenAI's: none, minimal, low, medium, high


PromptInput = str | list[str | int | list[int]]


class CompletionRequest(SamplingFields, kw_only=True):
    prompt: PromptInput
    logprobs: Annotated[int, Meta(ge=0, le=MAX_LOGPROBS)] | None = None
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None
    add_special_tokens: bool = True
    # Chat's reasoning fields, recognised so that they are refused (a 400 naming each: a raw prompt has no
    # chat template and no reasoning parser reads it; docs/reasoning.md), never silently ignored.
    thinking_token_budget: int | None = None
    reasoning_effort: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None


COMPLETION_REASONING_FIELDS = ("thinking_token_budget", "reasoning_effort", "chat_template_kwargs")


class TokenizeRequest(Struct, kw_only=True):
    """vLLM's /tokenize: a prompt, or chat messages rendered with the template."""

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool | None = None
    add_generation_prompt: bool = True
    tools: list[dict[str, Any]] | None = None
    return_token_strs: bool = False


class DetokenizeRequest(Struct, kw_only=True):
    model: str | None = None
    tokens: list[int]


class LoadLoraAdapterRequest(Struct, kw_only=True):
    """POST /v1/load_lora_adapter (vLLM's body)."""

    lora_name: str
    lora_path: str


class UnloadLoraAdapterRequest(Struct, kw_only=True):
    """POST /v1/unload_lora_adapter (vLLM's body)."""

    lora_name: str
    lora_int_id: int | None = None  # vLLM's; unused


class AbortRequestsRequest(Struct, kw_only=True):
    """What to abort: request ids, a session's requests, a key's requests (any together; none,
    or an empty list alone, aborts every request)."""

    request_ids: list[str] = field(default_factory=list)
    session_id: str | None = None
    api_key: str | None = None


REQUEST_TYPES: tuple[type, ...] = (
    ChatCompletionRequest,
    CompletionRequest,
    TokenizeRequest,
    DetokenizeRequest,
    AbortRequestsRequest,
)

# -- responses --------------------------------------------------------------------


class PromptTokensDetails(Struct):
    cached_tokens: int = 0  # prompt tokens the engine's prefix cache served


class CompletionTokensDetails(Struct):
    reasoning_tokens: int = 0  # output tokens of the thinking block, its tags included


class Usage(Struct):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails = field(default_factory=PromptTokensDetails)
    # Sent for a reasoning model's replies only (UNSET: left out of the body).
    completion_tokens_details: CompletionTokensDetails | UnsetType = UNSET

    @property
    def reasoning_tokens(self) -> int:
        details = self.completion_tokens_details
        return details.reasoning_tokens if isinstance(details, CompletionTokensDetails) else 0

    @property
    def cached_tokens(self) -> int:
        return self.prompt_tokens_details.cached_tokens


class TopLogprob(Struct):
    token: str
    logprob: float
    bytes: list[int] | None


class ChatTokenLogprob(Struct):
    token: str
    logprob: float
    bytes: list[int] | None
    top_logprobs: list[TopLogprob]


class ChatLogprobs(Struct):
    content: list[ChatTokenLogprob] | None
    refusal: None = None


class CompletionLogprobs(Struct):
    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class AssistantMessage(Struct, omit_defaults=True):
    """An assistant's message: a chat completion's, and a reply as a session records it whatever
    the API (``gateway.replies.assistant_message``), what a program's next turn recognises."""

    role: str
    content: str | None
    tool_calls: list[dict[str, Any]] | None = None
    reasoning: str | None = None  # a reasoning model's thinking (vLLM's current name)
    reasoning_content: str | None = None  # the same text (llama.cpp's and DeepSeek's name)


class ChatChoice(Struct):
    index: int
    message: AssistantMessage
    logprobs: ChatLogprobs | None
    finish_reason: str | None


class ChatCompletion(Struct):
    id: str
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    object: str = "chat.completion"
    system_fingerprint: str | None = None


class Delta(Struct, omit_defaults=True):
    role: str | None = None
    content: str | None = None
    reasoning: str | None = None
    reasoning_content: str | None = None  # the same text as ``reasoning``
    tool_calls: list[dict[str, Any]] | None = None  # OpenAI's deltas: index, then id/type/name, then arguments


class ChatChunkChoice(Struct):
    index: int
    delta: Delta
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None


class ChatCompletionChunk(Struct):
    id: str
    created: int
    model: str
    choices: list[ChatChunkChoice]
    object: str = "chat.completion.chunk"
    usage: Usage | None = None


class CompletionChoice(Struct):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None


class Completion(Struct):
    """A text completion, or one chunk of a streamed one (``object`` says which)."""

    id: str
    created: int
    model: str
    choices: list[CompletionChoice]
    object: str = "text_completion"
    usage: Usage | None = None


class ModelCard(Struct):
    id: str
    created: int
    max_model_len: int
    root: str
    object: str = "model"
    owned_by: str = "agentgate"
    parent: str | None = None


class ModelList(Struct):
    data: list[ModelCard]
    object: str = "list"


class TokenizeResponse(Struct):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None


class DetokenizeResponse(Struct):
    prompt: str


class AbortResponse(Struct, omit_defaults=True):
    aborted: list[str]
    all: bool
    warning: str | None = None  # set when only this replica acted: the cluster (Redis) could not be told


class PauseResponse(Struct, omit_defaults=True):
    is_paused: bool
    mode: Literal["abort", "wait", "keep"] | None = None
    warning: str | None = None  # set when only this replica acted: the cluster (Redis) could not be told


# -- decoding ---------------------------------------------------------------------

_decoders: dict[type, msgspec.json.Decoder] = {}
_AT_PATH = re.compile(r" - at `(?:key` in `)?\$\.?([^`]*)`$")
_MISSING = re.compile(r"Object missing required field `([^`]+)`")


def decode_body(body: bytes, kind: type[T]) -> T:
    """Decode a JSON body into ``kind``; BadRequestError naming the field on a bad type."""
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.json.Decoder(kind)
    if not body.strip():
        raise BadRequestError("the request body is empty; expected a JSON object", code="invalid_json")
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        message, param = _explain(str(exc))
        raise BadRequestError(message, param=param, code="invalid_type") from None
    except msgspec.DecodeError as exc:
        raise BadRequestError(f"malformed JSON: {exc}", code="invalid_json") from None
    except RecursionError:
        param = _too_deep_field(body, kind)
        raise BadRequestError(f"`{param or 'the request body'}` nests too deep", param=param, code="too_deep") from None


# 32 openings in a row (arrays, objects, their keys between): where a too-deep value starts.
_DEEP_RUN = re.compile(rb'(?:[\[{]\s*(?:"(?:[^"\\]|\\.)*"\s*:\s*)?){32}')


def _too_deep_field(body: bytes, kind: type) -> str | None:
    """The field of ``kind`` whose value nests too deep for the decoder: the last field name
    before the first long run of openings (found by a regex, in C: no Python loop over the body)."""
    match = _DEEP_RUN.search(body)
    if match is None or not hasattr(kind, "__struct_fields__"):
        return None
    best, at = None, -1
    for field_info in msgspec.structs.fields(kind):
        i = body.rfind(b'"%s"' % field_info.encode_name.encode(), 0, match.start())
        if i > at:
            best, at = field_info.encode_name, i
    return best


def _explain(message: str) -> tuple[str, str | None]:
    """(message, param) of a msgspec validation error: "Expected `int`, got `str` - at `$.n`"."""
    match = _AT_PATH.search(message)
    path = match.group(1) if match else ""
    what = message[: match.start()] if match else message
    missing = _MISSING.match(what)
    if missing:
        param = f"{path}.{missing.group(1)}" if path else missing.group(1)
        return f"missing required field `{param}`", param
    if not path:
        return f"invalid request body: {what}", None
    return f"invalid value for `{path}`: {what}", path


_encoder = msgspec.json.Encoder()


def encode(value: Any) -> bytes:
    return _encoder.encode(value)
