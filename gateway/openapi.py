"""The OpenAPI document of the gateway, built once from the request and
response structs (msgspec writes their JSON schemas)."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import msgspec

from agentgate.gateway import package_version
from agentgate.gateway import schemas as s
from agentgate.gateway.errors import ErrorBody


class Operation(NamedTuple):
    method: str
    path: str
    summary: str
    tag: str
    request: type | None = None
    response: type | None = None
    streams: bool = False
    params: tuple[dict[str, Any], ...] = ()


_REQUEST_ID = {"name": "request_id", "in": "path", "required": True, "schema": {"type": "string"}}
_MODE = {
    "name": "mode",
    "in": "query",
    "required": False,
    "schema": {"type": "string", "enum": ["abort", "wait", "keep"], "default": "abort"},
}

OPERATIONS = (
    Operation("post", "/v1/chat/completions", "Create a chat completion (SSE when stream is true)", "openai",
              s.ChatCompletionRequest, s.ChatCompletion, streams=True),
    Operation("post", "/v1/completions", "Create a text completion (SSE when stream is true)", "openai",
              s.CompletionRequest, s.Completion, streams=True),
    Operation("get", "/v1/models", "List the served models", "openai", None, s.ModelList),
    Operation("post", "/tokenize", "Tokenize a prompt or chat messages", "tokenize", s.TokenizeRequest,
              s.TokenizeResponse),
    Operation("post", "/detokenize", "Turn token ids back into text", "tokenize", s.DetokenizeRequest,
              s.DetokenizeResponse),
    Operation("post", "/pause", "Pause every engine (admin)", "operations", None, s.PauseResponse, params=(_MODE,)),
    Operation("post", "/resume", "Resume every engine (admin)", "operations", None, s.PauseResponse),
    Operation("get", "/is_paused", "Whether the engines are paused (admin)", "operations", None, s.PauseResponse),
    Operation("post", "/abort_requests", "Abort requests by id; an empty list aborts all (admin)", "operations",
              s.AbortRequestsRequest, s.AbortResponse),
    Operation("delete", "/v1/requests/{request_id}", "Abort one request (admin)", "operations", None,
              s.AbortResponse, params=(_REQUEST_ID,)),
    Operation("get", "/dashboard/stats", "The operator dashboard's numbers (admin)", "operations"),
    Operation("get", "/health", "200 when every engine answers, else 503", "operations"),
    Operation("get", "/metrics", "Prometheus metrics", "operations"),
    Operation("get", "/version", "The server's version", "operations"),
    Operation("get", "/openapi.json", "This document", "operations"),
)  # fmt: skip

_ERRORS = {
    "400": "Malformed JSON, a wrong type or value, or a context overflow",
    "401": "Missing or invalid API key",
    "403": "The route needs the admin key",
    "404": "Unknown model or request",
    "413": "Request body too large",
    "429": "Too many requests waiting (see Retry-After)",
    "503": "An engine is dead",
}


def _ref(kind: type) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{kind.__name__}"}


def build_document(version: str = "0.1.0") -> dict[str, Any]:
    types = {t for op in OPERATIONS for t in (op.request, op.response) if t is not None} | {ErrorBody}
    _, components = msgspec.json.schema_components(
        sorted(types, key=lambda t: t.__name__), ref_template="#/components/schemas/{name}"
    )
    paths: dict[str, dict[str, Any]] = {}
    error_response = {"content": {"application/json": {"schema": _ref(ErrorBody)}}}
    for op in OPERATIONS:
        content: dict[str, Any] = {"application/json": {"schema": _ref(op.response)} if op.response else {}}
        if op.streams:
            content["text/event-stream"] = {
                "schema": {"type": "string", "description": "data: <chunk JSON> events, then data: [DONE]"}
            }
        entry: dict[str, Any] = {
            "summary": op.summary,
            "tags": [op.tag],
            "operationId": f"{op.method}_{op.path.strip('/').replace('/', '_').replace('{', '').replace('}', '')}",
            "responses": {"200": {"description": "OK", "content": content}}
            | {code: {"description": why, **error_response} for code, why in _ERRORS.items()},
        }
        if op.params:
            entry["parameters"] = list(op.params)
        if op.request is not None:
            entry["requestBody"] = {"required": True, "content": {"application/json": {"schema": _ref(op.request)}}}
        paths.setdefault(op.path, {})[op.method] = entry
    return {
        "openapi": "3.1.0",
        "info": {"title": "agentgate", "version": version,
                 "description": "OpenAI-compatible gateway for agent traffic"},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }  # fmt: skip


@functools.cache
def openapi_json() -> bytes:
    return msgspec.json.encode(build_document(package_version()))
