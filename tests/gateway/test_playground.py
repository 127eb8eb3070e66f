"""The playground page (gateway/static, served at / and /playground), driven in
headless Chromium by Playwright against real `agentgate serve` processes:

- a null-runner server (0.05 s per step, API key + admin key, a small KV
  cache so its usage shows, CORS for the scripted site's origin) for the
  streaming, Stop, pause/resume and CORS mechanics;
- the default model on the sync runner (conftest's ``model_server``) for a
  real reply, and for a real tool call once the gateway emits tool_calls;
- a scripted site on loopback (the page's own routes plus a fake chat
  endpoint) for tool-call deltas chunked exactly as the test wants them.

The browser tests skip only when no Chromium is installed. On a failure the
page's screenshot is written under pytest's temporary directory and its path
printed. The page's Content-Security-Policy forbids eval, so Playwright's
``wait_for_function`` fails there: poll from Python (``wait_for``/``sample``)
or use ``expect``.
"""

from __future__ import annotations

import json
import re
import time

import httpx
import pytest
from gateway_helpers import ADMIN_KEY, USER_KEY, engine_idle, free_port, metrics, start_server, wait_for
from playground_helpers import CHROMIUM_ARGS, NO_CHROMIUM, ScriptedSite, chunk, find_chromium, sample
from playwright.sync_api import Page, expect, sync_playwright

from agentgate.gateway.auth import Access, route_access

needs_chromium = pytest.mark.skipif(find_chromium() is None, reason=NO_CHROMIUM)
STEP_SECONDS = 0.05
MODEL = "SmolLM2-135M-Instruct"
DISCONNECTS = 'agentgate_requests_total{finish_reason="disconnect"}'
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


# -- servers -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site():
    scripted = ScriptedSite().start(free_port())
    yield scripted
    scripted.stop()


@pytest.fixture(scope="module")
def pg_server(tmp_path_factory: pytest.TempPathFactory, site: ScriptedSite):
    server = start_server(
        tmp_path_factory.mktemp("playground-server"),
        "--runner", "null", "--null-step-seconds", str(STEP_SECONDS), "--num-kv-blocks", "64",
        "--max-model-len", "1024", "--allowed-origins", site.url,
        env={"AGENTGATE_API_KEY": USER_KEY, "AGENTGATE_ADMIN_KEY": ADMIN_KEY},
    )  # fmt: skip
    server.admin_headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    yield server
    server.stop()


@pytest.fixture
def pg(pg_server):
    """The null server, idle and unpaused before and after each test."""
    wait_for(lambda: engine_idle(pg_server.url), message="the engine to be idle before the test")
    yield pg_server
    httpx.post(f"{pg_server.url}/resume", headers=pg_server.admin_headers, timeout=10)
    wait_for(lambda: engine_idle(pg_server.url), timeout=20, message="the engine to be idle after the test")


# -- the browser ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    executable = find_chromium()
    if executable is None:
        pytest.skip(NO_CHROMIUM)
    # Waits are for events that come in well under a second on an idle machine;
    # the margin is for a loaded one (2 cores shared with servers and the suite).
    expect.set_options(timeout=15_000)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """A page in a fresh context (empty storage). When the test failed, its
    screenshot goes to <pytest tmp>/playground-screenshots/ and the path is
    printed; an uncaught error in the page's JavaScript fails the test."""
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    tab = context.new_page()
    errors: list[str] = []
    console: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    tab.on("console", lambda message: console.append(f"{message.type}: {message.text}"))
    failed_before = request.session.testsfailed
    yield tab
    try:
        if request.session.testsfailed > failed_before:  # the call phase failed (reported before teardown)
            folder = tmp_path_factory.getbasetemp() / "playground-screenshots"
            folder.mkdir(exist_ok=True)
            path = folder / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', request.node.name)}.png"
            tab.screenshot(path=str(path), full_page=True)
            reporter = request.config.pluginmanager.get_plugin("terminalreporter")
            write = reporter.write_line if reporter else print
            for line in [f"{request.node.nodeid}: screenshot at the failure: {path}", *console[-20:]]:
                write(line)
        assert not errors, f"uncaught errors in the page: {errors}"
    finally:
        context.close()


# -- driving the page ----------------------------------------------------------------


def setting(page: Page, label: str, value: str) -> None:
    """Types into a labelled field and leaves it, as a person would (fires change)."""
    field = page.get_by_label(label, exact=True)
    field.fill(value)
    field.press("Tab")


def open_playground(page: Page, url: str, *, api_key=None, admin_key=None, endpoint=None, path="/") -> None:
    page.goto(url + path)
    if endpoint:
        setting(page, "Endpoint", endpoint)
    if api_key:
        setting(page, "API key", api_key)
    if admin_key:
        setting(page, "Admin key", admin_key)


def send(page: Page, text: str):
    """Types a message and presses Enter; returns the reply's locator."""
    box = page.get_by_label("Message", exact=True)
    box.fill(text)
    box.press("Enter")
    return page.locator(".msg.assistant").last


def text_length(reply) -> int:
    return len(reply.locator(".content").text_content() or "")


# -- without a browser ---------------------------------------------------------------


def test_the_page_and_its_assets_need_no_key_and_the_api_still_does(pg_server):
    url = pg_server.url
    for path in ("/", "/playground"):
        r = httpx.get(url + path)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html"), (path, r.status_code)
        assert '<script type="module" src="/static/js/main.js">' in r.text
        assert "script-src 'self'" in r.headers["content-security-policy"]
    for asset in ("js/main.js", "js/api.js", "js/sse.js", "js/reply.js", "js/view.js", "playground.css"):
        r = httpx.get(f"{url}/static/{asset}")
        assert r.status_code == 200 and r.content, asset
        kind = "css" if asset.endswith(".css") else "javascript"
        assert kind in r.headers["content-type"] and r.headers["cache-control"] == "no-cache", asset
    assert httpx.get(f"{url}/static/nope.js").status_code == 404
    for escape in ("..%2fapp.py", "%2e%2e/app.py", "..%2f..%2fgateway/app.py"):  # no way out of static/
        assert httpx.get(f"{url}/static/{escape}").status_code == 404, escape
    # Only reading the page is open: the API and the operator routes keep their keys.
    assert httpx.get(f"{url}/v1/models").status_code == 401
    assert httpx.post(f"{url}/").status_code == 401
    assert httpx.get(f"{url}/is_paused", headers={"Authorization": f"Bearer {USER_KEY}"}).status_code == 403
    assert route_access("GET", "/static/js/main.js") is Access.OPEN
    assert route_access("POST", "/playground") is Access.USER


# -- in Chromium ---------------------------------------------------------------------


@needs_chromium
def test_sse_parser_reply_merging_and_metrics_parsing_in_the_browser(page: Page, site: ScriptedSite):
    """The page's modules on their own: SSE framing split at awkward places,
    tool-call deltas merged by index, Prometheus text."""
    page.goto(site.url)
    result = page.evaluate(
        """async () => {
        const { sseEvents } = await import('/static/js/sse.js');
        const { Reply } = await import('/static/js/reply.js');
        const { parsePrometheus } = await import('/static/js/api.js');
        const pieces = ['data: {"a"', ': 1}\\r', '\\n\\r\\n: ping\\r\\n\\r\\nda', 'ta: one\\ndata:two\\n\\n',
                        'event: x\\rdata: cr only\\r\\r', 'data: [DONE]\\r\\n\\r\\n', 'data: unfinished'];
        const bytes = new ReadableStream({ start(c) {
            const enc = new TextEncoder();
            for (const p of pieces) c.enqueue(enc.encode(p));
            c.close();
        } });
        const events = [];
        for await (const e of sseEvents(bytes)) events.push([e.event, e.data]);
        const reply = new Reply(0);
        const d = (tool_calls) => ({ choices: [{ index: 0, delta: { tool_calls }, finish_reason: null }] });
        reply.apply(d([{ index: 0, id: 'c0', type: 'function', function: { name: 'f', arguments: '' } }]), 10);
        reply.apply(d([{ index: 1, id: 'c1', function: { name: 'g', arguments: '{"y"' } }]), 20);
        reply.apply(d([{ index: 0, function: { arguments: '{"x": 1}' } }]), 30);
        reply.apply(d([{ index: 1, function: { arguments: ': 2}' } }]), 40);
        reply.apply({ choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls' }] }, 50);
        const m = parsePrometheus('# HELP x\\nagentgate_requests_running 2.0\\nagentgate_requests_total{finish_reason="stop"} 5\\n');
        return { events, calls: reply.toolCalls, finish: reply.finishReason, ttft: reply.ttftMs,
                 rate: reply.tokensPerSecond, message: reply.message(), m };
    }"""
    )
    assert result["events"] == [
        ["message", '{"a": 1}'],
        ["message", "one\ntwo"],
        ["x", "cr only"],
        ["message", "[DONE]"],
    ]
    assert result["calls"] == [
        {"id": "c0", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}},
        {"id": "c1", "type": "function", "function": {"name": "g", "arguments": '{"y": 2}'}},
    ]
    assert result["finish"] == "tool_calls" and result["ttft"] == 10
    assert result["rate"] == pytest.approx(3 * 1000 / 30)  # 4 pieces, 3 after the first, over 30 ms
    assert result["message"] == {"role": "assistant", "content": None, "tool_calls": result["calls"]}
    assert result["m"] == {"agentgate_requests_running": 2, 'agentgate_requests_total{finish_reason="stop"}': 5}


@needs_chromium
def test_reply_streams_in_token_by_token_and_the_key_is_kept(page: Page, pg):
    open_playground(page, pg.url, api_key=USER_KEY)
    expect(page.locator("#model")).to_have_text(f"model: {MODEL}")
    expect(page.get_by_role("region", name="Operator")).to_be_hidden()  # no admin key
    page.reload()
    expect(page.get_by_label("API key", exact=True)).to_have_value(USER_KEY)  # entered once, kept
    expect(page.locator("#model")).to_have_text(f"model: {MODEL}")

    setting(page, "Max tokens", "40")  # 40 steps of 0.05 s: about 2 s
    setting(page, "Seed", "7")
    reply = send(page, "Tell me a story")
    lengths = sample(
        lambda: text_length(reply),
        every=0.1,
        until=lambda: reply.get_attribute("data-state") is not None,
        timeout=20,
    )
    expect(reply).to_have_attribute("data-state", "done")
    seen = [n for n in lengths if n]
    assert seen == sorted(seen), f"the reply's text shrank: {lengths}"
    assert len(set(seen)) >= 5, f"the reply did not grow over time (lengths sampled every 0.1 s: {lengths})"
    assert seen[0] < text_length(reply), "the whole reply was there at the first sample"
    stats = reply.locator(".stats").text_content()
    found = re.fullmatch(r"TTFT (\d+) ms · ([\d.]+) tok/s · 40 tokens · finish: length", stats)
    assert found, stats
    assert 5 < float(found[2]) < 5 / STEP_SECONDS, f"tokens/s {found[2]} is not near 1/{STEP_SECONDS}"
    expect(page.get_by_role("button", name="Send")).to_be_enabled()
    expect(page.get_by_role("button", name="Stop")).to_be_disabled()


@needs_chromium
def test_stop_aborts_the_request_on_the_server(page: Page, pg):
    disconnects = metrics(pg.url)[DISCONNECTS]
    open_playground(page, pg.url, api_key=USER_KEY)
    setting(page, "Max tokens", "900")  # 45 s if nobody stops it
    reply = send(page, "Go on for a while")
    wait_for(lambda: text_length(reply) > 40, timeout=10, message="the reply to stream in")
    during = metrics(pg.url)
    assert during["agentgate_requests_running"] == 1 and during["agentgate_kv_cache_usage_ratio"] > 0, during

    page.get_by_role("button", name="Stop").click()
    wait_for(lambda: engine_idle(pg.url), timeout=10, message="the server to abort the stopped request")
    assert metrics(pg.url)[DISCONNECTS] == disconnects + 1
    expect(reply).to_have_attribute("data-state", "stopped")
    expect(reply.locator(".stats")).to_contain_text("stopped")
    stopped_at = text_length(reply)
    time.sleep(0.3)
    assert text_length(reply) == stopped_at
    expect(page.get_by_role("button", name="Send")).to_be_enabled()
    expect(page.get_by_role("button", name="Stop")).to_be_disabled()


@needs_chromium
def test_operator_strip_pause_keep_freezes_the_stream_and_resume_continues_it(page: Page, pg):
    open_playground(page, pg.url, api_key=USER_KEY, admin_key=ADMIN_KEY)
    strip = page.get_by_role("region", name="Operator")
    expect(strip).to_be_visible()
    state = strip.get_by_role("status")
    expect(state).to_have_text("serving")
    expect(page.locator("#op-running")).to_have_text("0")

    setting(page, "Max tokens", "900")
    reply = send(page, "Keep going")
    wait_for(lambda: text_length(reply) > 20, timeout=10, message="the reply to stream in")
    expect(page.locator("#op-running")).to_have_text("1")  # refreshed from /metrics
    expect(page.locator("#op-kv")).not_to_have_text(re.compile(r"^(–|0\.0%)$"))

    page.get_by_label("Pause mode").select_option("keep")
    strip.get_by_role("button", name="Pause").click()
    expect(state).to_have_text("paused (keep)")
    assert httpx.get(f"{pg.url}/is_paused", headers=pg.admin_headers).json()["is_paused"] is True

    # A step already in flight may still land: wait for the text to settle, then watch it.
    def settled() -> bool:
        before = text_length(reply)
        time.sleep(0.3)
        return text_length(reply) == before

    wait_for(settled, timeout=5, message="the text to stop growing after the pause")
    frozen = text_length(reply)
    time.sleep(0.8)  # 16 steps' worth
    assert text_length(reply) == frozen, "text arrived while paused in keep mode"
    expect(reply).to_have_attribute("aria-busy", "true")  # frozen, not ended

    strip.get_by_role("button", name="Resume").click()
    expect(state).to_have_text("serving")
    wait_for(lambda: text_length(reply) > frozen + 10, timeout=10, message="the stream to continue after resume")
    page.get_by_role("button", name="Stop").click()
    wait_for(lambda: engine_idle(pg.url), timeout=10, message="the stopped request to be aborted")
    expect(page.locator("#op-running")).to_have_text("0")


@needs_chromium
def test_tool_call_deltas_render_as_they_stream_and_results_go_back(page: Page, site: ScriptedSite):
    """A scripted stream with two tool calls whose id, name and arguments come
    in OpenAI's delta shape, paused half-way through the first's arguments."""

    def call(index, **fields):
        return chunk({"tool_calls": [{"index": index, **fields}]})

    site.requests.clear()
    site.scripts[:] = [
        [
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "Checking."}),
            call(0, id="call_w1", type="function", function={"name": "get_weather", "arguments": ""}),
            call(0, function={"arguments": '{"ci'}),
            "gate",
            call(0, function={"arguments": 'ty": "Paris"}'}),
            call(1, id="call_t2", type="function", function={"name": "get_time", "arguments": '{"tz": '}),
            call(1, function={"arguments": '"CET"}'}),
            chunk({}, finish="tool_calls"),
            chunk(usage={"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}),
        ],
        [chunk({"role": "assistant", "content": "It is 18 °C "}), chunk({"content": "in Paris."}, finish="stop")],
    ]
    open_playground(page, site.url, api_key="any")
    tools = [*WEATHER_TOOLS, {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]
    setting(page, "Tools (JSON list, OpenAI format)", json.dumps(tools))
    page.get_by_label("Tool choice").select_option("required")
    setting(page, "Temperature", "0")
    setting(page, "Max tokens", "64")
    setting(page, "Seed", "3")
    reply = send(page, "Weather and time in Paris?")

    calls = reply.locator(".tool-call")
    expect(calls).to_have_count(1)
    expect(calls.nth(0).locator(".tool-name")).to_have_text("get_weather()")
    expect(calls.nth(0).locator(".tool-id")).to_have_text("call_w1")
    expect(calls.nth(0).locator(".tool-args")).to_have_text('{"ci')  # a fragment, shown mid-stream
    expect(reply.locator(".content")).to_have_text("Checking.")
    expect(reply).to_have_attribute("aria-busy", "true")

    site.release()
    expect(reply).to_have_attribute("data-state", "done")
    expect(calls).to_have_count(2)
    assert json.loads(calls.nth(0).locator(".tool-args").text_content()) == {"city": "Paris"}
    assert json.loads(calls.nth(1).locator(".tool-args").text_content()) == {"tz": "CET"}
    expect(calls.nth(1).locator(".tool-name")).to_have_text("get_time()")
    assert [calls.nth(i).get_attribute("data-valid") for i in (0, 1)] == ["true", "true"]
    expect(reply.locator(".stats")).to_contain_text("12 tokens · finish: tool_calls")

    [body] = site.requests
    assert body["tools"] == tools and body["tool_choice"] == "required"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert (body["temperature"], body["max_tokens"], body["seed"], body["model"]) == (0, 64, 3, "fake-model")
    assert body["messages"] == [{"role": "user", "content": "Weather and time in Paris?"}]

    # Each call's result goes back as a tool message; the model is asked once both are in.
    box = page.get_by_label("Result of get_weather (call_w1)")
    box.fill("18 °C, clear")
    box.press("Enter")
    box = page.get_by_label("Result of get_time (call_t2)")
    box.fill("14:05")
    box.press("Enter")
    answer = page.locator(".msg.assistant").last
    expect(answer.locator(".content")).to_have_text("It is 18 °C in Paris.")
    expect(answer).to_have_attribute("data-state", "done")
    assert len(site.requests) == 2
    assert site.requests[1]["messages"][1:] == [
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "call_w1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "call_t2", "type": "function", "function": {"name": "get_time", "arguments": '{"tz": "CET"}'}},
        ]},
        {"role": "tool", "tool_call_id": "call_w1", "content": "18 °C, clear"},
        {"role": "tool", "tool_call_id": "call_t2", "content": "14:05"},
    ]  # fmt: skip
    expect(page.get_by_label("Message", exact=True)).to_be_visible()


@needs_chromium
def test_a_page_on_another_origin_works_through_cors_and_keys(page: Page, pg, site: ScriptedSite):
    """The page served by another origin (the scripted site, which the gateway
    allows) talks to the gateway cross-origin, with both keys; an origin the
    gateway does not allow is refused by the browser."""
    open_playground(page, site.url, endpoint=pg.url, api_key=USER_KEY, admin_key=ADMIN_KEY)
    expect(page.locator("#model")).to_have_text(f"model: {MODEL}")  # preflighted GET with Authorization
    expect(page.get_by_role("region", name="Operator").get_by_role("status")).to_have_text("serving")
    expect(page.locator("#op-error")).to_be_empty()
    setting(page, "Max tokens", "8")
    reply = send(page, "Hello from elsewhere")
    expect(reply).to_have_attribute("data-state", "done")
    expect(reply.locator(".stats")).to_contain_text("8 tokens · finish: length")

    prompts = metrics(pg.url)["agentgate_prompt_tokens_total"]
    other = f"http://localhost:{site.port}"  # another origin for the browser, not in --allowed-origins
    open_playground(page, other, endpoint=pg.url, api_key=USER_KEY)
    expect(page.locator("#model")).to_contain_text("model: unavailable")
    reply = send(page, "Hello")
    expect(reply).to_have_attribute("data-state", "error")
    assert metrics(pg.url)["agentgate_prompt_tokens_total"] == prompts, "the refused preflight let the request through"


@needs_chromium
def test_a_real_reply_from_the_default_model(page: Page, model_server):
    open_playground(page, model_server.url)
    expect(page.locator("#model")).to_have_text(f"model: {MODEL}")
    setting(page, "Temperature", "0")
    setting(page, "Max tokens", "24")
    reply = send(page, "What is the capital of France?")
    expect(reply).to_have_attribute("data-state", "done", timeout=120_000)
    assert "Paris" in reply.locator(".content").text_content()
    expect(reply.locator(".stats")).to_have_text(re.compile(r"^TTFT \d+ ms · [\d.]+ tok/s · \d+ tokens · finish: "))


def _emits_tool_calls(url: str) -> bool:
    """Whether the gateway turns the model's tool-call markup into streamed
    tool_calls (issue 7), decided from the first deltas: with tool_choice
    'required' a gateway that enforces it withholds the markup as text and
    sends tool_calls; one that does not streams text at once. The stream is
    closed as soon as it tells (which aborts the request)."""
    body = {
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": WEATHER_TOOLS,
        "tool_choice": "required",
        "max_tokens": 48,
        "temperature": 0,
        "stream": True,
    }
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=120) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for choice in json.loads(line[len("data: ") :]).get("choices", []):
                delta = choice.get("delta") or {}
                if delta.get("tool_calls"):
                    return True
                if (delta.get("content") or "").strip():
                    return False
    return False


@needs_chromium
def test_a_real_tool_call_from_the_default_model(page: Page, model_server):
    open_playground(page, model_server.url)
    setting(page, "Tools (JSON list, OpenAI format)", json.dumps(WEATHER_TOOLS))
    page.get_by_label("Tool choice").select_option("required")
    setting(page, "Temperature", "0")
    setting(page, "Max tokens", "48")
    reply = send(page, "What is the weather in Paris?")
    expect(reply).to_have_attribute("data-state", "done", timeout=120_000)
    # Asked only when nothing rendered, so a gateway with tool calls pays for one generation.
    if reply.locator(".tool-call").count() == 0 and not _emits_tool_calls(model_server.url):
        pytest.skip(
            "the gateway does not emit tool_calls yet (issue 7: tool calls and tool_choice 'required'); "
            "the page's tool-call rendering is covered by the scripted-stream test"
        )
    call = reply.locator(".tool-call").first
    expect(call.locator(".tool-name")).to_have_text("get_weather()")
    assert call.get_attribute("data-valid") == "true"
    assert isinstance(json.loads(call.locator(".tool-args").text_content())["city"], str)
    expect(page.get_by_label("Result of get_weather", exact=False)).to_be_visible()  # the page awaits its result
