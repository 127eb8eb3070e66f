"""Talking to a live gateway in tests: request bodies, SSE reading and
checking, ``/metrics`` (read with the SDK's Prometheus parser), waiting."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import httpx

from agentgate.agents import prometheus


def chat_body(
    max_tokens: int = 16, stream: bool = True, *, messages: list[dict] | str = "Hello there", **extra
) -> dict:
    """A chat completion request that runs ``max_tokens`` tokens (``ignore_eos``)."""
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    return {"messages": messages, "max_tokens": max_tokens, "stream": stream, "ignore_eos": True, **extra}


# -- SSE -----------------------------------------------------------------------------


def parse_sse(raw: str) -> list[str]:
    """The data payloads of an SSE body, checking the framing: every event is
    `data: ...` lines ended by a blank line (comments allowed)."""
    assert raw.endswith("\r\n\r\n") or raw.endswith("\n\n"), f"the stream does not end an event: {raw[-80:]!r}"
    payloads = []
    for event in raw.replace("\r\n", "\n").split("\n\n"):
        if not event:
            continue
        data = []
        for line in event.split("\n"):
            if line.startswith(":"):
                continue  # keep-alive comment
            assert line.startswith("data: "), f"not an SSE data line: {line!r}"
            data.append(line[len("data: ") :])
        if data:
            payloads.append("\n".join(data))
    return payloads


def check_chat_stream(payloads: list[str], n: int = 1, usage: bool = False) -> dict:
    """Assert OpenAI's chat stream shape; return {index: text}, finish reasons and usage."""
    assert payloads[-1] == "[DONE]", payloads[-3:]
    chunks = [json.loads(p) for p in payloads[:-1]]
    texts: dict[int, str] = {}
    finish: dict[int, str] = {}
    seen_role: set[int] = set()
    usage_chunk = None
    for chunk in chunks:
        assert "error" not in chunk, chunk
        assert chunk["object"] == "chat.completion.chunk"
        assert chunk["id"].startswith("chatcmpl-")
        if not chunk["choices"]:
            assert usage and chunk["usage"] is not None, chunk
            usage_chunk = chunk["usage"]
            continue
        for choice in chunk["choices"]:
            i = choice["index"]
            assert i not in finish, f"choice {i} has a chunk after its finish chunk"
            if i not in seen_role:
                assert choice["delta"].get("role") == "assistant", f"the first chunk of choice {i} has no role"
                seen_role.add(i)
            texts[i] = texts.get(i, "") + (choice["delta"].get("content") or "")
            if choice["finish_reason"] is not None:
                finish[i] = choice["finish_reason"]
    assert sorted(finish) == list(range(n)), f"finish chunks for {sorted(finish)}, expected {n}"
    if usage:
        assert usage_chunk is not None and chunks[-1]["usage"] == usage_chunk, "the usage chunk must come last"
    return {"texts": texts, "finish": finish, "usage": usage_chunk}


class StreamRecorder:
    """Reads one SSE response, keeping the raw text and when each event came."""

    def __init__(self) -> None:
        self.raw = ""
        self.times: list[float] = []
        self.status: int | None = None
        self.headers: httpx.Headers | None = None

    @property
    def events(self) -> int:
        return len(self.times)

    def payloads(self) -> list[str]:
        return parse_sse(self.raw)

    async def run(self, client: httpx.AsyncClient, url: str, body: dict, headers: dict, stop_after: int | None = None):
        async with client.stream("POST", url, json=body, headers=headers) as response:
            self.status, self.headers = response.status_code, response.headers
            if response.status_code != 200:
                self.raw = (await response.aread()).decode()
                return self
            async for text in response.aiter_text():
                self.raw += text
                now = time.monotonic()
                while len(self.times) < self.raw.count("\r\n\r\n"):
                    self.times.append(now)
                if stop_after is not None and self.events >= stop_after:
                    return self  # leaving the block closes the connection mid-stream
        return self


# -- metrics and waiting ----------------------------------------------------------------


def metrics(server: str | httpx.Client) -> dict[str, float]:
    """Every sample of /metrics (of a base URL, or through a client) as name{labels} -> value."""
    if isinstance(server, httpx.Client):
        return prometheus.parse(server.get("/metrics").text)
    return prometheus.parse(httpx.get(f"{server}/metrics", timeout=10).text)


def first_tokens_by_engine(base_url: str) -> dict[str, float]:
    """The gateway's requests that got a first token, per engine address (its per-engine TTFT counts)."""
    return {
        prometheus.split(key)[1]["engine"]: value
        for key, value in metrics(base_url).items()
        if key.startswith("agentgate_engine_time_to_first_token_seconds_count{")
    }


def engine_idle(base_url: str) -> bool:
    m = metrics(base_url)
    return (
        m["agentgate_kv_cache_usage_ratio"] == 0.0
        and m["agentgate_requests_running"] == 0
        and m["agentgate_requests_waiting"] == 0
        and m["agentgate_gateway_requests_in_flight"] == 0
    )


def wait_for(
    predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.05, message: str = "condition"
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {message}")
