"""The two transports (httpx async and sync) that drive the sans-I/O core.

Each one: sends a :class:`~agents._requests.Req` with retries (429/503 answers and
failures to connect, waiting as :class:`~agents._retries.RetryPolicy` says),
turns error answers into :mod:`agents.errors`, drives generator-style API
calls (``_run``), and opens streaming responses (``_open``)."""

from __future__ import annotations

import copy
import dataclasses
import functools
import os
import ssl
import time
from typing import Any

import anyio
import httpx

from agentgate.agents._requests import USER_AGENT, Op, Req, Resp, error_body, normalize_url
from agentgate.agents._retries import RetryPolicy
from agentgate.agents.errors import AgentGateError, APIConnectionError, APITimeoutError, status_error

TimeoutLike = float | httpx.Timeout | None


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    """One verifying SSL context for every client: building one loads the CA bundle (~60 ms of CPU),
    which a load generator with one client per agent would otherwise pay per agent."""
    try:
        import certifi

        return ssl.create_default_context(cafile=certifi.where())
    except ImportError:  # pragma: no cover - httpx depends on certifi
        return ssl.create_default_context()


def make_timeout(timeout: TimeoutLike) -> httpx.Timeout:
    if isinstance(timeout, httpx.Timeout):
        return timeout
    if timeout is None:
        return httpx.Timeout(None)
    return httpx.Timeout(timeout, connect=min(timeout, 10.0))


def transport_error(exc: httpx.HTTPError, url: str) -> APIConnectionError:
    if isinstance(exc, httpx.TimeoutException):
        return APITimeoutError(f"timed out talking to {url}: {type(exc).__name__}")
    return APIConnectionError(f"connection to {url} failed: {type(exc).__name__}: {exc}")


class _Base:
    """Configuration common to both transports."""

    _key_env = "AGENTGATE_API_KEY"

    def _configure(
        self,
        base_url: str | None,
        api_key: str | None,
        timeout: TimeoutLike,
        retry: RetryPolicy | None,
        max_retries: int | None,
        headers: dict[str, str] | None,
    ) -> None:
        self.base_url = normalize_url(base_url)
        self.api_key = api_key if api_key is not None else os.environ.get(self._key_env)
        self.timeout = make_timeout(timeout)
        if retry is None:
            retry = RetryPolicy() if max_retries is None else RetryPolicy(max_retries=max_retries)
        elif max_retries is not None:
            retry = dataclasses.replace(retry, max_retries=max_retries)
        self.retry = retry
        self.headers: dict[str, str] = {"User-Agent": USER_AGENT}
        if self.api_key:
            self.headers["Authorization"] = f"Bearer {self.api_key}"
        self.headers.update(headers or {})
        self.retries = 0  # answers retried over this client's life (a 429 counted once per retry)

    def _derive(self, **headers: str):
        """A copy sharing the HTTP connection pool, with more default headers."""
        twin = copy.copy(self)
        twin.headers = {**self.headers, **headers}
        twin._owns_http = False
        return twin

    def _build(self, http: Any, req: Req) -> httpx.Request:
        headers = self.headers if not req.headers else {**self.headers, **req.headers}
        timeout = make_timeout(req.timeout) if req.timeout is not None else self.timeout
        return http.build_request(
            req.method,
            self.base_url + req.path,
            json=req.json,
            params=req.params,
            headers=headers,
            timeout=timeout,
        )

    def _should_retry(self, req: Req, attempt: int, status: int) -> bool:
        return req.retry and attempt < self.retry.max_retries and status in self.retry.statuses

    def _error(self, response: httpx.Response, body: bytes, attempts: int):
        headers = {k.lower(): v for k, v in response.headers.items()}
        return status_error(
            response.status_code,
            error_body(body),
            headers=headers,
            request_id=headers.get("x-request-id"),
            attempts=attempts,
        )


class AsyncTransport(_Base):
    def _connect(self, http_client: httpx.AsyncClient | None, limits: httpx.Limits | None) -> None:
        self._owns_http = http_client is None
        self.http = http_client or httpx.AsyncClient(
            timeout=self.timeout, limits=limits or httpx.Limits(), verify=shared_ssl_context()
        )

    async def _send_raw(self, req: Req, stream: bool) -> httpx.Response:
        """One answer that is not retried any more (errors not raised)."""
        attempt = 0
        while True:
            request = self._build(self.http, req)
            try:
                response = await self.http.send(request, stream=stream)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if req.retry and attempt < self.retry.max_retries:
                    await anyio.sleep(self.retry.delay(attempt))
                    attempt += 1
                    self.retries += 1
                    continue
                raise transport_error(exc, self.base_url) from exc
            except httpx.HTTPError as exc:
                raise transport_error(exc, self.base_url) from exc
            if self._should_retry(req, attempt, response.status_code):
                if stream:
                    await response.aclose()
                await anyio.sleep(self.retry.delay(attempt, response.headers))
                attempt += 1
                self.retries += 1
                continue
            response.extensions["agentgate_attempts"] = attempt + 1
            return response

    async def _send(self, req: Req) -> Resp:
        response = await self._send_raw(req, stream=False)
        body = response.content
        if response.status_code >= 400 and response.status_code not in req.accept:
            raise self._error(response, body, response.extensions["agentgate_attempts"])
        return Resp(response.status_code, {k.lower(): v for k, v in response.headers.items()}, body)

    async def _open(self, req: Req) -> httpx.Response:
        """A streaming response with a 2xx status (errors raised, the response closed)."""
        response = await self._send_raw(req, stream=True)
        if response.status_code >= 400:
            try:
                body = await response.aread()
            except httpx.HTTPError:
                body = b""
            finally:
                await response.aclose()
            raise self._error(response, body, response.extensions["agentgate_attempts"])
        return response

    async def _run(self, op: Op) -> Any:
        try:
            req = next(op)
            while True:
                try:
                    resp = await self._send(req)
                except AgentGateError as exc:
                    req = op.throw(exc)  # the call may handle it (status() keeps what it could read)
                else:
                    req = op.send(resp)
        except StopIteration as stop:
            return stop.value

    async def aclose(self) -> None:
        if self._owns_http:
            await self.http.aclose()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class SyncTransport(_Base):
    def _connect(self, http_client: httpx.Client | None, limits: httpx.Limits | None) -> None:
        self._owns_http = http_client is None
        self.http = http_client or httpx.Client(
            timeout=self.timeout, limits=limits or httpx.Limits(), verify=shared_ssl_context()
        )

    def _send_raw(self, req: Req, stream: bool) -> httpx.Response:
        attempt = 0
        while True:
            request = self._build(self.http, req)
            try:
                response = self.http.send(request, stream=stream)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if req.retry and attempt < self.retry.max_retries:
                    time.sleep(self.retry.delay(attempt))
                    attempt += 1
                    self.retries += 1
                    continue
                raise transport_error(exc, self.base_url) from exc
            except httpx.HTTPError as exc:
                raise transport_error(exc, self.base_url) from exc
            if self._should_retry(req, attempt, response.status_code):
                if stream:
                    response.close()
                time.sleep(self.retry.delay(attempt, response.headers))
                attempt += 1
                self.retries += 1
                continue
            response.extensions["agentgate_attempts"] = attempt + 1
            return response

    def _send(self, req: Req) -> Resp:
        response = self._send_raw(req, stream=False)
        body = response.content
        if response.status_code >= 400 and response.status_code not in req.accept:
            raise self._error(response, body, response.extensions["agentgate_attempts"])
        return Resp(response.status_code, {k.lower(): v for k, v in response.headers.items()}, body)

    def _open(self, req: Req) -> httpx.Response:
        response = self._send_raw(req, stream=True)
        if response.status_code >= 400:
            try:
                body = response.read()
            except httpx.HTTPError:
                body = b""
            finally:
                response.close()
            raise self._error(response, body, response.extensions["agentgate_attempts"])
        return response

    def _run(self, op: Op) -> Any:
        try:
            req = next(op)
            while True:
                try:
                    resp = self._send(req)
                except AgentGateError as exc:
                    req = op.throw(exc)
                else:
                    req = op.send(resp)
        except StopIteration as stop:
            return stop.value

    def close(self) -> None:
        if self._owns_http:
            self.http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
