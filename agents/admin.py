"""Operator calls: pause, resume, abort, status, sessions (the admin key).

    admin = Admin("http://127.0.0.1:8000", admin_key="...")   # or AGENTGATE_ADMIN_KEY
    admin.pause("keep"); admin.resume()
    admin.abort(["req-1"]); admin.abort(session_id="conv-42"); admin.abort(all=True)
    print(admin.status())

:class:`AsyncAdmin` is the same with ``await``. Aborting by session or API key
needs a gateway that has those fields (issue 8); against one that lacks them
the call raises :class:`~agents.errors.UnsupportedError` instead of sending a
body the server would read as "abort everything".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from agentgate.agents import prometheus
from agentgate.agents._requests import Op, Req, json_op
from agentgate.agents._retries import RetryPolicy
from agentgate.agents._transport import AsyncTransport, SyncTransport, TimeoutLike
from agentgate.agents.errors import UnsupportedError

PAUSE_MODES = ("abort", "wait", "keep")


@dataclass
class Status:
    """What ``agentgate ops status`` shows, read from /health, /is_paused, /metrics and /version."""

    url: str
    healthy: bool
    health: dict[str, Any] | str | None
    paused: bool | None
    version: str | None
    running: float
    waiting: float
    gateway_in_flight: float
    gateway_waiting: float
    kv_usage: float
    engines_alive: float | None
    engines: int | None
    redis: str | None
    prefix_hit_rate: float | None
    preemptions: float
    ttft_p50: float | None
    ttft_p99: float | None
    requests_by_reason: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _status(url: str, health: Any, health_ok: bool, paused: Any, version: Any, samples: dict, errors: list) -> Status:
    v = prometheus.value
    queries = v(
        samples, "agentgate_prefix_cache_queries_tokens_total", v(samples, "agentgate_prefix_cache_queries_tokens")
    )
    hits = v(samples, "agentgate_prefix_cache_hits_tokens_total", v(samples, "agentgate_prefix_cache_hits_tokens"))
    reasons: dict[str, float] = {}
    for key, value in samples.items():
        name, labels = prometheus.split(key)
        if name == "agentgate_requests_total" and "finish_reason" in labels:
            reasons[labels["finish_reason"]] = value
    engines = health.get("engines") if isinstance(health, dict) else None
    alive_key = "agentgate_engines_alive"
    return Status(
        url=url,
        healthy=health_ok,
        health=health,
        paused=paused,
        version=version,
        running=v(samples, "agentgate_requests_running"),
        waiting=v(samples, "agentgate_requests_waiting"),
        gateway_in_flight=v(samples, "agentgate_gateway_requests_in_flight"),
        gateway_waiting=v(samples, "agentgate_gateway_requests_waiting"),
        kv_usage=v(samples, "agentgate_kv_cache_usage_ratio"),
        engines_alive=samples.get(alive_key),
        engines=engines,
        redis=health.get("redis") if isinstance(health, dict) else None,
        prefix_hit_rate=hits / queries if queries else None,
        preemptions=v(samples, "agentgate_preemptions_total", v(samples, "agentgate_preemptions")),
        ttft_p50=prometheus.histogram_quantile(samples, "agentgate_time_to_first_token_seconds", 0.5),
        ttft_p99=prometheus.histogram_quantile(samples, "agentgate_time_to_first_token_seconds", 0.99),
        requests_by_reason=reasons,
        errors=errors,
    )


class AdminApi:
    _openapi: dict[str, Any] | None = None
    base_url: str

    def pause(self, mode: str = "abort"):
        """Pause every engine: ``abort`` ends requests in flight, ``wait`` lets them finish, ``keep`` freezes them."""
        if mode not in PAUSE_MODES:
            raise ValueError(f"mode must be one of {PAUSE_MODES}, got {mode!r}")

        return self._run(json_op(Req("POST", "/pause", params={"mode": mode}, retry=False)))

    def resume(self):
        return self._run(json_op(Req("POST", "/resume", retry=False)))

    def is_paused(self):
        return self._run(self._is_paused_op())

    def _abort_fields(self) -> Op:
        """The fields the server's ``/abort_requests`` body accepts, from its OpenAPI document (read once)."""
        if self._openapi is None:
            resp = yield Req("GET", "/openapi.json", accept=(404,))
            self._openapi = resp.json() if resp.status_code == 200 else {}
        document = self._openapi
        operation = document.get("paths", {}).get("/abort_requests", {}).get("post", {})
        content = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
        schema = content.get("schema", {})
        ref = schema.get("$ref", "")
        if ref.startswith("#/components/schemas/"):
            schema = document.get("components", {}).get("schemas", {}).get(ref.rsplit("/", 1)[1], {})
        return set(schema.get("properties", {}))

    def abort(
        self,
        request_ids: Sequence[str] = (),
        *,
        session_id: str | None = None,
        api_key: str | None = None,
        all: bool = False,
    ):
        """Abort requests by id, by session, by API key, or every request (``all=True``) -> the server's answer."""
        chosen = sum([bool(request_ids), session_id is not None, api_key is not None, all])
        if chosen != 1:
            raise ValueError("abort exactly one of: request ids, session_id, api_key, all=True")

        def op() -> Op:
            body: dict[str, Any]
            if all:
                body = {"request_ids": []}
            elif request_ids:
                body = {"request_ids": list(request_ids)}
            else:
                name, value = ("session_id", session_id) if session_id is not None else ("api_key", api_key)
                fields = yield from self._abort_fields()
                if name not in fields:
                    raise UnsupportedError(
                        f"the server at {self.base_url} cannot abort by {name} (its /abort_requests takes "
                        f"{sorted(fields) or 'no documented fields'}); it needs the sessions feature (issue 8)"
                    )
                body = {name: value}
            return (yield from json_op(Req("POST", "/abort_requests", body, retry=False)))

        return self._run(op())

    def abort_request(self, request_id: str):
        """``DELETE /v1/requests/{id}``; NotFoundError when it is not in flight."""
        return self._run(json_op(Req("DELETE", f"/v1/requests/{request_id}", retry=False)))

    def health(self):
        """``(ok, body)``: ok is False on 503 (an engine is dead), body the server's JSON (its text if not JSON)."""
        return self._run(self._health_op())

    def metrics(self):
        """``/metrics`` parsed: ``name{labels}`` -> value."""
        return self._run(self._metrics_op())

    def version(self):
        """The server's version (``/version``); None when it has no such endpoint."""
        return self._run(self._version_op())

    def status(self):
        """:class:`Status`: health, pause state, engine load, KV usage, prefix-cache hit rate, TTFT."""

        def op() -> Op:
            errors: list[str] = []
            health_ok, health = yield from _call(self._health_op(), errors, (False, None))
            if errors and health is None:  # unreachable: nothing else will answer either
                return _status(self.base_url, None, False, None, None, {}, errors)
            paused = yield from _call(self._is_paused_op(), errors, None)
            samples = yield from _call(self._metrics_op(), errors, {})
            version = yield from _call(self._version_op(), errors, None)
            return _status(self.base_url, health, health_ok, paused, version, samples, errors)

        return self._run(op())

    # sessions (issue 8) ------------------------------------------------------------------
    def sessions(self):
        """Every session (``GET /v1/sessions``) as a list of dicts."""

        def op() -> Op:
            resp = yield Req("GET", "/v1/sessions")
            data = resp.json()
            if isinstance(data, dict):
                for key in ("data", "sessions"):
                    if isinstance(data.get(key), list):
                        return data[key]
            return data

        return self._run(op())

    def get_session(self, session_id: str):
        return self._run(json_op(Req("GET", f"/v1/sessions/{session_id}")))

    def delete_session(self, session_id: str):
        return self._run(json_op(Req("DELETE", f"/v1/sessions/{session_id}", retry=False)))

    # the ops status is built from these (generators, so status() is one driven call)
    def _health_op(self) -> Op:
        resp = yield Req("GET", "/health", accept=(503,), retry=False)
        try:
            return resp.status_code == 200, resp.json()
        except ValueError:
            return resp.status_code == 200, resp.text

    def _is_paused_op(self) -> Op:
        return bool((yield Req("GET", "/is_paused")).json()["is_paused"])

    def _metrics_op(self) -> Op:
        return prometheus.parse((yield Req("GET", "/metrics")).text)

    def _version_op(self) -> Op:
        resp = yield Req("GET", "/version", accept=(404,))
        return resp.json().get("version") if resp.status_code == 200 else None


def _call(op: Op, errors: list[str], default: Any) -> Op:
    """Run a sub-call, keeping its error as text (status shows what it could read)."""
    from agentgate.agents.errors import AgentGateError

    try:
        return (yield from op)
    except AgentGateError as exc:
        errors.append(str(exc))
        return default


class _AdminInit:
    _key_env = "AGENTGATE_ADMIN_KEY"

    def __init__(
        self,
        base_url: str | None = None,
        *,
        admin_key: str | None = None,
        timeout: TimeoutLike = 30.0,
        max_retries: int | None = None,
        retry: RetryPolicy | None = None,
        headers: dict[str, str] | None = None,
        http_client: Any = None,
    ) -> None:
        self._configure(base_url, admin_key, timeout, retry, max_retries, headers)
        self._connect(http_client, None)


class Admin(_AdminInit, AdminApi, SyncTransport):
    """Operator client (sync). ``admin_key`` defaults to ``AGENTGATE_ADMIN_KEY``."""

    http: httpx.Client


class AsyncAdmin(_AdminInit, AdminApi, AsyncTransport):
    """Operator client (async)."""

    http: httpx.AsyncClient
