"""The HTTP edge of the gateway: the only package that knows Starlette and ASGI.

The app and its lifespan (:mod:`~gateway.http.app`), the pure-ASGI middleware
(request ids, body limits, API keys, each request's context), the routes, the
exception handlers and route hints (:mod:`~gateway.http.errors`), the Anthropic
error bodies, the SSE response that streams a generation with the client's
disconnect watched in a cancel scope it owns (:mod:`~gateway.http.sse`), the
Responses API's WebSocket route, and the server itself (uvicorn, its slow-client
guards). Everything below takes plain values and raises plain exceptions
(``gateway.errors``); ``tests/gateway/test_gateway_boundary.py`` keeps it so.
"""
