"""The playground as a user sees it, against the scripted site (replies as the
test wants them): Markdown and code, the sanitizer, conversations kept across
a reload, edit and regenerate, export, the model picker, the sampling
controls, a setting that cannot be used, phone width, accessibility (axe-core)
in both themes, and tool-call deltas with their ids."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import (
    WEATHER_TOOLS,
    ScriptedSite,
    assert_accessible,
    chunk,
    open_playground,
    reply_script,
    send,
    setting,
    shoot,
)

MARKDOWN = """# Plan

Use **bold**, a [link](https://example.com/docs) and `inline code`:

- one
- two

```python
def greet(name):
    return f"hello {name}"
```
"""
HOSTILE = """Look: <img src=x onerror="window.__pwned = 'img'"> and <script>window.__pwned = 'script'</script>

[click me](javascript:window.__pwned='link') and ![pic](javascript:window.__pwned='image')

<a href="javascript:window.__pwned='html'">raw link</a> <svg onload="window.__pwned='svg'"></svg>
"""


@pytest.fixture
def scripted(site: ScriptedSite):
    site.requests.clear()
    site.scripts.clear()
    site.models[:] = ["fake-model"]
    yield site
    site.scripts.clear()


def test_markdown_renders_with_highlighted_code_and_copy_buttons(new_page, scripted: ScriptedSite):
    page = new_page(permissions=["clipboard-read", "clipboard-write"])
    scripted.scripts.append(reply_script(MARKDOWN))
    open_playground(page, scripted.url, api_key="any")
    reply = send(page, "Plan it")
    expect(reply).to_have_attribute("data-state", "done")
    content = reply.locator(".content")
    expect(content.locator("h1")).to_have_text("Plan")
    expect(content.locator("strong")).to_have_text("bold")
    expect(content.locator("li")).to_have_text(["one", "two"])
    expect(content.locator("a")).to_have_attribute("href", "https://example.com/docs")
    expect(content.locator("a")).to_have_attribute("rel", "noopener noreferrer nofollow")
    expect(content.locator("p code")).to_have_text("inline code")
    assert "```" not in content.text_content()
    block = content.locator(".code-block")
    expect(block.locator(".code-bar span")).to_have_text("python")
    expect(block.locator(".hljs-keyword").first).to_have_text("def")  # highlighted by highlight.js
    block.get_by_role("button", name="Copy python code").click()
    expect(block.get_by_role("button", name="Copy python code")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == 'def greet(name):\n    return f"hello {name}"\n'
    reply.get_by_role("button", name="Copy reply").click()
    assert page.evaluate("navigator.clipboard.readText()") == MARKDOWN
    shoot(page, "playground-markdown")
    page.get_by_label("Theme").select_option("dark")
    shoot(page, "playground-markdown-dark")


def test_model_output_cannot_run_script_even_without_the_csp(page: Page, scripted: ScriptedSite):
    """On /bare (the page without its Content-Security-Policy) only the
    sanitizer stands in the way: raw HTML shows as text, javascript: links
    and images lose their URL, and nothing runs, clicked or not."""
    scripted.scripts.append(reply_script(HOSTILE, pieces=7))
    open_playground(page, scripted.url, api_key="any", path="/bare")
    reply = send(page, "Say something nasty")
    expect(reply).to_have_attribute("data-state", "done")
    content = reply.locator(".content")
    expect(content).to_contain_text("<img src=x onerror=\"window.__pwned = 'img'\">")  # shown, not parsed
    expect(content).to_contain_text("<script>")
    assert content.locator("script, svg, iframe, img[src='x'], [onerror], [onload]").count() == 0
    urls = content.evaluate(
        "node => [...node.querySelectorAll('[href], [src]')].map((e) => e.getAttribute('href') ?? e.getAttribute('src'))"
    )
    assert not [u for u in urls if u.strip().lower().startswith("javascript:")], urls
    content.get_by_text("click me").click()
    page.wait_for_timeout(300)
    assert page.evaluate("window.__pwned") is None
    assert page.url.endswith("/bare"), page.url


def test_conversations_persist_and_edit_regenerate_rename_export_delete(page: Page, scripted: ScriptedSite):
    scripted.scripts.extend(
        [reply_script("First answer."), reply_script("Edited answer."), reply_script("Regenerated answer.")]
    )
    open_playground(page, scripted.url, api_key="any")
    reply = send(page, "First question")
    expect(reply.locator(".content")).to_have_text("First answer.")
    # The text can be whole before the stream's finish arrives; a reload then cuts the stream
    # (saved as "error: network error", seen once in a fresh-clone run on a loaded machine).
    expect(reply).to_have_attribute("data-state", "done")

    page.reload()  # kept in this browser
    conversations = page.get_by_role("navigation", name="Conversations")
    expect(conversations.get_by_role("button", name="First question")).to_have_attribute("aria-current", "true")
    expect(page.locator(".msg.user .content")).to_have_text("First question")
    expect(page.locator(".msg.assistant .content")).to_have_text("First answer.")
    expect(page.locator(".msg.assistant .stats")).to_contain_text("finish: stop")

    # Edit the question: the conversation is cut there and asked again.
    page.locator(".msg.user").get_by_role("button", name="Edit message").click()
    box = page.get_by_role("textbox", name="Edit message")
    box.fill("Edited question")
    page.get_by_role("button", name="Save & regenerate").click()
    expect(page.locator(".msg.assistant .content")).to_have_text("Edited answer.")
    expect(page.locator(".msg")).to_have_count(2)
    assert scripted.requests[-1]["messages"] == [{"role": "user", "content": "Edited question"}]

    # Regenerate the last reply: the same messages again, the reply replaced.
    page.get_by_role("button", name="Regenerate").click()
    expect(page.locator(".msg.assistant .content")).to_have_text("Regenerated answer.")
    expect(page.locator(".msg")).to_have_count(2)
    assert scripted.requests[-1]["messages"] == [{"role": "user", "content": "Edited question"}]

    # Rename (asked in a dialog), then a new conversation, then back.
    conversations.get_by_role("button", name="Rename").click()
    dialog = page.get_by_role("dialog", name="Rename the conversation")
    dialog.get_by_label("Title").fill("Renamed")
    dialog.get_by_role("button", name="Rename").click()
    expect(conversations.get_by_role("button", name="Renamed")).to_have_attribute("aria-current", "true")
    conversations.get_by_role("button", name="New conversation").click()
    expect(page.locator(".msg")).to_have_count(0)
    conversations.get_by_role("button", name="Renamed").click()
    expect(page.locator(".msg.assistant .content")).to_have_text("Regenerated answer.")

    with page.expect_download() as download:
        conversations.get_by_role("button", name="Export").click()
    exported = json.loads(open(download.value.path()).read())
    assert exported["title"] == "Renamed" and download.value.suggested_filename == "Renamed.json"
    assert [(m["role"], m["content"]) for m in exported["messages"]] == [
        ("user", "Edited question"),
        ("assistant", "Regenerated answer."),
    ]
    shoot(page, "playground-conversations")

    conversations.get_by_role("button", name="Delete").click()
    page.get_by_role("dialog", name="Delete the conversation?").get_by_role("button", name="Delete").click()
    expect(conversations.get_by_role("button", name="Renamed")).to_have_count(0)
    page.reload()
    expect(conversations.get_by_role("button", name="Renamed")).to_have_count(0)


def test_the_model_picker_lists_the_served_models_and_the_choice_is_sent(page: Page, scripted: ScriptedSite):
    scripted.models[:] = ["small-model", "big-model"]
    scripted.scripts.append(reply_script("Hi."))
    open_playground(page, scripted.url, api_key="any")
    picker = page.get_by_label("Model", exact=True)
    expect(picker.locator("option")).to_have_text(["small-model", "big-model"])
    expect(picker).to_have_value("small-model")
    picker.select_option("big-model")
    expect(send(page, "Hello")).to_have_attribute("data-state", "done")
    assert scripted.requests[-1]["model"] == "big-model"
    page.reload()
    expect(page.get_by_label("Model", exact=True)).to_have_value("big-model")


def test_sampling_controls_go_into_the_request(page: Page, scripted: ScriptedSite):
    scripted.scripts.append(reply_script('{"ok": true}'))
    open_playground(page, scripted.url, api_key="any")
    for label, value in [
        ("Top p", "0.9"),
        ("Seed", "11"),
        ("Presence penalty", "0.5"),
        ("Frequency penalty", "0.25"),
        ("Repetition penalty", "1.1"),
    ]:
        setting(page, label, value)
    page.get_by_label("Stop sequences").fill("END\n###")
    page.get_by_label("Response format").select_option("json_schema")
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
    setting(page, "JSON schema", json.dumps(schema))
    page.get_by_role("button", name="Insert an example tool").click()
    page.get_by_label("Tool choice").select_option("function:get_weather")
    page.get_by_label("Parallel tool calls").uncheck()
    expect(send(page, "Go")).to_have_attribute("data-state", "done")
    body = scripted.requests[-1]
    assert (body["top_p"], body["seed"], body["presence_penalty"]) == (0.9, 11, 0.5)
    assert (body["frequency_penalty"], body["repetition_penalty"], body["stop"]) == (0.25, 1.1, ["END", "###"])
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "reply", "schema": schema, "strict": True},
    }
    assert body["tools"][0]["function"]["name"] == "get_weather"
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert body["parallel_tool_calls"] is False


def test_a_setting_that_cannot_be_used_is_reported_beside_send(page: Page, scripted: ScriptedSite):
    open_playground(page, scripted.url, api_key="any")
    tools = page.get_by_label("Tools (JSON list, OpenAI format)")
    expect(tools).to_have_value("")
    expect(tools).to_have_attribute("placeholder", "none")  # an empty box does not look configured
    setting(page, "Tools (JSON list, OpenAI format)", '[{"type": "function", ')
    box = page.get_by_label("Message", exact=True)
    box.fill("Hello")
    box.press("Enter")
    error = page.locator("#send-error")
    expect(error).to_contain_text("Tools: not JSON")
    expect(error).to_be_in_viewport()  # beside Send, not below the fold of the settings column
    expect(tools).to_have_attribute("aria-invalid", "true")
    expect(box).to_have_value("Hello")  # kept, nothing sent
    assert scripted.requests == []
    shoot(page, "playground-bad-tools")
    error.get_by_role("button", name="Show the field").click()
    expect(tools).to_be_focused()
    setting(page, "Tools (JSON list, OpenAI format)", "")
    expect(tools).not_to_have_attribute("aria-invalid", "true")
    expect(error).to_be_empty()


def test_phone_width_keeps_everything_reachable(new_page, scripted: ScriptedSite):
    page = new_page(width=390, height=844, is_mobile=True, has_touch=True)
    scripted.scripts.append(reply_script("Short **answer** with `code`."))
    open_playground(page, scripted.url)
    expect(page.locator("#settings-panel")).not_to_have_attribute("open", "")  # folded away on a phone
    page.locator("#settings-panel > summary").click()
    setting(page, "API key", "any")
    reply = send(page, "Hi from a phone")
    expect(reply.locator(".content strong")).to_have_text("answer")
    width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width == [390, 390], f"the page scrolls sideways at phone width: {width}"
    shoot(page, "playground-phone", full_page=True)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_no_accessibility_violations_in_either_theme(new_page, scripted: ScriptedSite, scheme: str):
    """axe-core (WCAG 2 A/AA rules: labels, names, contrast, ...) on a page with a
    Markdown reply, a tool call and the operator strip, in each theme."""
    page = new_page(color_scheme=scheme)
    scripted.scripts.append(reply_script(MARKDOWN))
    open_playground(page, scripted.url, api_key="any")
    expect(send(page, "Plan it")).to_have_attribute("data-state", "done")
    assert_accessible(page)


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
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "call_w1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {"id": "call_t2", "type": "function", "function": {"name": "get_time", "arguments": '{"tz": "CET"}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_w1", "content": "18 °C, clear"},
        {"role": "tool", "tool_call_id": "call_t2", "content": "14:05"},
    ]
    expect(page.get_by_label("Message", exact=True)).to_be_visible()
    # Each result names its call: two results of one function can be told apart.
    expect(page.locator(".msg.tool .who")).to_have_text(
        ["Tool result · get_weather · call_w1", "Tool result · get_time · call_t2"]
    )

    # A call cut short by max_tokens is shown as incomplete: no result is asked for, none is sent.
    site.scripts[:] = [
        [
            chunk({"role": "assistant", "content": ""}),
            call(0, id="call_x3", type="function", function={"name": "get_weather", "arguments": '{"city": "Ly'}),
            chunk({}, finish="length"),
        ],
        [chunk({"role": "assistant", "content": "Sure."}, finish="stop")],
    ]
    cut = send(page, "And in Lyon?")
    expect(cut).to_have_attribute("data-state", "done")
    expect(cut.locator(".tool-call")).to_have_attribute("data-truncated", "true")
    expect(cut.locator(".tool-note")).to_have_text("incomplete (finish: length): not sent to a tool")
    expect(page.get_by_label("Message", exact=True)).to_be_visible()  # not "Result of get_weather (call_x3)"
    send(page, "Never mind")
    expect(page.locator(".msg.assistant").last.locator(".content")).to_have_text("Sure.")
    assert site.requests[-1]["messages"][-2:] == [
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "Never mind"},
    ]
