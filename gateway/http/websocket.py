"""The Responses API's WebSocket mode: ``ws://HOST/v1/responses``, OpenAI's and the Open
Responses spec's.

The client sends ``response.create`` events (a create body with ``"type":
"response.create"``; ``background`` is refused, every turn streams) and reads
each turn's events, the same payloads the SSE stream carries, one per text
message, up to ``response.completed`` (or ``incomplete``, ``failed``). Turns
run one after another on a connection; each is started by the one core,
:func:`~gateway.responses_api.turn.start_turn`, admitted like a POST (the API
key given at the handshake: :func:`gateway.http.middleware.request_context`; its rate limit
charged by dispatch)
and its events come from :class:`~gateway.formats.responses.ResponseEvents`.

The connection keeps its most recent responses (``store: false`` ones too,
which live nowhere else), so a continuation sends ``previous_response_id``
and only its new items; an id it does not keep is read from the store, and a
``store: false`` one it does not keep is ``previous_response_not_found``. A
continuation that fails evicts the response it continued. ``"generate":
false`` warms a turn up: its prompt is computed into the engine's cache and
its response, with no output, is the one to continue from.

A bad event, or a turn refused before it starts, is answered with an error
event in OpenAI's WebSocket envelope, ``{"type": "error", "status": 400,
"error": {"type", "code", "message", "param"}}``, and the connection stays
open. The API key is checked at the handshake (``gateway.state.auth``), and so is the ``Origin``
header (``gateway.http.middleware.WebSocketOriginMiddleware``). A client that goes away aborts
the turn running.

Events sent while a turn runs wait in the connection's inbox, at most :data:`INBOX_EVENTS` of
them (each at most ``--max-body-bytes``): one more closes the connection with code 1008
(policy violation) and a reason that says so, aborting the turn running.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import anyio
import msgspec
from starlette.websockets import WebSocket, WebSocketDisconnect

from agentgate.gateway.api_types.openai import decode_body
from agentgate.gateway.api_types.responses import WebSocketCreate
from agentgate.gateway.app_state import GatewayState
from agentgate.gateway.errors import BadRequestError, ErrorInfo, PayloadTooLargeError, error_parts
from agentgate.gateway.formats.responses import Event
from agentgate.gateway.http.middleware import request_context
from agentgate.gateway.responses_api.store import StoredResponse
from agentgate.gateway.responses_api.turn import Turn, start_turn
from agentgate.gateway.responses_api.turn_events import turn_events

KEPT = 16  # responses a connection keeps for continuations
INBOX_EVENTS = 8  # events that may wait behind the running turn
INBOX_FULL = 1008  # the close code when one more arrives (policy violation)
_encoder = msgspec.json.Encoder()


def error_fields(status: int, info: ErrorInfo) -> dict[str, Any]:
    """OpenAI's WebSocket error envelope (the ``error`` event's fields but its type)."""
    code = str(info.code) if info.code is not None else info.type
    return {"status": status, "error": {"type": info.type, "code": code, "message": info.message, "param": info.param}}


class Connection:
    """One client's socket: its turns, in order, and the responses it keeps."""

    def __init__(self, websocket: WebSocket) -> None:
        self.websocket = websocket
        self.gw: GatewayState = websocket.state.gateway
        self.kept: dict[str, StoredResponse] = {}

    async def send(self, event: Event) -> None:
        await self.websocket.send_text(_encoder.encode(event).decode())

    async def serve(self) -> None:
        """Read events while turns run (a disconnect cancels the one running); run them in order."""
        await self.websocket.accept()
        inbox_writer, inbox = anyio.create_memory_object_stream[str](INBOX_EVENTS)
        try:
            async with anyio.create_task_group() as tasks:

                async def read() -> None:
                    try:
                        while (message := await self.websocket.receive())["type"] == "websocket.receive":
                            text = message.get("text") or (message.get("bytes") or b"").decode()
                            try:
                                inbox_writer.send_nowait(text)
                            except anyio.WouldBlock:
                                reason = f"more than {INBOX_EVENTS} events wait behind the running turn"
                                await self.websocket.close(code=INBOX_FULL, reason=reason)
                                return
                    finally:
                        tasks.cancel_scope.cancel()

                tasks.start_soon(read)
                async for text in inbox:
                    await self.turn(text)
        except* (WebSocketDisconnect, OSError):  # the client went away while we were sending
            pass

    async def turn(self, text: str) -> None:
        """One ``response.create``: refused with an error event, or run to its last event."""
        event: WebSocketCreate | None = None
        try:
            if len(text) > self.gw.settings.max_body_bytes:
                raise PayloadTooLargeError(
                    f"the event is larger than this server accepts ({self.gw.settings.max_body_bytes} bytes)"
                )
            event = decode_body(text.encode(), WebSocketCreate)
            if event.type != "response.create":
                raise BadRequestError(
                    f"unsupported event type {event.type!r}: this server takes response.create",
                    param="type",
                    code="unsupported_event_type",
                )
            if event.background:
                raise BadRequestError(
                    "background is not available in WebSocket mode: every response streams on the socket",
                    param="background",
                )
            gw = self.gw
            context = request_context(self.websocket.scope, gw.keys)
            turn = await start_turn(
                gw.chat,
                gw.mcp,
                gw.responses,
                event,
                request_id=uuid.uuid4().hex,
                arrival=time.monotonic(),
                context=context,
                recent=self.kept,
                warmup=not event.generate,
            )
            await self._prime(turn)
        except Exception as exc:  # noqa: BLE001 (any error refuses the turn, never the connection)
            self._evict(event)
            status, info, _ = error_parts(exc)
            await self.send({"type": "error", **error_fields(status, info)})
            return
        await self._run(turn)
        if turn.response.status in ("completed", "incomplete"):
            self.kept[turn.response.id] = turn.stored()
            while len(self.kept) > KEPT:
                del self.kept[next(iter(self.kept))]
        else:
            self._evict(event)

    def _evict(self, event: WebSocketCreate | None) -> None:
        """A continuation failed: the response it continued is not kept any more."""
        if event is not None and event.previous_response_id is not None:
            self.kept.pop(event.previous_response_id, None)

    @staticmethod
    async def _prime(turn: Turn) -> None:
        """A constrained turn's grammar compiled before it starts (an error here refuses the turn)."""
        gen = turn.run.generation
        if turn.run.plan.structured is None:
            return
        try:
            await gen.prime()
            if gen.error is not None:
                raise gen.error
        except BaseException:  # refused, or the client left: the turn ends here
            await gen.aclose()
            gen.close()
            raise

    async def _run(self, turn: Turn) -> None:
        """Stream the turn's events; the response is finished and stored before its last event."""
        try:
            async for batch in turn_events(turn, error_fields):
                for event in batch:
                    await self.send(event)
        finally:
            await turn.close_round()


async def responses_socket(websocket: WebSocket) -> None:
    await Connection(websocket).serve()
