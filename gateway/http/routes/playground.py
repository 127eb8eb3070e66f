"""The playground: one static page (plain HTML, CSS and JavaScript modules in
``gateway/static``, no build step) that chats with the served model through
the public API, and an operator strip for pause/resume and the engine gauges.

``/`` and ``/playground`` serve the page, ``/static/...`` its assets. They are
open (see :mod:`gateway.state.auth`): the page holds no secret, the keys are typed
into it and sent by the browser as ``Authorization: Bearer`` to the API.
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).resolve().parents[2] / "static"

# The page runs only its own scripts and styles; it may call any gateway
# (connect-src), since the endpoint can be set to another origin (CORS).
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self' http: https:; object-src 'none'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
# Revalidate every time (ETag / Last-Modified), so an upgraded gateway never
# runs with yesterday's modules from the browser's cache.
_HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}


class _StaticFiles(StaticFiles):
    def file_response(self, *args, **kwargs) -> Response:
        response = super().file_response(*args, **kwargs)
        response.headers.update(_HEADERS)
        return response


def static_page(name: str):
    """A route handler serving ``static/<name>`` as an HTML page under the CSP."""

    async def page(request: Request) -> Response:
        return FileResponse(
            STATIC_DIR / name,
            media_type="text/html; charset=utf-8",
            headers={**_HEADERS, "Content-Security-Policy": CONTENT_SECURITY_POLICY},
        )

    return page


page = static_page("index.html")


routes = [
    Route("/", page, methods=["GET"]),
    Route("/playground", page, methods=["GET"]),
    Mount("/static", app=_StaticFiles(directory=STATIC_DIR), name="static"),
]
