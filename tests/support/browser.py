"""Helpers for the web pages' browser tests: finding Chromium, launching it
headless through Playwright, and a scripted site on loopback (the page's own
routes plus a fake chat endpoint) for replies a real server cannot produce on
demand (Markdown, hostile HTML, tool-call deltas cut where a test wants), and
as a second origin for the CORS test."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, StreamingResponse
from starlette.routing import Route

from agentgate.gateway.http.routes import playground

# As the machine notes prescribe for Debian's Chromium run as root in a closed
# network; Playwright adds a fresh temporary --user-data-dir itself.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
STEP_SECONDS = 0.05  # the web tests' null-runner server: seconds a step takes
CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """``$AGENTGATE_CHROMIUM``, else Debian's /usr/bin/chromium, else one on PATH."""
    explicit = os.environ.get("AGENTGATE_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).is_file() else None
    if Path("/usr/bin/chromium").is_file():
        return "/usr/bin/chromium"
    for name in CHROMIUM_CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


NO_CHROMIUM = (
    "no Chromium installed (looked for $AGENTGATE_CHROMIUM, /usr/bin/chromium, chromium on PATH): "
    "scripts/test.sh installs Debian's chromium package when it runs as root with apt-get"
)


def sample(read: Callable[[], object], *, every: float, until: Callable[[], bool], timeout: float) -> list:
    """Calls ``read`` every ``every`` seconds until ``until()`` or ``timeout``."""
    values = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        values.append(read())
        if until():
            break
        time.sleep(every)
    return values


WEATHER_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]

# -- a scripted site ------------------------------------------------------------------


def chunk(delta: dict | None = None, finish: str | None = None, usage: dict | None = None) -> dict:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fake-model",
        "choices": choices,
        "usage": usage,
    }


@dataclass
class ScriptedSite:
    """A loopback server with the playground's routes and a fake
    ``/v1/chat/completions``: each request takes the next script, a list of
    chunks (dicts) and ``"gate"`` markers, where it waits for :meth:`release`
    (once released, a request's later gates are open)."""

    scripts: list[list] = field(default_factory=list)
    requests: list[dict] = field(default_factory=list)
    models: list[str] = field(default_factory=lambda: ["fake-model"])
    port: int = 0

    def __post_init__(self) -> None:
        self._gate = threading.Event()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def release(self) -> None:
        self._gate.set()

    async def _chat(self, request: Request) -> StreamingResponse:
        # Closed when the request arrives, not at the "gate" marker: a test
        # that releases as soon as it sees the chunk before the marker may
        # do so before this stream reaches it, and that release must hold.
        self._gate.clear()
        self.requests.append(json.loads(await request.body()))
        script = (
            self.scripts.pop(0) if self.scripts else [chunk({"role": "assistant", "content": "(no script)"}, "stop")]
        )

        async def events():
            for item in script:
                if item == "gate":
                    while not self._gate.is_set():
                        await anyio.sleep(0.01)
                    continue
                # \r\n line ends, as sse-starlette writes them.
                yield f"data: {json.dumps(item)}\r\n\r\n".encode()
                await anyio.sleep(0.02)
            yield b"data: [DONE]\r\n\r\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def _models(self, request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": m, "object": "model"} for m in self.models]})

    async def _bare_page(self, request: Request) -> FileResponse:
        """The playground without its Content-Security-Policy: where only the
        sanitizer stands between model output and script execution."""
        return FileResponse(playground.STATIC_DIR / "index.html", media_type="text/html")

    def start(self, port: int) -> ScriptedSite:
        self.port = port
        app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/bare", self._bare_page, methods=["GET"]),
                *playground.routes,
            ]
        )
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="scripted-site", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the scripted site did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._gate.set()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)


# -- driving the pages ---------------------------------------------------------------


def setting(page, label: str, value: str) -> None:
    """Types into a labelled field and leaves it, as a person would (fires change)."""
    field = page.get_by_label(label, exact=True)
    field.fill(value)
    field.press("Tab")


def open_playground(page, url: str, *, api_key=None, admin_key=None, endpoint=None, path="/") -> None:
    page.goto(url + path)
    if endpoint:
        setting(page, "Endpoint", endpoint)
    if api_key:
        setting(page, "API key", api_key)
    if admin_key:
        setting(page, "Admin key", admin_key)


def send(page, text: str):
    """Types a message and presses Enter; returns the reply's locator."""
    box = page.get_by_label("Message", exact=True)
    box.fill(text)
    box.press("Enter")
    return page.locator(".msg.assistant").last


def text_length(reply) -> int:
    return len(reply.locator(".content").text_content() or "")


def reply_script(text: str, pieces: int = 4) -> list[dict]:
    """A scripted stream that sends ``text`` in ``pieces`` content deltas, then finishes with "stop"."""
    size = -(-len(text) // pieces)
    parts = [text[i : i + size] for i in range(0, len(text), size)]
    return [
        chunk({"role": "assistant", "content": ""}),
        *[chunk({"content": p}) for p in parts],
        chunk({}, finish="stop"),
    ]


def assert_accessible(page) -> None:
    """No axe-core violations of the WCAG 2.1 A/AA rules (labels, names, contrast, ...) on the page as it is."""
    from axe_playwright_python.sync_playwright import Axe

    tags = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
    result = Axe().run(page, options={"runOnly": {"type": "tag", "values": tags}})
    found = [[v["id"], [n["html"][:120] for n in v["nodes"][:3]]] for v in result.response["violations"]]
    assert result.violations_count == 0, json.dumps(found, indent=1)


def shoot(page, name: str, **options) -> None:
    """Saves a screenshot under $AGENTGATE_SCREENSHOTS (nothing without it)."""
    folder = os.environ.get("AGENTGATE_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), **options)
