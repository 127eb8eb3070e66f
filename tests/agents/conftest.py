"""Live servers for the agents tests (real `agentgate serve` processes on free ports).

- ``null_server``: the null runner (tokens without a model, 10 ms a step), with
  an API key and an admin key, and at most 4 requests waiting for their first
  token (the fifth gets 429 with Retry-After): the SDK, retries, cancellation,
  the ops CLI.
- ``model_server``: the default model (SmolLM2-135M) on the sync runner: real
  text, and the Agent loop with tool calls.
"""

from __future__ import annotations

import httpx
import pytest
from agents_helpers import ADMIN_KEY, USER_KEY, LiveServer, engine_idle, start_server, wait_for


@pytest.fixture(scope="session")
def null_server(tmp_path_factory: pytest.TempPathFactory):
    server = start_server(
        tmp_path_factory.mktemp("agents-null-server"),
        "--runner", "null", "--null-step-seconds", "0.01", "--max-num-seqs", "64", "--max-model-len", "1024",
        "--num-kv-blocks", "2048", "--max-waiting", "4",
        api_key=USER_KEY, admin_key=ADMIN_KEY,
    )  # fmt: skip
    yield server
    server.stop()


@pytest.fixture
def null(null_server: LiveServer) -> LiveServer:
    """The null server, idle and unpaused before and after each test."""
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    httpx.post(f"{null_server.url}/resume", headers=headers, timeout=10)
    wait_for(lambda: engine_idle(null_server.url), message="the engine to be idle before the test")
    yield null_server
    httpx.post(f"{null_server.url}/resume", headers=headers, timeout=10)
    wait_for(lambda: engine_idle(null_server.url), timeout=30, message="the engine to be idle after the test")


@pytest.fixture(scope="session")
def model_server(tmp_path_factory: pytest.TempPathFactory):
    server = start_server(
        tmp_path_factory.mktemp("agents-model-server"),
        "--runner", "sync", "--dtype", "float32", "--max-model-len", "2048", "--max-num-seqs", "8",
    )  # fmt: skip
    yield server
    server.stop()
