"""A recording HTTP proxy for the harness tests: every request an agent CLI sends passes
through to the server unchanged (streams too), and is kept (method, path, the headers that
shape the request, the JSON body) with the status the server answered, so a test can read
what the CLI asked and commit it as a fixture.

    with RecordingProxy("http://127.0.0.1:8000") as proxy:
        ... point the CLI at proxy.url ...
    proxy.exchanges  # [{"method", "path", "headers", "body", "status"}, ...]
"""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from agentgate.loadtests.server import free_port

KEPT_HEADERS = ("anthropic-beta", "anthropic-version", "content-type", "openai-beta", "accept")
HOP_HEADERS = frozenset({"content-length", "transfer-encoding", "connection", "content-encoding"})


class RecordingProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.exchanges: list[dict[str, Any]] = []
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        app = Starlette(routes=[Route("/{path:path}", self._forward, methods=["GET", "POST", "DELETE", "HEAD"])])
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(300.0, connect=10.0))

    async def _forward(self, request: Request) -> StreamingResponse:
        body = await request.body()
        record: dict[str, Any] = {
            "method": request.method,
            "path": request.url.path,
            "query": request.url.query,
            "headers": {k: v for k, v in request.headers.items() if k in KEPT_HEADERS},
        }
        try:
            record["body"] = json.loads(body) if body else None
        except ValueError:
            record["body"] = body.decode(errors="replace")
        self.exchanges.append(record)
        headers = {k: v for k, v in request.headers.items() if k not in ("host", "content-length")}
        url = self.upstream + request.url.path + (f"?{request.url.query}" if request.url.query else "")
        upstream = await self._client.send(
            self._client.build_request(request.method, url, headers=headers, content=body), stream=True
        )
        record["status"] = upstream.status_code
        record["response_headers"] = dict(upstream.headers)

        async def chunks():
            try:
                async for chunk in upstream.aiter_raw():
                    yield chunk
            finally:
                await upstream.aclose()

        out = {k: v for k, v in upstream.headers.items() if k not in HOP_HEADERS}
        return StreamingResponse(chunks(), status_code=upstream.status_code, headers=out)

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        for _ in range(500):
            if self._server.started:
                return self
            threading.Event().wait(0.01)
        raise RuntimeError("the recording proxy did not start")

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(10)
