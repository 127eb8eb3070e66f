"""The real OpenAI SDK (sync and async) against `agentgate serve` with the
default model on the sync runner."""

from __future__ import annotations

import json
import re
from pathlib import Path

import anyio
import httpx
import openai
import pytest

from tests.support.answers import CAPITAL_CHAT, reference_chat, reference_completion
from tests.support.http import engine_idle, metrics, wait_for

MESSAGES = CAPITAL_CHAT


@pytest.fixture(scope="module")
def client(model_server):
    with openai.OpenAI(base_url=f"{model_server.url}/v1", api_key="unused", max_retries=0) as c:
        yield c


@pytest.fixture(scope="module")
def model(client) -> str:
    [card] = client.models.list().data
    return card.id


def _prompt_tokens(url: str, messages) -> int:
    return httpx.post(f"{url}/tokenize", json={"messages": messages}).json()["count"]


def test_models_lists_the_served_model(client, model_server):
    [card] = client.models.list().data
    assert card.id == "SmolLM2-135M-Instruct" and card.object == "model"
    assert card.max_model_len == 2048


def test_chat_non_streaming(client, model, model_server):
    reference = reference_chat(model_server.url, MESSAGES, max_tokens=12)  # what the server answers over plain HTTP
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=MESSAGES, max_tokens=12, temperature=0, extra_headers={"X-Request-Id": "sdk-chat-1"}
    )
    assert raw.headers["x-request-id"] == "sdk-chat-1"
    completion = raw.parse()
    assert completion.id == "chatcmpl-sdk-chat-1" and completion.object == "chat.completion"
    [choice] = completion.choices
    assert choice.message.role == "assistant" and choice.message.content == reference["message"]["content"]
    assert choice.finish_reason == reference["finish_reason"]
    usage = completion.usage
    assert usage.prompt_tokens == _prompt_tokens(model_server.url, MESSAGES)
    assert 0 < usage.completion_tokens <= 12 and usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_chat_streaming_matches_non_streaming_with_usage(client, model):
    reference = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=10, temperature=0)
    stream = client.chat.completions.create(
        model=model,
        messages=MESSAGES,
        max_tokens=10,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == reference.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [reference.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage == reference.usage


def test_chat_n2_and_stop_string(client, model):
    completion = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=4, temperature=0.8, n=2)
    assert sorted(c.index for c in completion.choices) == [0, 1]
    assert completion.usage.completion_tokens >= 2 and all(c.message.content for c in completion.choices)
    full = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=8, temperature=0)
    text = full.choices[0].message.content
    word = text.split()[2]
    stopped = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=8, temperature=0, stop=[word])
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.choices[0].message.content == text[: text.index(word)]


def test_chat_logprobs(client, model):
    completion = client.chat.completions.create(
        model=model, messages=MESSAGES, max_tokens=5, temperature=0, logprobs=True, top_logprobs=3
    )
    [choice] = completion.choices
    content = choice.logprobs.content
    assert len(content) == completion.usage.completion_tokens
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[-1].logprob
        # greedy: the sampled token is the most likely one
        assert entry.token == entry.top_logprobs[0].token and entry.logprob == pytest.approx(
            entry.top_logprobs[0].logprob
        )
        assert bytes(entry.bytes).decode(errors="replace") == entry.token


def test_seed_reproducibility(client, model):
    def sample(seed: int) -> str:
        return (
            client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": "Tell me a story."}],
                max_tokens=8,
                temperature=1.0,
                seed=seed,
            )
            .choices[0]
            .message.content
        )

    # Warm the prefix cache first: on CPU the engine's seeded samples can differ between a prompt
    # computed in full and one read from the prefix cache (float rounding; reported to the engine).
    sample(99)
    first, again = sample(1234), sample(1234)
    assert first == again
    others = {sample(s) for s in (1, 2)}
    assert len(others | {first}) > 1, "different seeds never changed the text: seeds are ignored"
    # n > 1: each choice has its own seed stream (seed + index, as in vLLM): they differ, and each
    # is what a request seeded with its stream's seed samples
    three = [
        c.message.content
        for c in client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Tell me a story."}],
            max_tokens=8,
            temperature=1.0,
            seed=1233,
            n=3,
        ).choices
    ]
    assert three[1] == first and len(set(three)) > 1


def test_completions_non_streaming_echo_and_logprobs(client, model):
    completion = client.completions.create(
        model=model, prompt="The capital of France is", max_tokens=4, temperature=0, logprobs=2
    )
    [choice] = completion.choices
    assert completion.object == "text_completion" and choice.text
    lp = choice.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == completion.usage.completion_tokens
    assert all(len(top) <= 2 for top in lp.top_logprobs) and lp.text_offset[0] == 0
    assert "".join(lp.tokens) == choice.text or choice.finish_reason == "stop"
    echoed = client.completions.create(
        model=model, prompt="The capital of France is", max_tokens=4, temperature=0, echo=True
    )
    assert echoed.choices[0].text == "The capital of France is" + choice.text


def test_completions_streaming_n2_with_usage(client, model):
    stream = client.completions.create(
        model=model,
        prompt="Once upon a time",
        max_tokens=6,
        temperature=0.7,
        n=2,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    texts = {0: "", 1: ""}
    finished = set()
    for chunk in chunks[:-1]:
        for choice in chunk.choices:
            texts[choice.index] += choice.text
            if choice.finish_reason:
                finished.add(choice.index)
    assert finished == {0, 1} and all(texts.values())
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12


@pytest.mark.anyio
async def test_async_client_chat_and_completions(model_server, model):
    # The server's own answers, one at a time, before the two run side by side.
    expected = {
        "chat": reference_chat(model_server.url, MESSAGES, max_tokens=6)["message"]["content"],
        "stream": reference_completion(model_server.url, "1, 2, 3,", max_tokens=6)["text"],
    }
    async with openai.AsyncOpenAI(base_url=f"{model_server.url}/v1", api_key="unused", max_retries=0) as client:

        async def chat() -> str:
            out = await client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=6, temperature=0)
            return out.choices[0].message.content

        async def stream() -> str:
            parts = []
            async for chunk in await client.completions.create(
                model=model, prompt="1, 2, 3,", max_tokens=6, temperature=0, stream=True
            ):
                parts += [c.text for c in chunk.choices]
            return "".join(parts)

        results = {}

        async def run(name, fn):
            results[name] = await fn()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(run, "chat", chat)
            tasks.start_soon(run, "stream", stream)
        assert results == expected


@pytest.mark.anyio
async def test_closing_a_stream_early_aborts_the_request(model_server, model):
    url = model_server.url
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0) as client:
        stream = await client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Write a very long essay about the sea."}],
            max_tokens=1000,
            temperature=0,
            stream=True,
            extra_body={"ignore_eos": True},
        )
        received = 0
        async for _ in stream:
            received += 1
            if received == 3:
                break

        def running() -> (
            bool
        ):  # engine stats come from a utility call, which a loaded machine can delay past /metrics' 2 s
            during = metrics(url)
            return during["agentgate_kv_cache_usage_ratio"] > 0 and during["agentgate_requests_running"] == 1

        await anyio.to_thread.run_sync(
            lambda: wait_for(running, timeout=15, message="the request running in the engine")
        )
        await stream.close()
    await anyio.to_thread.run_sync(lambda: wait_for(lambda: engine_idle(url), timeout=10, message="KV usage 0"))


def test_sdk_errors(client, model):
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="no-such-model", messages=MESSAGES)
    assert info.value.body["param"] == "model" and info.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=5000)
    assert info.value.body["param"] == "max_tokens" and info.value.body["code"] == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=model, messages=MESSAGES, temperature=-1)
    assert info.value.body["param"] == "temperature"


def test_cached_tokens_count_the_prefix_cache_hits(client, model):
    """``usage.prompt_tokens_details.cached_tokens``: what the engine's prefix cache served (whole
    16-token blocks), as agent frameworks read it for cost accounting."""
    messages = [{"role": "user", "content": "List three colours of the rainbow, briefly, please."}]
    first = client.chat.completions.create(model=model, messages=messages, max_tokens=1, temperature=0)
    again = client.chat.completions.create(model=model, messages=messages, max_tokens=1, temperature=0)
    prompt = again.usage.prompt_tokens
    assert first.usage.prompt_tokens_details.cached_tokens < prompt
    cached = again.usage.prompt_tokens_details.cached_tokens
    assert 16 <= cached < prompt and cached % 16 == 0, (cached, prompt)


def test_the_readmes_first_example_answers_sensibly(model_server):
    """The README's first curl, as a newcomer runs it (no sampling fields): the server's
    sampling defaults (for this GGUF: temperature 0.2, top_p 0.9) make the answer sensible."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    body = json.loads(
        re.search(r"curl -s http://127\.0\.0\.1:8000/v1/chat/completions .*?-d '(\{.*?\})'", readme, re.S).group(1)
    )
    assert not {"temperature", "top_p", "seed"} & set(body)
    reply = httpx.post(f"{model_server.url}/v1/chat/completions", json=body, timeout=300).json()
    assert "Paris" in reply["choices"][0]["message"]["content"]


@pytest.mark.parametrize(("field", "value"), [("thinking_token_budget", 8), ("reasoning_effort", "low")])
def test_a_thinking_budget_on_a_model_without_a_reasoning_parser_is_a_400_naming_it(client, model, field, value):
    """SmolLM2's own template opens no thinking block: a budget the server cannot keep is refused."""
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=12, extra_body={field: value})
    assert caught.value.body["param"] == field
