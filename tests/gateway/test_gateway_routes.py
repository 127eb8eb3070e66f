"""Tokenize/detokenize, models, metrics, version and OpenAPI (gateway server)."""

from __future__ import annotations

import re

from starlette.routing import Mount

from agentgate.gateway.api_types.openai import REQUEST_TYPES
from agentgate.gateway.config.settings import Settings
from agentgate.gateway.http.app import EngineTarget, create_app
from tests.support.http import chat_body, metrics

METRIC_NAMES = [
    "agentgate_requests_running",
    "agentgate_requests_waiting",
    "agentgate_kv_cache_usage_ratio",
    "agentgate_prefix_cache_queries_tokens_total",
    "agentgate_prefix_cache_hits_tokens_total",
    "agentgate_preemptions_total",
    "agentgate_budget_closed_replies_total",
    "agentgate_thinking_budget_closed_total",
    "agentgate_lora_held_steps_total",
    "agentgate_reasoning_tokens_total",
    "agentgate_time_to_first_token_seconds_count",
    "agentgate_inter_token_latency_seconds_count",
    "agentgate_request_queue_time_seconds_count",
    "agentgate_prompt_tokens_total",
    "agentgate_generation_tokens_total",
]


def test_tokenize_prompt_and_messages_and_detokenize(gateway):
    h = gateway.headers
    r = gateway.client.post("/tokenize", json={"prompt": "Hello world", "return_token_strs": True}, headers=h)
    body = r.json()
    assert r.status_code == 200 and body["count"] == len(body["tokens"]) > 0 and body["max_model_len"] == 1024
    assert len(body["token_strs"]) == body["count"]
    back = gateway.client.post("/detokenize", json={"tokens": body["tokens"]}, headers=h).json()
    assert back == {"prompt": "Hello world"}
    messages = [{"role": "user", "content": "Hello there"}]
    counted = gateway.client.post("/tokenize", json={"messages": messages}, headers=h).json()
    chat = gateway.client.post("/v1/chat/completions", json=chat_body(2, stream=False), headers=h).json()
    assert counted["count"] == chat["usage"]["prompt_tokens"]
    text = gateway.client.post("/detokenize", json={"tokens": counted["tokens"]}, headers=h).json()["prompt"]
    assert text.startswith("<|im_start|>system") and text.endswith("<|im_start|>assistant\n")


def test_models(gateway):
    data = gateway.client.get("/v1/models", headers=gateway.headers).json()
    assert data["object"] == "list"
    [card] = data["data"]
    assert card["id"] == "SmolLM2-135M-Instruct" and card["object"] == "model" and card["max_model_len"] == 1024
    one = gateway.client.get("/v1/models/SmolLM2-135M-Instruct", headers=gateway.headers)
    assert one.status_code == 200 and one.json() == card
    missing = gateway.client.get("/v1/models/gpt-9", headers=gateway.headers)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"


def test_unknown_routes_and_methods_are_named_with_what_is_served(gateway):
    r = gateway.client.post("/v1/response", json={}, headers=gateway.headers)
    assert r.status_code == 404
    assert r.json()["error"]["message"] == "no route POST /v1/response on this server; did you mean POST /v1/responses?"
    r = gateway.client.get("/v1/chat/completions", headers=gateway.headers)
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert r.json()["error"]["message"] == "GET /v1/chat/completions is not supported; /v1/chat/completions takes POST"


def test_metrics_names_and_counts_follow_requests(gateway):
    before = metrics(gateway.client)
    for name in METRIC_NAMES:
        assert name in before, f"{name} missing from /metrics"
    r = gateway.client.post(
        "/v1/completions",
        json={"prompt": [1, 2, 3, 4, 5], "max_tokens": 7, "ignore_eos": True, "n": 2},
        headers=gateway.headers,
    )
    assert r.status_code == 200
    after = metrics(gateway.client)
    assert after["agentgate_prompt_tokens_total"] - before["agentgate_prompt_tokens_total"] == 5
    assert after["agentgate_generation_tokens_total"] - before["agentgate_generation_tokens_total"] == 14
    for name, delta in [
        ("agentgate_time_to_first_token_seconds_count", 2),
        ("agentgate_request_queue_time_seconds_count", 2),
        ("agentgate_inter_token_latency_seconds_count", 12),
        ("agentgate_prefix_cache_queries_tokens_total", 10),
    ]:
        assert after[name] - before[name] == delta, name
    length = 'agentgate_requests_total{finish_reason="length"}'
    assert after[length] - before[length] == 2
    assert r.headers["content-type"] == "application/json"
    assert gateway.client.get("/metrics").headers["content-type"].startswith("text/plain")


def test_version_and_health(gateway):
    assert gateway.client.get("/version").json()["version"]
    health = gateway.client.get("/health").json()
    assert health["status"] == "ok" and health["engines"] == 1 and health["redis"] == "up"
    # The wait bound in force (--max-wait auto: at least 10 s), the same on /metrics.
    assert health["max_wait"] == "auto" and health["max_wait_s"] >= 10.0
    served = metrics(gateway.client)
    assert served["agentgate_max_wait_seconds"] == health["max_wait_s"]
    # What waits the bound covered: the longest from a first pass, and those past the bound (none here).
    assert served["agentgate_longest_wait_passed_seconds"] >= 0.0 and served["agentgate_waits_past_bound_total"] == 0


def test_health_min_engines_is_a_readiness_bar(gateway):
    """The Kubernetes readiness probe asks /health?min_engines=N: 503 while fewer engines serve."""
    assert gateway.client.get("/health?min_engines=1").status_code == 200
    short = gateway.client.get("/health?min_engines=2")
    assert short.status_code == 503 and "1 engine(s) serving, 2 needed" in short.json()["error"]["message"]
    assert gateway.client.get("/health?min_engines=many").status_code == 400


def _registered_operations() -> set[tuple[str, str]]:
    """(path, method) of every route the app registers, path parameters as OpenAPI writes them."""
    app = create_app(Settings(), engines=[EngineTarget("ipc:///unused")])  # routes only: no lifespan
    found = set()
    for route in app.routes:
        path = re.sub(r"\{(\w+)(:\w+)?\}", r"{\1}", route.path)
        if isinstance(route, Mount):
            found.add((path + "/{path}", "get"))
            continue
        for method in getattr(route, "methods", None) or ():  # a WebSocketRoute has none: OpenAPI has no sockets
            if method != "HEAD":
                found.add((path, method.lower()))
    return found


def test_openapi_describes_every_route(gateway):
    doc = gateway.client.get("/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    documented = {(path, method) for path, ops in doc["paths"].items() for method in ops}
    registered = _registered_operations()
    assert registered - documented == set(), "routes missing from /openapi.json"
    assert documented - registered == set(), "/openapi.json documents routes that do not exist"
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert "security" in op and any(p["name"] == "X-Request-Id" for p in op["parameters"]), (path, method)
    chat_op = doc["paths"]["/v1/chat/completions"]["post"]
    assert {"200", "400", "401", "404", "408", "409", "413", "429", "503"} <= set(chat_op["responses"])
    assert "Retry-After" in chat_op["responses"]["429"]["headers"]
    assert "text/event-stream" in chat_op["responses"]["200"]["content"]
    assert any(p["name"] == "X-Session-Id" for p in chat_op["parameters"])
    assert doc["paths"]["/pause"]["post"]["security"] == [{"bearer": []}]
    assert doc["paths"]["/health"]["get"]["security"] == []
    assert "text/plain" in doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    schemas = doc["components"]["schemas"]
    for kind in REQUEST_TYPES:
        assert kind.__name__ in schemas
    chat = schemas["ChatCompletionRequest"]
    assert {"messages", "max_tokens", "stream", "logprobs", "tools"} <= set(chat["properties"])
    assert chat["required"] == ["messages"]
    # bounds and enums, from the structs that validate requests
    assert chat["properties"]["messages"]["minItems"] == 1
    assert (chat["properties"]["n"]["minimum"], chat["properties"]["n"]["maximum"]) == (1, 128)
    assert set(schemas["ChatMessage"]["properties"]["role"]["enum"]) >= {"system", "user", "assistant", "tool"}
    ref = doc["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert ref == "#/components/schemas/ChatCompletionRequest"
