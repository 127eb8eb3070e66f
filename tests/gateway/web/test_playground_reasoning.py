"""The playground with a reasoning model (issue 48): the default model under a template that opens
``<think>\\n`` (tests/gateway/thinking_template.jinja), in headless Chromium. The thinking streams
into a "Thinking" block above the answer, folded once the answer starts; the settings' thinking
budget goes out as ``thinking_token_budget`` and bounds it; the Responses option shows the
thinking too and refuses a token budget (its API takes none) naming the field."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import open_playground, send, setting
from tests.support.servers import start_server

TEMPLATE = Path(__file__).parent.parent / "thinking_template.jinja"
END_TAG_TOKENS = 3  # "</think>" in this tokenizer


@pytest.fixture(scope="module")
def thinking_server(tmp_path_factory):
    flags = ["--runner", "sync", "--dtype", "float32", "--max-model-len", "1024", "--chat-template", str(TEMPLATE)]
    live = start_server(tmp_path_factory.mktemp("playground-thinking"), *flags)
    yield live
    live.stop()


def test_the_thinking_streams_above_the_answer_within_the_budget_set(page: Page, thinking_server):
    open_playground(page, thinking_server.url)
    setting(page, "Temperature", "0")
    setting(page, "Max tokens", "48")
    setting(page, "Thinking budget", "8")
    with page.expect_request(lambda request: request.url.endswith("/v1/chat/completions")) as sent:
        reply = send(page, "What is the capital of France?")
    expect(reply).to_have_attribute("data-state", "done", timeout=120_000)
    body = sent.value.post_data_json
    assert body["thinking_token_budget"] == 8
    # The same request, not streamed: its thinking is the page's, within the budget.
    reference = httpx.post(
        f"{thinking_server.url}/v1/chat/completions",
        json={k: v for k, v in body.items() if k not in ("stream", "stream_options")},
        timeout=120,
    ).json()
    assert 0 < reference["usage"]["completion_tokens_details"]["reasoning_tokens"] <= 8 + END_TAG_TOKENS
    thinking = reply.locator("details.reasoning")
    expect(thinking).to_be_visible()
    expect(thinking).not_to_have_attribute("open", "")  # folded once the answer came
    thought = thinking.locator(".thought").text_content()
    answer = reply.locator(".content").text_content()
    assert thought.strip() and answer.strip()
    assert thought.strip() == reference["choices"][0]["message"]["reasoning"].strip()
    assert "<think>" not in answer and "</think>" not in answer and "</think>" not in thought
    thinking.locator("summary").click()
    expect(thinking).to_have_attribute("open", "")


def test_the_responses_option_shows_the_thinking_and_refuses_a_token_budget(page: Page, thinking_server):
    open_playground(page, thinking_server.url)
    page.get_by_role("combobox", name="API", exact=True).select_option("responses")
    setting(page, "Temperature", "0")
    setting(page, "Max tokens", "40")
    setting(page, "Thinking budget", "8")
    send(page, "What is the capital of France?")
    expect(page.locator("#send-error")).to_contain_text("Thinking budget")
    expect(page.get_by_label("Thinking budget", exact=True)).to_have_attribute("aria-invalid", "true")
    setting(page, "Thinking budget", "")
    reply = send(page, "What is the capital of France?")
    expect(reply).to_have_attribute("data-state", "done", timeout=120_000)
    expect(reply.locator("details.reasoning")).to_be_visible()
    assert reply.locator(".thought").text_content().strip()
