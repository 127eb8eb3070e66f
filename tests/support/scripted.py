"""A scripted OpenAI server for the SDK's unit tests: an ``httpx.MockTransport``
answering chat completions from a list of replies (streamed when asked), and
recording the requests."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx


def sse_body(chunks: list[dict[str, Any]], done: bool = True) -> bytes:
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\r\n\r\n" for c in chunks)
    return body + (b"data: [DONE]\r\n\r\n" if done else b"")


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, index: int = 0, **extra: Any) -> dict:
    choices = [] if delta is None else [{"index": index, "delta": delta, "finish_reason": finish}]
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": choices,
        **extra,
    }


def tool_call_chunks(calls: list[tuple[str, str, dict[str, Any]]], content: str = "") -> list[dict[str, Any]]:
    """The stream of an assistant turn that says ``content`` then calls ``calls`` [(id, name, args)],
    arguments in three fragments each, finishing with tool_calls."""
    out = [chunk({"role": "assistant", "content": ""})]
    if content:
        out += [chunk({"content": content[: len(content) // 2]}), chunk({"content": content[len(content) // 2 :]})]
    for i, (call_id, name, args) in enumerate(calls):
        text = json.dumps(args)
        out.append(
            chunk(
                {
                    "tool_calls": [
                        {"index": i, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
                    ]
                }
            )
        )
        third = max(1, len(text) // 3)
        for part in (text[:third], text[third : 2 * third], text[2 * third :]):
            out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": part}}]}))
    out.append(chunk({}, finish="tool_calls" if calls else "stop"))
    out.append(chunk(None, usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}))
    return out


def completion_json(content: str | None, calls: list[tuple[str, str, dict[str, Any]]] = ()) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for i, n, a in calls
        ]
    return {
        "id": "chatcmpl-x",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


@dataclass
class ScriptedServer:
    """An httpx.MockTransport answering chat completions from a script of replies, recording requests."""

    replies: list[Callable[[dict[str, Any]], httpx.Response]] = field(default_factory=list)
    requests: list[httpx.Request] = field(default_factory=list)

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests]

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if not self.replies:
            return httpx.Response(500, json={"error": {"message": "script exhausted", "type": "test"}})
        return self.replies.pop(0)(json.loads(request.content) if request.content else {})

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handler)


def reply(
    content: str | None,
    calls: list[tuple[str, str, dict[str, Any]]] = (),
    status: int = 200,
    headers: dict[str, str] | None = None,
):
    """A scripted answer: streamed when the request asks for a stream, else JSON."""

    def answer(body: dict[str, Any]) -> httpx.Response:
        if status != 200:
            return httpx.Response(status, headers=headers, json={"error": {"message": "scripted", "type": "t"}})
        if body.get("stream"):
            return httpx.Response(
                200,
                headers={"content-type": "text/event-stream", **(headers or {})},
                content=sse_body(tool_call_chunks(list(calls), content or "")),
            )
        return httpx.Response(200, headers=headers, json=completion_json(content, list(calls)))

    return answer
