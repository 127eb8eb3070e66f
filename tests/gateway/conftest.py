"""Live servers for the gateway tests: real `agentgate serve` processes
(engine process + uvicorn) on free ports of 127.0.0.1, started once per
session and stopped with SIGTERM.

- ``model_server``: the default model on the sync runner, no keys: the
  OpenAI SDK tests (real text, logprobs, seeds).
- ``null_server``: the null runner (instant tokens, a few ms per step) with
  API keys, an admin key and CORS: load, disconnects, pause, auth, errors.
  Its keys come from ``AGENTGATE_*`` variables, so the environment path is
  exercised too.
"""

from __future__ import annotations

import pytest
from gateway_helpers import ADMIN_KEY, ALLOWED_ORIGIN, USER_KEY, USER_KEY_2, LiveServer, start_server


@pytest.fixture(scope="session")
def model_server(tmp_path_factory: pytest.TempPathFactory):
    server = start_server(
        tmp_path_factory.mktemp("model-server"),
        "--runner", "sync", "--dtype", "float32", "--max-model-len", "2048", "--max-num-seqs", "16",
    )  # fmt: skip
    yield server
    server.stop()


@pytest.fixture(scope="session")
def null_server(tmp_path_factory: pytest.TempPathFactory):
    server = start_server(
        tmp_path_factory.mktemp("null-server"),
        "--runner", "null", "--null-step-seconds", "0.004", "--max-num-seqs", "256",
        "--max-model-len", "1024", "--num-kv-blocks", "16384", "--max-body-bytes", "65536",
        "--allowed-origins", ALLOWED_ORIGIN,
        env={"AGENTGATE_API_KEY": f"{USER_KEY},{USER_KEY_2}", "AGENTGATE_ADMIN_KEY": ADMIN_KEY},
    )  # fmt: skip
    server.headers = {"Authorization": f"Bearer {USER_KEY}"}
    server.admin_headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    yield server
    server.stop()


@pytest.fixture
def null(null_server: LiveServer) -> LiveServer:
    """The null server, checked idle and unpaused before and after each test,
    so one test's leftovers never pass for another's result."""
    import httpx
    from gateway_helpers import engine_idle, wait_for

    wait_for(lambda: engine_idle(null_server.url), message="the engine to be idle before the test")
    yield null_server
    httpx.post(f"{null_server.url}/resume", headers=null_server.admin_headers, timeout=10)
    wait_for(lambda: engine_idle(null_server.url), timeout=20, message="the engine to be idle after the test")
