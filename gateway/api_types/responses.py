"""The OpenAI Responses API's request, response object and stream events, as msgspec structs.

Requests decode straight from the body (unknown fields ignored, as for chat, so a
sampling field chat takes is declared here too: :class:`~gateway.api_types.openai.SamplingExtras`,
passed to the engine as chat passes it, and ``n`` / ``top_logprobs``, refused unless they ask for
nothing, never dropped); input items, tools and output items stay plain JSON objects here and are
read and written by :mod:`gateway.responses_api.items`, which names the
field of anything it cannot take.
"""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import Meta, Struct, field

from agentgate.gateway.api_types.openai import CacheSalt, SamplingExtras


class TextConfig(Struct, kw_only=True, omit_defaults=True):
    """``text``: the reply's format (``{"type": "text"}``, ``json_object`` or ``json_schema``)."""

    format: dict[str, Any] = field(default_factory=lambda: {"type": "text"})
    verbosity: str | None = None


class ResponsesRequest(SamplingExtras, kw_only=True):
    """``POST /v1/responses`` (and the sampling fields chat takes: :class:`SamplingExtras`)."""

    model: str | None = None
    input: str | list[dict[str, Any]] | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    max_output_tokens: int | None = None
    temperature: Annotated[float, Meta(ge=0, le=2)] | None = None  # chat's ranges, and its 400
    top_p: Annotated[float, Meta(gt=0, le=1)] | None = None
    seed: int | None = None  # not in OpenAI's API; vLLM's extra, for reproducible replies
    metadata: dict[str, str] | None = None
    store: bool = True
    background: bool = False
    stream: bool = False
    user: str | None = None
    truncation: str | None = None
    reasoning: dict[str, Any] | None = None
    include: list[str] | None = None  # "reasoning.encrypted_content": reasoning items carry it sealed
    cache_salt: CacheSalt | None = None  # vLLM's extra: the prefix cache's salt
    prompt_cache_key: str | None = None  # names the agent program of a response that starts a chain
    # Recognised so that a value asking for something this API cannot give is a 400 naming it:
    # one output per response (chat's ``n``), no logprobs in the output text yet.
    n: int | None = None
    top_logprobs: int | None = None


class WebSocketCreate(ResponsesRequest, kw_only=True):
    """A ``response.create`` event of the WebSocket mode: a create body (``background`` refused,
    ``stream`` ignored: every turn streams), its ``type``, and ``generate`` (false: a warm-up)."""

    type: str
    generate: bool = True


class CompactRequest(Struct, kw_only=True):
    """``POST /v1/responses/compact``: the conversation to compact (``model`` required)."""

    model: str
    input: str | list[dict[str, Any]] | None = None
    previous_response_id: str | None = None
    instructions: str | None = None
    prompt_cache_key: str | None = None


class InputTokensDetails(Struct):
    cached_tokens: int = 0


class OutputTokensDetails(Struct):
    reasoning_tokens: int = 0


class ResponseUsage(Struct):
    input_tokens: int
    output_tokens: int
    total_tokens: int
    input_tokens_details: InputTokensDetails = field(default_factory=InputTokensDetails)
    output_tokens_details: OutputTokensDetails = field(default_factory=OutputTokensDetails)


class ResponseError(Struct):
    code: str
    message: str


class IncompleteDetails(Struct):
    reason: str  # "max_output_tokens"


class ResponseObject(Struct, kw_only=True):
    """A response (``object: "response"``), as returned, streamed and stored."""

    id: str
    created_at: int
    status: str  # queued | in_progress | completed | incomplete | failed | cancelled
    model: str
    output: list[dict[str, Any]] = field(default_factory=list)
    object: str = "response"
    background: bool = False
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    reasoning: dict[str, Any] = field(default_factory=lambda: {"effort": None, "summary": None})
    store: bool = True
    temperature: float | None = None
    text: TextConfig = field(default_factory=TextConfig)
    tool_choice: str | dict[str, Any] = "auto"
    tools: list[dict[str, Any]] = field(default_factory=list)
    top_p: float | None = None
    truncation: str = "disabled"
    usage: ResponseUsage | None = None
    user: str | None = None
    completed_at: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    top_logprobs: int = 0
    max_tool_calls: int | None = None
    service_tier: str = "default"
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None


class DeletedResponse(Struct):
    id: str
    object: str = "response.deleted"
    deleted: bool = True


class CompactedResponse(Struct, kw_only=True):
    """A compacted conversation: its user messages, then one ``compaction`` item."""

    id: str
    created_at: int
    output: list[dict[str, Any]]
    usage: ResponseUsage
    object: str = "response.compaction"


class InputItemList(Struct):
    data: list[dict[str, Any]]
    first_id: str | None
    last_id: str | None
    has_more: bool
    object: str = "list"


REQUEST_TYPES: tuple[type, ...] = (ResponsesRequest, CompactRequest)
RESPONSE_TYPES: tuple[type, ...] = (ResponseObject, DeletedResponse, InputItemList, CompactedResponse)
