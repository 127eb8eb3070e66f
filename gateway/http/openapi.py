"""The OpenAPI document of the gateway, built once from the same msgspec
structs that decode requests (msgspec writes their JSON schemas, bounds and
enums included), so the document cannot drift from what is validated.

Every route the app registers is an operation here
(``tests/gateway/test_gateway_routes.py`` checks it): its security (the API key,
the admin key, or none), its headers (``X-Request-Id`` both ways,
``X-Session-Id`` on generation routes, ``Retry-After`` on 429) and its error
statuses. Streaming answers are ``text/event-stream``.
"""

from __future__ import annotations

import functools
from typing import Any, Literal, NamedTuple

import msgspec

from agentgate.gateway import package_version
from agentgate.gateway.api_types import anthropic as a
from agentgate.gateway.api_types import openai as s
from agentgate.gateway.api_types import responses as r
from agentgate.gateway.errors import ErrorBody

Access = Literal["open", "user", "admin"]


class Operation(NamedTuple):
    method: str
    path: str
    summary: str
    tag: str
    access: Access = "user"
    request: type | None = None
    response: type | None = None
    streams: type | None = None  # the chunk type of its SSE events
    params: tuple[dict[str, Any], ...] = ()
    media: str = "application/json"  # of a 200 without a response type
    errors: tuple[int, ...] = ()  # beyond those of its access


def _path(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}


def _query(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema}


_MODE = _query("mode", {"type": "string", "enum": ["abort", "wait", "keep"], "default": "abort"})
_PAGE = (
    _query("limit", {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}),
    _query("offset", {"type": "integer", "minimum": 0, "maximum": 10**9, "default": 0}),
)
_ID = {"type": "string", "pattern": "^[!-~]{1,128}$"}
_REQUEST_ID = {
    "name": "X-Request-Id",
    "in": "header",
    "required": False,
    "schema": _ID,
    "description": "the request's id (else one is made); echoed in the response",
}
_SESSION_ID = {
    "name": "X-Session-Id",
    "in": "header",
    "required": False,
    "schema": _ID,
    "description": "the session the request belongs to (created on first use)",
}
_GENERATION = (_SESSION_ID,)
_GEN_ERRORS = (404, 409, 413, 429, 503)
_RESPONSE_ID = _path("response_id")

# Formatted by hand: a table of routes, one per entry.
OPERATIONS = (
    Operation("post", "/v1/chat/completions", "Create a chat completion (SSE when stream is true)", "openai",
              request=s.ChatCompletionRequest, response=s.ChatCompletion, streams=s.ChatCompletionChunk,
              params=_GENERATION, errors=_GEN_ERRORS),
    Operation("post", "/v1/completions", "Create a text completion (SSE when stream is true)", "openai",
              request=s.CompletionRequest, response=s.Completion, streams=s.Completion, params=_GENERATION,
              errors=_GEN_ERRORS),
    Operation("get", "/v1/models", "List the served models", "openai", response=s.ModelList),
    Operation("get", "/v1/models/{model_id}", "One served model", "openai", response=s.ModelCard,
              params=(_path("model_id"),), errors=(404,)),
    Operation("post", "/v1/responses", "Create a response (typed SSE events when stream is true)", "responses",
              request=r.ResponsesRequest, response=r.ResponseObject, params=_GENERATION, errors=_GEN_ERRORS),
    Operation("post", "/v1/responses/compact", "Compact a conversation into a new input window", "responses",
              request=r.CompactRequest, response=r.CompactedResponse, params=_GENERATION, errors=_GEN_ERRORS),
    Operation("get", "/v1/responses/{response_id}", "A stored response", "responses", response=r.ResponseObject,
              params=(_RESPONSE_ID,), errors=(404, 503)),
    Operation("delete", "/v1/responses/{response_id}", "Delete a stored response", "responses",
              response=r.DeletedResponse, params=(_RESPONSE_ID,), errors=(404, 503)),
    Operation("post", "/v1/responses/{response_id}/cancel", "Cancel a background response", "responses",
              response=r.ResponseObject, params=(_RESPONSE_ID,), errors=(404, 503)),
    Operation("get", "/v1/responses/{response_id}/input_items", "A stored response's input items", "responses",
              response=r.InputItemList, params=(_RESPONSE_ID,), errors=(404, 503)),
    Operation("post", "/v1/messages", "Create a message, Anthropic's API (SSE events when stream is true)",
              "anthropic", request=a.MessagesRequest, response=a.Message, params=_GENERATION, errors=_GEN_ERRORS),
    Operation("post", "/v1/messages/count_tokens", "Count a message request's prompt tokens, Anthropic's API",
              "anthropic", request=a.CountTokensRequest, response=a.TokenCount, errors=(404, 413)),
    Operation("post", "/tokenize", "Tokenize a prompt or chat messages", "tokenize", request=s.TokenizeRequest,
              response=s.TokenizeResponse, errors=(404, 413)),
    Operation("post", "/detokenize", "Turn token ids back into text", "tokenize", request=s.DetokenizeRequest,
              response=s.DetokenizeResponse, errors=(404, 413)),
    Operation("get", "/v1/sessions", "List sessions (admin)", "sessions", "admin", params=_PAGE, errors=(503,)),
    Operation("get", "/v1/sessions/{session_id}", "A session: its messages, usage, engine", "sessions",
              params=(_path("session_id"),), errors=(404, 503)),
    Operation("delete", "/v1/sessions/{session_id}", "Delete a session, aborting its requests", "sessions",
              params=(_path("session_id"),), errors=(404, 503)),
    Operation("get", "/v1/requests", "Requests in flight on every replica (admin)", "operations", "admin",
              errors=(503,)),
    Operation("get", "/v1/replicas", "The live replicas (admin)", "operations", "admin", errors=(503,)),
    Operation("get", "/v1/rate_limits", "The caller's rate limits and what is left", "operations", errors=(503,)),
    Operation("post", "/pause", "Pause every engine (admin)", "operations", "admin", response=s.PauseResponse,
              params=(_MODE,), errors=(503,)),
    Operation("post", "/resume", "Resume every engine (admin)", "operations", "admin", response=s.PauseResponse,
              errors=(503,)),
    Operation("get", "/is_paused", "Whether the engines are paused, and how (admin)", "operations", "admin",
              response=s.PauseResponse, errors=(503,)),
    Operation("post", "/abort_requests", "Abort by ids, session or key; nothing named aborts all (admin)",
              "operations", "admin", request=s.AbortRequestsRequest, response=s.AbortResponse, errors=(413, 503)),
    Operation("delete", "/v1/requests/{request_id}", "Abort one request (admin)", "operations", "admin",
              response=s.AbortResponse, params=(_path("request_id"),), errors=(404, 503)),
    Operation("post", "/v1/load_lora_adapter", "Load a LoRA adapter on every engine (admin)", "operations", "admin",
              request=s.LoadLoraAdapterRequest, media="text/plain", errors=(413, 503)),
    Operation("post", "/v1/unload_lora_adapter", "Unload a LoRA adapter; its running requests finish (admin)",
              "operations", "admin", request=s.UnloadLoraAdapterRequest, media="text/plain", errors=(404, 413, 503)),
    Operation("get", "/dashboard/stats", "The operator dashboard's numbers (admin)", "operations", "admin"),
    Operation("get", "/dashboard", "The operator dashboard (a page)", "pages", "open", media="text/html"),
    Operation("get", "/", "The playground (a page)", "pages", "open", media="text/html"),
    Operation("get", "/playground", "The playground (a page)", "pages", "open", media="text/html"),
    Operation("get", "/static/{path}", "The pages' scripts, styles and vendored libraries", "pages", "open",
              params=(_path("path"),), media="application/octet-stream", errors=(404,)),
    Operation("get", "/health", "ok; degraded (see --health-degraded-status); 503 when no engine serves, "
              "or fewer than min_engines do (a readiness probe's bar)", "operations", "open",
              params=(_query("min_engines", {"type": "integer", "minimum": 0, "maximum": 10**6, "default": 0}),),
              errors=(400, 503)),
    Operation("get", "/metrics", "Prometheus metrics", "operations", "open", media="text/plain"),
    Operation("get", "/version", "The server's version", "operations", "open"),
    Operation("get", "/openapi.json", "This document", "operations", "open"),
)  # fmt: skip

_WHY = {
    400: "Malformed JSON, a wrong type or value, or a context overflow (the error names the parameter)",
    401: "Missing or invalid API key",
    403: "The route needs the admin key",
    404: "Unknown model, session or request",
    408: "The request's headers or body came too slowly",
    409: "The X-Request-Id is in flight already",
    413: "Request body too large",
    429: "Too many generations waiting, or the key's rate limit (see Retry-After)",
    503: "No engine serves, Redis is unreachable, or too many connections",
}
_SECURITY = {"open": [], "user": [{"bearer": []}, {}], "admin": [{"bearer": []}]}


def _ref(kind: type) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{kind.__name__}"}


def _operation(op: Operation) -> dict[str, Any]:
    error = {"content": {"application/json": {"schema": _ref(ErrorBody)}}}
    if op.response is not None:
        content: dict[str, Any] = {"application/json": {"schema": _ref(op.response)}}
    elif op.media == "application/json":
        content = {"application/json": {"schema": {"type": "object"}}}
    else:
        content = {op.media: {"schema": {"type": "string"}}}
    if op.streams is not None:
        content["text/event-stream"] = {
            "schema": {
                "type": "string",
                "description": f"`data: <{op.streams.__name__} JSON>` events, then `data: [DONE]`",
            },
            "x-sse-event": _ref(op.streams),
        }
    request_id = {"X-Request-Id": {"schema": {"type": "string"}, "description": "the request's id"}}
    responses: dict[str, Any] = {"200": {"description": "OK", "headers": request_id, "content": content}}
    codes = {400, 408, *op.errors}
    codes |= {401, 403} if op.access == "admin" else {401} if op.access == "user" else set()
    for code in sorted(codes):
        responses[str(code)] = {"description": _WHY[code], **error}
        if code == 429:
            responses["429"]["headers"] = {"Retry-After": {"schema": {"type": "integer"}, "description": "seconds"}}
    path_words = op.path.strip("/").replace("/", "_").replace("{", "").replace("}", "")
    entry: dict[str, Any] = {
        "summary": op.summary,
        "tags": [op.tag],
        "operationId": f"{op.method}_{path_words or 'root'}",
        "security": _SECURITY[op.access],
        "parameters": [*op.params, _REQUEST_ID],
        "responses": responses,
    }
    if op.request is not None:
        entry["requestBody"] = {"required": True, "content": {"application/json": {"schema": _ref(op.request)}}}
    return entry


def build_document(version: str = "0.1.0") -> dict[str, Any]:
    types = {t for op in OPERATIONS for t in (op.request, op.response, op.streams) if t is not None} | {ErrorBody}
    _, components = msgspec.json.schema_components(
        sorted(types, key=lambda t: t.__name__), ref_template="#/components/schemas/{name}"
    )
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        paths.setdefault(op.path, {})[op.method] = _operation(op)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "agentgate",
            "version": version,
            "description": "OpenAI-compatible gateway for agent traffic",
        },
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "an API key (--api-key), or the admin key for admin routes",
                }
            },
        },
    }


@functools.cache
def openapi_json() -> bytes:
    return msgspec.json.encode(build_document(package_version()))
