"""Fixtures every suite may ask for (a pytest plugin, loaded by ``tests/conftest.py``).

- ``model_server``: the default model on the sync runner (float32, 2048
  tokens of context, 16 sequences), no keys: real text, logprobs, seeds and
  tool calls for the gateway, agents and load-test suites, started once.

The servers' modules (uvicorn, the ``mcp`` SDK, the gateway) are imported inside the fixtures:
this plugin loads for every test, also on the lent GPU machine, which has none of them
(``tests/loadtests/test_gpu_check.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import httpx
import pytest

if TYPE_CHECKING:
    from tests.support.mcp_servers import McpServers
    from tests.support.servers import LiveServer


@pytest.fixture(scope="session")
def mcp_server() -> Iterator[McpServers]:
    """A real MCP server (``tests.support.mcp_servers``) for the session: ``model_server`` allows it."""
    from tests.support.mcp_servers import mcp_servers

    with mcp_servers() as running:
        yield running


@pytest.fixture(scope="session")
def model_server(tmp_path_factory: pytest.TempPathFactory, mcp_server: McpServers) -> Iterator[LiveServer]:
    from tests.support.servers import start_server

    server = start_server(
        tmp_path_factory.mktemp("model-server"),
        "--runner",
        "sync",
        "--dtype",
        "float32",
        "--max-model-len",
        "2048",
        "--max-num-seqs",
        "16",
        "--mcp-server",
        f"calc={mcp_server.http_url}",
    )
    yield server
    server.stop()


@contextlib.contextmanager
def idle_around(server: LiveServer, *, before: float = 10.0, after: float = 20.0) -> Iterator[LiveServer]:
    """``server`` checked unpaused and idle before and after the block (``before``/``after``: seconds
    to wait for it), so one test's leftovers never pass for another's result."""
    from tests.support.http import engine_idle, wait_for

    httpx.post(f"{server.url}/resume", headers=server.admin_headers, timeout=10)
    wait_for(lambda: engine_idle(server.url), timeout=before, message="the engine to be idle before the test")
    yield server
    httpx.post(f"{server.url}/resume", headers=server.admin_headers, timeout=10)
    wait_for(lambda: engine_idle(server.url), timeout=after, message="the engine to be idle after the test")
