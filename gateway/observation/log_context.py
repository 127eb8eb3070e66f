"""What a request's log lines say beside uvicorn's access line: the LoRA adapter it ran through.

Dispatch notes the adapter a request names (:func:`note_adapter`) in a context variable of the
request's task; the access line, written as the response starts in that same task, ends with
`` lora=NAME`` (``gateway.http.tracing.AccessLogFilter``). A request on the base model adds nothing.
"""

from __future__ import annotations

from contextvars import ContextVar

_ADAPTER: ContextVar[str] = ContextVar("agentgate_lora_adapter", default="")


def note_adapter(name: str) -> None:
    """The request running in this task runs through the LoRA adapter ``name``."""
    _ADAPTER.set(name)


def noted_adapter() -> str:
    """The adapter :func:`note_adapter` noted for this task's request ("" for the base model)."""
    return _ADAPTER.get()
