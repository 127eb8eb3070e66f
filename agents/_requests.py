"""Requests and responses, sans I/O: what the async client and its sync twin share.

- :class:`Req` / :class:`Resp`: a request to send and what came back.
- API calls are generators (:data:`Op`) that yield :class:`Req` and receive
  :class:`Resp`; each transport drives them (``_run``), so every call is
  written once for both twins.
- the server's root URL (:func:`normalize_url`) and the body helpers.
"""

from __future__ import annotations

import json
import os
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8000"
USER_AGENT = "agentgate-agents/0.1"


def normalize_url(url: str | None) -> str:
    """The server's root URL: ``AGENTGATE_URL`` when ``url`` is None; a trailing ``/v1`` is dropped."""
    url = (url or os.environ.get("AGENTGATE_URL") or DEFAULT_URL).rstrip("/")
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    if "://" not in url:
        url = "http://" + url
    return url


@dataclass(slots=True)
class Req:
    method: str
    path: str
    json: Any = None
    params: dict[str, Any] | None = None
    headers: dict[str, str] | None = None
    timeout: Any = None
    accept: tuple[int, ...] = ()  # error statuses returned as a Resp instead of raised
    retry: bool = True


@dataclass(slots=True)
class Resp:
    status_code: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    @property
    def request_id(self) -> str | None:
        return self.headers.get("x-request-id")


Op = Generator[Req, Resp, Any]


def json_op(req: Req) -> Op:
    """The one-request call: send ``req``, return its JSON body."""
    return (yield req).json()


def error_body(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return body.decode("utf-8", errors="replace")


def drop_none(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}
