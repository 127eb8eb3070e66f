"""The OpenAI Responses API: ``POST /v1/responses`` (streamed, collected, or in the
background), ``GET``/``DELETE /v1/responses/{id}``, ``POST /v1/responses/{id}/cancel``,
``GET /v1/responses/{id}/input_items``, ``POST /v1/responses/compact``
(:mod:`gateway.responses_api.compact`) and the WebSocket mode on
``/v1/responses`` (:mod:`gateway.http.websocket`).

A response runs on the chat core (:mod:`gateway.responses_api.turn`) and is
stored in Redis (:mod:`gateway.responses_api.store`), so any replica answers
for it and continues its chain. A background response is stored ``queued``
at once and answered; it runs after the answer, and ``cancel`` (on any
replica) aborts its generation through the cluster.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute
from starlette.types import Receive

from agentgate.gateway.api_types.openai import decode_body, encode
from agentgate.gateway.api_types.responses import CompactRequest, DeletedResponse, InputItemList, ResponsesRequest
from agentgate.gateway.app_state import GatewayState
from agentgate.gateway.errors import BadRequestError
from agentgate.gateway.formats.framing import named_event
from agentgate.gateway.http.middleware import bearer_token, context_of, request_id_of
from agentgate.gateway.http.sse import collect_or_raise, stream_rounds, until_disconnect
from agentgate.gateway.http.websocket import responses_socket
from agentgate.gateway.responses_api.compact import compacted, conversation, start_compaction
from agentgate.gateway.responses_api.store import RUNNING
from agentgate.gateway.responses_api.turn import Turn, need_store, start_turn
from agentgate.gateway.responses_api.turn_events import collect_rounds, turn_events
from agentgate.gateway.state.key_digests import key_digest

OMITTED_TOOLS_HEADER = "x-agentgate-omitted-tools"
access_logger = logging.getLogger("agentgate.access")  # beside the request's access-log line
JSON = "application/json"


def _json(value: object) -> Response:
    return Response(encode(value), media_type=JSON)


async def create_response(request: Request) -> Response:
    arrival = time.monotonic()
    gw: GatewayState = request.state.gateway
    body = decode_body(await request.body(), ResponsesRequest)
    turn = await start_turn(
        gw.chat,
        gw.mcp,
        gw.responses,
        body,
        request_id=request_id_of(request.scope),
        arrival=arrival,
        context=context_of(request.scope),
    )
    response = await _respond(request, gw, body, turn)
    if turn.omitted:  # --omit-unrunnable-tools: the client hears what its model was not offered
        names = ",".join(turn.omitted)
        response.headers[OMITTED_TOOLS_HEADER] = names
        access_logger.info("POST /v1/responses %s: hosted tools left out of the prompt: %s", turn.request_id, names)
    return response


async def _respond(request: Request, gw: GatewayState, body: ResponsesRequest, turn: Turn) -> Response:
    if body.stream:
        return _stream(turn, gw.settings.sse_send_timeout)
    if turn.loop is not None:
        return await _tool_loop(turn, body, request.receive)
    if body.background:
        await _queued(turn)
        return Response(encode(turn.response), media_type=JSON, background=BackgroundTask(_run, turn, None))
    if not await _run(turn, request.receive):
        return Response(status_code=499)  # nobody is listening any more
    return _json(turn.response)


async def _queued(turn: Turn) -> None:
    """Store a background response ``queued`` before it is answered. When that save fails, the
    request fails (its error: 503 without Redis) and gives back everything it took: the admission
    ticket, the registry entry, the lease and the engine request."""
    turn.response.status = "queued"
    try:
        await turn.save()
    except BaseException:
        await turn.close_round()
        raise


async def compact_response(request: Request) -> Response:
    arrival = time.monotonic()
    gw: GatewayState = request.state.gateway
    body = decode_body(await request.body(), CompactRequest)
    context = context_of(request.scope)
    messages = await conversation(gw.responses, body, context.key, gw.sealer)
    run, dropped = await start_compaction(
        gw.chat, body, messages, request_id=request_id_of(request.scope), arrival=arrival, context=context
    )
    if not await collect_or_raise(run.generation, request.receive):
        return Response(status_code=499)  # nobody is listening any more
    return _json(compacted(run, messages, gw.sealer, dropped))


async def _run(turn: Turn, receive) -> bool:
    """Run the turn's generation to its end, then finish and store its response. ``receive``:
    the client's, whose disconnect aborts it (False: it left); an engine error is raised. None:
    a background response, which nobody waits for: an error leaves it ``failed``."""
    gen = turn.run.generation
    if receive is None:
        turn.response.status = "in_progress"
        await turn.save()
        try:
            await gen.collect()
        finally:
            await gen.aclose()
            gen.close()
    elif not await collect_or_raise(gen, receive):
        return False
    choice = gen.choices[0]
    turn.finish(choice.reply, choice.reply_finish)
    await turn.save()
    return True


def _stream(turn: Turn, send_timeout: float | None) -> Response:
    """The turn's events as SSE (``event: <type>`` + ``data: <json>``), the response stored before
    its final event (:mod:`gateway.responses_api.turn_events`); ``send_timeout``: ``--sse-send-timeout``."""
    frames = (b"".join(named_event(event["type"], event) for event in batch) async for batch in turn_events(turn))
    prime = turn.run.plan.structured is not None
    return stream_rounds(turn.run.generation, frames, turn.close_round, send_timeout=send_timeout, prime=prime)


async def _tool_loop(turn: Turn, body: ResponsesRequest, receive: Receive) -> Response:
    """A response whose tools the server runs (:mod:`gateway.tool_loop`), in the background or
    whole, each round's generation watched like one response's."""

    async def watched(step: Callable[[], Awaitable[None]]) -> bool:
        return not await until_disconnect(receive, step)

    if body.background:
        await _queued(turn)
        return Response(encode(turn.response), media_type=JSON, background=BackgroundTask(_loop_in_background, turn))
    if not await collect_rounds(turn, watched):
        return Response(status_code=499)  # nobody is listening any more
    return _json(turn.response)


async def _loop_in_background(turn: Turn) -> None:
    async def unwatched(step: Callable[[], Awaitable[None]]) -> bool:
        await step()
        return True

    turn.response.status = "in_progress"
    await turn.save()
    await collect_rounds(turn, unwatched)


def _owner(request: Request) -> str:
    return key_digest(bearer_token(request.scope))


async def get_response(request: Request) -> Response:
    store = need_store(request.state.gateway.responses, "stored responses")
    stored = await store.load(request.path_params["response_id"], _owner(request))
    return _json(stored.response)


async def delete_response(request: Request) -> Response:
    """Delete a stored response; one still running (background) is aborted, and stays deleted."""
    gw: GatewayState = request.state.gateway
    store = need_store(gw.responses, "stored responses")
    response_id = request.path_params["response_id"]
    stored = await store.delete(response_id, _owner(request))
    if stored.response.status in RUNNING and stored.request_id is not None:
        await gw.cluster.abort([stored.request_id])
    return _json(DeletedResponse(response_id))


async def cancel_response(request: Request) -> Response:
    """Cancel a background response that is still running (any replica's): it is marked
    cancelled and its generation aborted. A finished one is returned as it is."""
    gw: GatewayState = request.state.gateway
    store = need_store(gw.responses, "cancel")
    stored = await store.load(request.path_params["response_id"], _owner(request))
    if not stored.response.background:
        raise BadRequestError("Only responses created with background=true can be cancelled.", param="response_id")
    if stored.response.status in RUNNING:
        stored.response.status = "cancelled"
        if await store.cancel(stored) and stored.request_id is not None:
            await gw.cluster.abort([stored.request_id])
        else:
            stored = await store.load(stored.response.id, stored.owner)
    return _json(stored.response)


async def input_items(request: Request) -> Response:
    """The response's input items, newest first unless ``order=asc``; ``limit`` (1-100, default
    20) and ``after`` (an item id) page through them."""
    store = need_store(request.state.gateway.responses, "stored responses")
    stored = await store.load(request.path_params["response_id"], _owner(request))
    query = request.query_params
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise BadRequestError("order must be asc or desc", param="order")
    try:
        limit = int(query.get("limit", "20"))
    except ValueError:
        raise BadRequestError("limit must be an integer", param="limit") from None
    if not 1 <= limit <= 100:
        raise BadRequestError("limit must be in [1, 100]", param="limit")
    items = stored.input_items if order == "asc" else stored.input_items[::-1]
    after = query.get("after")
    if after is not None:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise BadRequestError(f"no input item with id {after!r}", param="after")
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return _json(
        InputItemList(page, page[0]["id"] if page else None, page[-1]["id"] if page else None, len(items) > limit)
    )


routes = [
    Route("/v1/responses", create_response, methods=["POST"]),
    WebSocketRoute("/v1/responses", responses_socket),
    Route("/v1/responses/compact", compact_response, methods=["POST"]),
    Route("/v1/responses/{response_id}", get_response, methods=["GET"]),
    Route("/v1/responses/{response_id}", delete_response, methods=["DELETE"]),
    Route("/v1/responses/{response_id}/cancel", cancel_response, methods=["POST"]),
    Route("/v1/responses/{response_id}/input_items", input_items, methods=["GET"]),
]
