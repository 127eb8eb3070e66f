"""LoRA adapters through a live `agentgate serve` (the default model, sync runner, dense float32):
the openai SDK selects an adapter by ``model`` in chat and completions (the text equals the offline
engine's through the same adapter), Responses and Messages select it too, /v1/models lists it with
its parent, an unknown model is a 404 naming it, and adapters load and unload at run time (admin
only; an existing name is a 400; an adapter unloaded while in use lets its request finish)."""

from __future__ import annotations

import threading

import httpx
import openai
import pytest

from agentgate.engine import LLM, SamplingParams
from tests.support.http import wait_for
from tests.support.lora_adapters import write_adapter
from tests.support.servers import start_server

BASE = "SmolLM2-135M-Instruct"
CHAT = [{"role": "user", "content": "Name a colour."}]
PROMPT = "The capital of France is"
ADMIN = {"Authorization": "Bearer admin-key"}


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    root = tmp_path_factory.mktemp("lora-live")
    return {name: write_adapter(root / name, seed=seed) for name, seed in (("rand", 1), ("late", 5), ("busy", 9))}


@pytest.fixture(scope="module")
def server(tmp_path_factory, adapters):
    flags = ["--runner", "sync", "--dtype", "float32", "--quantization", "none", "--max-model-len", "1024"]
    running = start_server(
        tmp_path_factory.mktemp("lora-server"),
        *flags,
        "--lora-modules",
        f"rand={adapters['rand']}",
        "--max-loras",
        "1",
        "--max-cpu-loras",
        "2",
        "--access-log",
        api_key="user-key",
        admin_key="admin-key",
    )
    yield running
    running.stop()


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="user-key", max_retries=0) as c:
        yield c


def test_models_lists_the_adapter_with_its_parent(client):
    cards = {card.id: card for card in client.models.list().data}
    assert set(cards) == {BASE, "rand"}
    assert cards["rand"].parent == BASE and getattr(cards[BASE], "parent", None) is None
    assert client.models.retrieve("rand").parent == BASE


def test_the_sdk_selects_the_adapter_by_model(client, adapters):
    completion = client.completions.create(model="rand", prompt=PROMPT, max_tokens=12, temperature=0)
    base = client.completions.create(model=BASE, prompt=PROMPT, max_tokens=12, temperature=0)
    assert completion.model == "rand" and completion.choices[0].text != base.choices[0].text
    offline = LLM(dtype="float32", quantization="none", lora_modules=(f"rand={adapters['rand']}",), num_kv_blocks=64)
    [reference] = offline.generate(PROMPT, SamplingParams(temperature=0, max_tokens=12), lora="rand")
    assert completion.choices[0].text == reference.text
    chat = client.chat.completions.create(model="rand", messages=CHAT, max_tokens=12, temperature=0)
    chat_base = client.chat.completions.create(model=BASE, messages=CHAT, max_tokens=12, temperature=0)
    assert chat.model == "rand" and chat.choices[0].message.content != chat_base.choices[0].message.content


def test_responses_and_messages_select_the_adapter(server, client):
    def responses(model):
        return client.responses.create(model=model, input="Name a colour.", max_output_tokens=12, temperature=0)

    adapted, base = responses("rand"), responses(BASE)
    assert adapted.model == "rand" and adapted.output_text != base.output_text

    def messages(model):
        body = {"model": model, "max_tokens": 12, "temperature": 0, "messages": CHAT}
        reply = httpx.post(f"{server.url}/v1/messages", json=body, headers={"x-api-key": "user-key"}, timeout=60)
        assert reply.status_code == 200, reply.text
        return reply.json()

    adapted_msg, base_msg = messages("rand"), messages(BASE)
    assert adapted_msg["model"] == "rand" and adapted_msg["content"] != base_msg["content"]


def test_the_access_log_names_the_adapter_of_a_request_that_ran_through_one(server, client):
    """Issue 53: the access line of a request through an adapter ends with ``lora=NAME``; a request on
    the base model's says nothing of adapters."""
    for model in ("rand", BASE):  # one after the other: their lines in that order
        client.completions.create(model=model, prompt=PROMPT, max_tokens=2)
    lines = [line for line in server.log().splitlines() if '"POST /v1/completions HTTP/1.1" 200' in line]
    adapter, base = lines[-2:]
    assert adapter.endswith(" lora=rand") and " lora=" not in base, lines[-2:]


def test_an_unknown_model_is_a_404_naming_it(client):
    with pytest.raises(openai.NotFoundError, match="`nope` does not exist.*rand"):
        client.chat.completions.create(model="nope", messages=CHAT, max_tokens=2)


def test_adapters_load_and_unload_at_run_time(server, client, adapters, tmp_path):
    url = server.url
    body = {"lora_name": "late", "lora_path": str(adapters["late"])}
    user = httpx.post(f"{url}/v1/load_lora_adapter", json=body, headers={"Authorization": "Bearer user-key"})
    assert user.status_code == 403
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="late", prompt=PROMPT, max_tokens=2)
    (tmp_path / "empty").mkdir()
    bad = {"lora_name": "bad", "lora_path": str(tmp_path / "empty")}
    refused = httpx.post(f"{url}/v1/load_lora_adapter", json=bad, headers=ADMIN, timeout=60)
    assert refused.status_code == 400 and "no adapter_config.json" in refused.json()["error"]["message"]
    loaded = httpx.post(f"{url}/v1/load_lora_adapter", json=body, headers=ADMIN, timeout=60)
    assert loaded.status_code == 200, loaded.text
    again = httpx.post(f"{url}/v1/load_lora_adapter", json=body, headers=ADMIN, timeout=60)
    assert again.status_code == 400 and "already loaded" in again.json()["error"]["message"]
    assert {card.id for card in client.models.list().data} == {BASE, "rand", "late"}
    third = {"lora_name": "third", "lora_path": str(adapters["busy"])}
    full = httpx.post(f"{url}/v1/load_lora_adapter", json=third, headers=ADMIN, timeout=60)
    assert full.status_code == 400 and "--max-cpu-loras is 2" in full.json()["error"]["message"]
    late = client.completions.create(model="late", prompt=PROMPT, max_tokens=12, temperature=0)
    rand = client.completions.create(model="rand", prompt=PROMPT, max_tokens=12, temperature=0)
    assert late.choices[0].text != rand.choices[0].text
    # Both at once with --max-loras 1: one waits while the other's steps run; each text is its own.
    held = _metrics(url)["agentgate_lora_held_steps_total{}"]
    texts: dict[str, str] = {}

    def complete(model: str) -> None:
        reply = client.completions.create(model=model, prompt=PROMPT, max_tokens=12, temperature=0)
        texts[model] = reply.choices[0].text

    workers = [threading.Thread(target=complete, args=(model,)) for model in ("late", "rand", BASE)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert texts == {"late": late.choices[0].text, "rand": rand.choices[0].text, BASE: texts[BASE]}
    assert _metrics(url)["agentgate_lora_held_steps_total{}"] > held
    unloaded = httpx.post(f"{url}/v1/unload_lora_adapter", json={"lora_name": "late"}, headers=ADMIN, timeout=60)
    assert unloaded.status_code == 200, unloaded.text
    with pytest.raises(openai.NotFoundError, match="`late` does not exist"):
        client.completions.create(model="late", prompt=PROMPT, max_tokens=2)
    gone = httpx.post(f"{url}/v1/unload_lora_adapter", json={"lora_name": "late"}, headers=ADMIN, timeout=60)
    assert gone.status_code == 404


def _metrics(url: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics", headers={"Authorization": "Bearer user-key"}, timeout=10).text
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
    return samples


def test_an_adapter_unloaded_in_use_lets_its_request_finish(server, client, adapters):
    url = server.url
    body = {"lora_name": "busy", "lora_path": str(adapters["busy"])}
    assert httpx.post(f"{url}/v1/load_lora_adapter", json=body, headers=ADMIN, timeout=60).status_code == 200
    long = dict(model="busy", prompt=PROMPT, max_tokens=96, temperature=0, extra_body={"ignore_eos": True})
    [alone] = client.completions.create(**long).choices
    stream = client.completions.create(**long, stream=True)
    chunks = iter(stream)
    text = next(chunks).choices[0].text  # the request runs
    stats = httpx.get(f"{url}/dashboard/stats", headers=ADMIN, timeout=30).json()
    assert [r["adapter"] for r in stats["requests"]] == ["busy"]  # the dashboard's request list names it
    [info] = [name for name in _metrics(url) if name.startswith("vllm:lora_requests_info{")]
    assert 'running_lora_adapters="busy"' in info and 'max_lora="1"' in info
    unloaded = threading.Event()

    def unload():
        reply = httpx.post(f"{url}/v1/unload_lora_adapter", json={"lora_name": "busy"}, headers=ADMIN, timeout=60)
        assert reply.status_code == 200
        unloaded.set()

    worker = threading.Thread(target=unload)
    worker.start()
    worker.join(30)
    assert unloaded.is_set()
    finish = None
    for chunk in chunks:
        if chunk.choices:
            text += chunk.choices[0].text
            finish = chunk.choices[0].finish_reason or finish
    assert finish == "length" and text == alone.text
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="busy", prompt=PROMPT, max_tokens=2)


def test_one_session_id_through_the_base_and_an_adapter_is_two_sessions(server):
    """Issue 53: sessions are per adapter, as programs are: the same ``X-Session-Id`` through the base
    model and through ``rand`` keeps two records (turns and messages apart); ``?model=rand`` names the
    adapter's, and a model the server does not serve is a 404 naming it."""
    headers = {"Authorization": "Bearer user-key", "X-Session-Id": "per-adapter"}
    for model, text in ((BASE, "Name a colour."), ("rand", "Name a fruit."), ("rand", "Name a tree.")):
        body = {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 2}
        reply = httpx.post(f"{server.url}/v1/chat/completions", json=body, headers=headers, timeout=60)
        assert reply.status_code == 200, reply.text
    user = {"Authorization": "Bearer user-key"}

    def session(query: str = "") -> dict:
        reply = httpx.get(f"{server.url}/v1/sessions/per-adapter{query}", headers=user, timeout=10)
        assert reply.status_code == 200, reply.text
        return reply.json()

    wait_for(lambda: session()["turns"] == 1 and session("?model=rand")["turns"] == 2, message="both recorded")
    said = lambda view: [m["content"] for m in view["messages"] if m["role"] == "user"]  # noqa: E731
    assert said(session()) == ["Name a colour."]
    assert said(session("?model=rand")) == ["Name a tree."]  # a session keeps its last conversation
    assert session(f"?model={BASE}")["turns"] == 1
    unknown = httpx.get(f"{server.url}/v1/sessions/per-adapter?model=nope", headers=user, timeout=10)
    assert unknown.status_code == 404 and unknown.json()["error"]["param"] == "model", unknown.text
    deleted = httpx.delete(f"{server.url}/v1/sessions/per-adapter?model=rand", headers=user, timeout=10)
    assert deleted.status_code == 200, deleted.text
    assert session()["turns"] == 1  # the base model's session stays
    gone = httpx.get(f"{server.url}/v1/sessions/per-adapter?model=rand", headers=user, timeout=10)
    assert gone.status_code == 404, gone.text
