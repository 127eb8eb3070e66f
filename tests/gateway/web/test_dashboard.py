"""The operator dashboard (/dashboard, its numbers at /dashboard/stats) against
the null-runner server: the numbers under load, their arithmetic in the
browser, the plots moving while a load runs, the KV-retention panel after an
agent program's turns, pause and resume and abort through their
confirmations, a wrong key, and phone width; and on the default model's
server with no keys, where the page asks for no key and its plots fill after
one request."""

from __future__ import annotations

import re
import threading
import time

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import assert_accessible, sample, setting, shoot
from tests.support.fixtures import idle_around
from tests.support.http import wait_for
from tests.support.servers import ADMIN_KEY, USER_KEY


class Load:
    """``streams`` streaming chat requests at a time, each ``tokens`` long, until stopped."""

    def __init__(self, url: str, streams: int = 3, tokens: int = 120) -> None:
        self.url, self.tokens, self.done = url, tokens, threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(streams)]
        self.session = "dash-session"

    def _run(self) -> None:
        body = {"messages": [{"role": "user", "content": "load"}], "max_tokens": self.tokens, "stream": True}
        headers = {"Authorization": f"Bearer {USER_KEY}", "X-Session-Id": self.session}
        for _ in range(20):  # bounded
            if self.done.is_set():
                return
            try:
                with httpx.stream(
                    "POST", f"{self.url}/v1/chat/completions", json=body, headers=headers, timeout=60
                ) as r:
                    for _ in r.iter_lines():
                        if self.done.is_set():
                            return
            except httpx.HTTPError:
                return

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        for thread in self.threads:
            thread.join(30)


def open_dashboard(page: Page, url: str, key: str) -> None:
    page.goto(f"{url}/dashboard")
    setting(page, "Admin key", key)


def latest(page: Page, plot: str) -> str:
    return page.locator(f"#plot-{plot} .latest").text_content() or ""


def number(text: str, name: str) -> float | None:
    found = re.search(rf"{name} ([\d.]+)", text)
    return float(found[1]) if found else None


PLOTS = ("load", "kv", "prefix", "tps", "ttft", "itl")


def dashboard_stats(server) -> dict:
    return httpx.get(f"{server.url}/dashboard/stats", headers=server.admin_headers).json()


def test_the_stats_endpoint_reports_engines_latencies_and_requests(pg):
    with Load(pg.url, streams=2, tokens=60):
        wait_for(
            lambda: len(httpx.get(f"{pg.url}/dashboard/stats", headers=pg.admin_headers).json()["requests"]) == 2,
            timeout=15,
            message="two requests in flight",
        )
        time.sleep(0.5)
        stats = httpx.get(f"{pg.url}/dashboard/stats", headers=pg.admin_headers).json()
    [engine] = stats["engines"]
    assert engine["alive"] and engine["running"] == 2 and engine["kv_usage"] > 0 and engine["paused"] == "unpaused"
    assert engine["tokens"] >= sum(r["output_tokens"] for r in stats["requests"]) > 0
    for request in stats["requests"]:
        assert request["age"] > 0 and request["prompt_tokens"] > 0
        assert request["session"].endswith(".dash-session")  # filed under the user's key (issue 50)
        assert request["owner"].startswith("key:") and request["engine"] == engine["address"]
    for name in ("ttft", "itl"):
        for h in (stats[name], engine[name]):  # all engines', and this engine's own
            assert (
                len(h["counts"]) == len(h["bounds"]) + 1 and h["counts"] == sorted(h["counts"]) and h["counts"][-1] > 0
            )
    after = httpx.get(f"{pg.url}/dashboard/stats", headers=pg.admin_headers).json()
    assert after["engines"][0]["tokens"] >= engine["tokens"]  # cumulative: finished requests keep their tokens
    retention = stats["retention"]  # the engine's figures (one engine: summed over one)
    assert retention["max_held_blocks"] == 51  # --kv-retention-max-fraction 0.8 of --num-kv-blocks 64
    assert retention["pins"] >= 0 and retention["held_blocks"] <= retention["max_held_blocks"]
    assert stats["budget_closed"] == 0  # no forced reply was cut by its budget (issue 35)


def test_timeline_rates_and_percentiles_in_the_browser(page: Page, pg):
    page.goto(f"{pg.url}/dashboard")
    result = page.evaluate(
        """async () => {
        const { Timeline, quantile } = await import('/static/js/dashboard/timeline.js');
        const h = (counts) => ({ bounds: [0.01, 0.1, 1], counts, sum: 0 });
        const snap = (time, tokens, queries, hits, ttft) => ({
            time, replica: 'r', paused: false, requests: [], itl: h([0, 0, 0, 0]), ttft: h(ttft),
            engines: [{ address: 'e', running: 2, waiting: 1, kv_usage: 0.25, prefix_queries: queries,
                        prefix_hits: hits, tokens }] });
        const t = new Timeline(60);
        t.push(snap(100, 0, 0, 0, [0, 0, 0, 0]));
        t.push(snap(101, 50, 100, 75, [0, 10, 10, 10]));
        t.push(snap(102, 150, 100, 75, [0, 10, 20, 20]));
        const changed = t.push({ ...snap(103, 0, 0, 0, [0, 0, 0, 0]), engines: [] });
        return { q: [quantile([1, 2], [0, 10, 10], 0.5), quantile([1, 2], [0, 0, 4], 0.5), quantile([1], [0, 0], 0.5)],
                 points: t.points.length, changed,
                 series: (() => { const t2 = new Timeline(60); t2.push(snap(100, 0, 0, 0, [0,0,0,0]));
                     t2.push(snap(101, 50, 100, 75, [0, 10, 10, 10])); t2.push(snap(102, 150, 100, 75, [0, 10, 20, 20]));
                     return ['load', 'kv', 'prefix', 'tps', 'ttft'].map((p) => t2.series(p)); })(),
                 two: (() => { const t3 = new Timeline(60);
                     const pair = (time, a, b) => ({ ...snap(time, 0, 0, 0, [0, 0, 0, 0]), engines: [
                         { ...snap(0, a, 0, 0, [0]).engines[0], address: 'e1' },
                         { ...snap(0, b, 0, 0, [0]).engines[0], address: 'e2' }] });
                     t3.push(pair(10, 0, 0)); t3.push(pair(12, 20, 60));
                     return [t3.series('load').names, t3.series('tps')]; })(),
                 perEngine: (() => { const t4 = new Timeline(60);
                     const pair = (time, c1, c2) => ({ ...snap(time, 0, 0, 0, [0, 0, 0, 0]), engines: [
                         { ...snap(0, 0, 0, 0, [0]).engines[0], address: 'e1', ttft: h(c1), itl: h([0, 0, 0, 0]) },
                         { ...snap(0, 0, 0, 0, [0]).engines[0], address: 'e2', ttft: h(c2), itl: h([0, 0, 0, 0]) }] });
                     t4.push(pair(10, [0, 0, 0, 0], [0, 0, 0, 0]));
                     t4.push(pair(11, [10, 10, 10, 10], [0, 0, 10, 10]));
                     return t4.series('ttft'); })() };
    }"""
    )
    assert result["q"] == [1.5, 2, None]  # linear within the bucket; the +Inf bucket gives the last bound
    assert result["changed"] is True and result["points"] == 1  # other engines: the plots start over
    load, kv, prefix, tps, ttft = result["series"]
    assert load["names"] == ["running", "waiting"] and load["data"][1:] == [[2, 2, 2], [1, 1, 1]]
    assert kv["data"][1] == [25, 25, 25]
    assert prefix["data"][1] == [None, 75, None]  # no lookups in the last second: no rate
    assert tps["data"][1] == [None, 50, 100]
    # TTFT over the window: 10 in (0.01, 0.1] then 10 more in (0.1, 1]: p50 = 0.1 s, p90 = 0.1 + 0.9 * 0.8.
    assert ttft["names"] == ["p50", "p90", "p99"]
    assert ttft["data"][1][2] == pytest.approx(100) and ttft["data"][2][2] == pytest.approx(820)
    # Several engines: a line each, and their sum for tokens/s.
    names, tps2 = result["two"]
    assert names == ["running · engine 1", "running · engine 2", "waiting · engine 1", "waiting · engine 2"]
    assert tps2["names"] == ["tok/s · engine 1", "tok/s · engine 2", "all engines"]
    assert tps2["data"][1:] == [[None, 10], [None, 30], [None, 40]]
    # Several engines with their own latencies: the percentiles of each.
    ttft2 = result["perEngine"]
    assert ttft2["names"] == [f"p{q} · engine {e}" for e in (1, 2) for q in (50, 90, 99)]
    assert ttft2["data"][1][1] == pytest.approx(5) and ttft2["data"][4][1] == pytest.approx(550)


SYSTEM = "You are an agent with tools. " + " ".join(f"Rule {i}: search before you answer." for i in range(20))
SEARCH = {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {}}}}


def program_turns(server) -> None:
    """An agent program's two turns (``prompt_cache_key``, tools offered): a first one, then one
    whose messages end in a call and its result. The null runner's first reply calls nothing, so
    the call is the client's word: the second turn is no return on the engine's count."""
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Find the answer."}]
    call = {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}
    returning = [
        *messages,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    for turn in (messages, returning):
        body = {"messages": turn, "tools": [SEARCH], "prompt_cache_key": "dash-program", "max_tokens": 4}
        r = httpx.post(f"{server.url}/v1/chat/completions", json=body, headers=server.headers, timeout=30)
        assert r.status_code == 200, r.text


def test_the_retention_panel_shows_the_engines_figures(page: Page, pg):
    before = dashboard_stats(pg)["retention"]
    program_turns(pg)
    after = dashboard_stats(pg)["retention"]
    assert after["pinned_total"] >= before["pinned_total"] + 2  # each turn offered tools: its KV was pinned
    assert after["tool_gaps"] == before["tool_gaps"] + 1
    # A tool-call tail no engine saw called is not counted as a return (engine/scheduling/retention.py)
    assert after["returning_turns"] == before["returning_turns"]
    assert after["returning_hits_tokens"] == before["returning_hits_tokens"]
    open_dashboard(page, pg.url, ADMIN_KEY)

    def figure(label: str):
        return page.locator(f'#retention dt:text-is("{label}") + dd')

    queries = after["returning_queries_tokens"]  # none where this server never saw a real return
    rate = f"{round(100 * after['returning_hits_tokens'] / queries)}%" if queries else "–"
    expect(figure("Returning turns")).to_have_text(f"{after['returning_turns']} · prefix hit rate {rate}")
    expect(figure("Tool gaps")).to_have_text(re.compile(rf"^{after['tool_gaps']} observed · mean \d+\.\d s$"))
    expect(figure("Pinned now")).to_have_text(re.compile(r"^\d+ programs? · \d+ of at most 51 KV blocks$"))
    expect(figure("Pins made")).to_have_text(str(after["pinned_total"]))
    expect(figure("Pins released")).to_contain_text("program returned")
    shoot(page, "dashboard-retention", full_page=True)
    # The rows from made-up figures: no lookups yet, no rate.
    figures = page.evaluate(
        """async () => {
        const { retentionFigures } = await import('/static/js/dashboard/retention.js');
        const zero = Object.fromEntries(['pins', 'held_blocks', 'max_held_blocks', 'pinned_total', 'released_returned',
            'released_expired', 'released_pressure', 'released_no_tool_call', 'returning_turns',
            'returning_queries_tokens', 'returning_hits_tokens', 'tool_gaps', 'tool_gap_seconds_sum'].map((f) => [f, 0]));
        return retentionFigures({ ...zero, pins: 1, held_blocks: 3, max_held_blocks: 8, released_expired: 2,
                                  tool_gaps: 4, tool_gap_seconds_sum: 10 });
    }"""
    )
    assert figures == [
        ["Pinned now", "1 program · 3 of at most 8 KV blocks"],
        ["Returning turns", "0 · prefix hit rate –"],
        ["Tool gaps", "4 observed · mean 2.5 s"],
        ["Pins made", "0"],
        ["Pins released", "program returned 0 · expired 2 · memory 0 · no tool call 0"],
    ]


def test_plots_move_under_load_and_pause_resume_abort_work(page: Page, pg):
    open_dashboard(page, pg.url, ADMIN_KEY)
    state = page.locator("#state")
    expect(state).to_have_text("serving")
    with Load(pg.url, streams=3, tokens=400):
        wait_for(
            lambda: (number(latest(page, "load"), "running") or 0) >= 2,
            timeout=15,
            message="the load plot to show the running requests",
        )
        wait_for(lambda: (number(latest(page, "tps"), "tok/s") or 0) > 5, timeout=10, message="tokens/s")
        wait_for(lambda: number(latest(page, "ttft"), "p50") is not None, timeout=10, message="TTFT")
        assert (number(latest(page, "kv"), "KV used") or 0) > 0
        assert number(latest(page, "itl"), "p50") is not None
        points = int(page.locator("#plot-load").get_attribute("data-points"))
        before = page.locator("#plot-tps canvas").screenshot()
        time.sleep(2.5)
        assert int(page.locator("#plot-load").get_attribute("data-points")) >= points + 2
        assert page.locator("#plot-tps canvas").screenshot() != before, "the plot did not move"
        rows = page.locator("#requests tr")
        expect(rows).to_have_count(3)
        shoot(page, "dashboard-under-load", full_page=True)

        # Pause (keep): asked first; cancelling does nothing.
        page.get_by_label("Pause mode").select_option("keep")
        page.get_by_role("button", name="Pause").click()
        dialog = page.get_by_role("dialog", name="Pause every engine (keep)?")
        dialog.get_by_role("button", name="Cancel").click()
        assert httpx.get(f"{pg.url}/is_paused", headers=pg.admin_headers).json()["is_paused"] is False
        page.get_by_role("button", name="Pause").click()
        dialog.get_by_role("button", name="Pause").click()
        expect(state).to_have_text(re.compile(r"^paused"))
        assert httpx.get(f"{pg.url}/is_paused", headers=pg.admin_headers).json()["is_paused"] is True
        wait_for(lambda: number(latest(page, "tps"), "tok/s") == 0, timeout=10, message="tokens/s to drop to 0")
        shoot(page, "dashboard-paused", full_page=True)
        page.get_by_role("button", name="Resume").click()
        page.get_by_role("dialog", name="Resume every engine?").get_by_role("button", name="Resume").click()
        expect(state).to_have_text("serving")
        assert httpx.get(f"{pg.url}/is_paused", headers=pg.admin_headers).json()["is_paused"] is False

        # Abort one running request from its row.
        victim = rows.first.locator("th").text_content()
        rows.first.get_by_role("button", name=f"Abort {victim}").click()
        page.get_by_role("dialog", name=f"Abort request {victim}?").get_by_role("button", name="Abort").click()
        expect(page.locator("#notice")).to_have_text(f"Aborted 1 request(s): {victim}.")
        expect(page.locator("#requests th", has_text=victim)).to_have_count(0)

        # Abort by session: the rest of the load's requests.
        page.get_by_label("Abort by").select_option("session_id")
        setting(page, "Value", "dash-session")
        page.get_by_role("button", name="Abort", exact=True).click()
        page.get_by_role("dialog", name="Abort the requests of session dash-session?").get_by_role(
            "button", name="Abort"
        ).click()
        expect(page.locator("#notice")).to_contain_text("Aborted")


def test_a_wrong_admin_key_shows_no_numbers_and_the_page_is_accessible(new_page, pg):
    page = new_page()
    page.goto(f"{pg.url}/dashboard")  # no key typed: the page polls, and this server refuses
    expect(page.locator("#state")).to_have_text("enter the admin key")
    expect(page.locator("#error")).to_have_text(re.compile(r"^This server asks for the admin key \(it answered 401: "))
    expect(page.locator("#plot-load")).to_have_attribute("data-points", "0")
    setting(page, "Admin key", USER_KEY)
    expect(page.locator("#state")).to_have_text("admin key rejected")
    expect(page.locator("#error")).to_contain_text("This key is not the admin key")
    expect(page.get_by_role("button", name="Pause")).to_be_disabled()
    expect(page.locator("#plot-load")).to_have_attribute("data-points", "0")
    setting(page, "Admin key", ADMIN_KEY)
    expect(page.locator("#state")).to_have_text("serving")
    expect(page.locator("#plot-itl")).not_to_have_attribute("data-points", "0")
    assert_accessible(page)
    phone = new_page(width=390, height=844, is_mobile=True, color_scheme="dark")
    open_dashboard(phone, pg.url, ADMIN_KEY)
    expect(phone.locator("#state")).to_have_text("serving")
    expect(phone.locator("#plot-itl")).not_to_have_attribute("data-points", "0")
    width = phone.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width == [390, 390], f"the dashboard scrolls sideways at phone width: {width}"
    assert_accessible(phone)
    shoot(phone, "dashboard-phone", full_page=True)


def test_on_the_default_server_with_no_keys_the_plots_fill_after_one_request(page: Page, model_server):
    """As a new user finds it (issue 54): ``agentgate serve`` with no keys on loopback, the
    dashboard opened, one chat request. The page polls without a key and never asks for one."""
    with idle_around(model_server):
        page.goto(f"{model_server.url}/dashboard")
        expect(page.locator("#state")).to_have_text("serving")
        expect(page.get_by_label("Admin key", exact=True)).to_have_value("")
        expect(page.locator("#error")).to_have_text("")
        expect(page.get_by_role("button", name="Pause")).to_be_enabled()
        # (Not asserted: that the latency plots are empty before the request. The worker's shared
        # model server may have served the previous test's requests inside the plots' window.)
        rates: list[float] = []
        body = {"messages": [{"role": "user", "content": "Count to twenty."}], "max_tokens": 48, "ignore_eos": True}
        request = threading.Thread(
            target=lambda: rates.append(
                httpx.post(f"{model_server.url}/v1/chat/completions", json=body, timeout=120).status_code
            )
        )
        request.start()
        seen_tps = sample(
            lambda: number(latest(page, "tps"), "tok/s") or 0,
            every=0.1,
            until=lambda: not request.is_alive(),
            timeout=120,
        )
        request.join()
        assert rates == [200]
        wait_for(lambda: number(latest(page, "ttft"), "p50") is not None, timeout=10, message="TTFT p50")
        wait_for(lambda: number(latest(page, "itl"), "p50") is not None, timeout=10, message="ITL p50")
        wait_for(
            lambda: max(seen_tps) > 0 or (number(latest(page, "tps"), "tok/s") or 0) > 0, timeout=3, message="tok/s"
        )
        for plot in PLOTS:
            assert int(page.locator(f"#plot-{plot}").get_attribute("data-points")) > 0, plot
        assert (number(latest(page, "kv"), "KV used") is not None) and number(
            latest(page, "load"), "running"
        ) is not None
        shoot(page, "dashboard-no-keys", full_page=True)
