"""The operator dashboard: ``GET /dashboard`` serves the page (open, like the
playground: it holds no secret, the admin key is typed into it) and
``GET /dashboard/stats`` its numbers (admin key; :mod:`gateway.observation.dashboard_stats`).
The page pauses, resumes and aborts through the existing operator routes."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from agentgate.gateway.api_types.openai import encode
from agentgate.gateway.app_state import GatewayState
from agentgate.gateway.http.routes.playground import static_page
from agentgate.gateway.observation.dashboard_stats import dashboard_stats


async def stats(request: Request) -> Response:
    gw: GatewayState = request.state.gateway
    return Response(
        encode(await dashboard_stats(gw.pool, gw.registry, gw.metrics, gw.replica_id)),
        media_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


routes = [
    Route("/dashboard", static_page("dashboard.html"), methods=["GET"]),
    Route("/dashboard/stats", stats, methods=["GET"]),
]
