"""Shared by the web pages' browser tests (playground and dashboard): one
null-runner server and one scripted site for the whole session, one headless
Chromium per module, and a fresh browser context (empty storage) per test.

When a test fails, its page's screenshot goes to
``<pytest tmp>/playground-screenshots/`` and the path is printed; an uncaught
error in the page's JavaScript fails the test. With ``AGENTGATE_SCREENSHOTS``
set to a folder, :func:`shoot` saves the screenshots the tests take on purpose
there (for looking at the pages)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect, sync_playwright

from tests.support.browser import CHROMIUM_ARGS, NO_CHROMIUM, STEP_SECONDS, ScriptedSite, find_chromium
from tests.support.fixtures import idle_around
from tests.support.servers import ADMIN_KEY, USER_KEY, free_port, start_server


@pytest.fixture(scope="session")
def site():
    scripted = ScriptedSite().start(free_port())
    yield scripted
    scripted.stop()


@pytest.fixture(scope="session")
def web_server(tmp_path_factory: pytest.TempPathFactory, site: ScriptedSite):
    """A null-runner server (0.05 s per step), API key + admin key, a small KV
    cache so its usage shows, the embedded Redis (sessions), CORS for the site."""
    # Formatted by hand: each flag beside its value, as on a command line.
    server = start_server(
        tmp_path_factory.mktemp("web-server"),
        "--runner", "null", "--null-step-seconds", str(STEP_SECONDS), "--num-kv-blocks", "64",
        "--max-model-len", "1024", "--allowed-origins", site.url,
        env={"AGENTGATE_API_KEY": USER_KEY, "AGENTGATE_ADMIN_KEY": ADMIN_KEY},
    )  # fmt: skip
    server.headers = {"Authorization": f"Bearer {USER_KEY}"}
    server.admin_headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    yield server
    server.stop()


@pytest.fixture
def pg(web_server):
    """The null server, idle and unpaused before and after each test."""
    with idle_around(web_server, before=10, after=20):
        yield web_server


@pytest.fixture(scope="module")
def browser():
    """One Chromium per module: Playwright's sync API keeps an event loop running while it is
    open, which would break the anyio tests of modules that run after (session scope did)."""
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
def new_page(browser, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Opens pages, each in a fresh context (empty storage): ``new_page(width=390, height=844,
    color_scheme="dark")``. On a failure every page's screenshot is saved and its path printed."""
    opened = []

    def open_page(width: int = 1280, height: int = 800, **context_options):
        context = browser.new_context(viewport={"width": width, "height": height}, **context_options)
        tab = context.new_page()
        errors: list[str] = []
        console: list[str] = []
        tab.on("pageerror", lambda error: errors.append(str(error)))
        tab.on("console", lambda message: console.append(f"{message.type}: {message.text}"))
        opened.append((context, tab, errors, console))
        return tab

    failed_before = request.session.testsfailed
    yield open_page
    failed = request.session.testsfailed > failed_before  # the call phase failed (reported before teardown)
    try:
        for n, (context, tab, errors, console) in enumerate(opened):
            if failed:
                folder = tmp_path_factory.getbasetemp() / "playground-screenshots"
                folder.mkdir(exist_ok=True)
                path = folder / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', request.node.name)}-{n}.png"
                tab.screenshot(path=str(path), full_page=True)
                reporter = request.config.pluginmanager.get_plugin("terminalreporter")
                write = reporter.write_line if reporter else print
                for line in [f"{request.node.nodeid}: screenshot at the failure: {path}", *console[-20:]]:
                    write(line)
            assert not errors, f"uncaught errors in the page: {errors}"
    finally:
        for context, *_ in opened:
            context.close()


@pytest.fixture
def page(new_page):
    """A desktop-sized page (1280x800) in a fresh context."""
    return new_page()
