"""Live servers for the agents tests (real `agentgate serve` processes on free ports).

- ``null_server``: the null runner (tokens without a model, 10 ms a step), with
  an API key and an admin key, and at most 4 requests waiting for their first
  token (the fifth gets 429 with Retry-After): the SDK, retries, cancellation,
  the ops CLI.
- ``model_server`` (``tests.support.fixtures``, shared with the other suites):
  the default model (SmolLM2-135M) on the sync runner: real text, and the
  Agent loop with tool calls.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fixtures import idle_around
from tests.support.servers import ADMIN_KEY, USER_KEY, LiveServer, start_server


@pytest.fixture(scope="session")
def null_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    # Formatted by hand: each flag beside its value, as on a command line.
    server = start_server(
        tmp_path_factory.mktemp("agents-null-server"),
        "--runner", "null", "--null-step-seconds", "0.01", "--max-num-seqs", "64", "--max-model-len", "1024",
        "--num-kv-blocks", "2048", "--max-waiting", "4",
        api_key=USER_KEY, admin_key=ADMIN_KEY,
    )  # fmt: skip
    yield server
    server.stop()


@pytest.fixture
def null(null_server: LiveServer) -> Iterator[LiveServer]:
    """The null server, idle and unpaused before and after each test."""
    with idle_around(null_server, before=15, after=30):
        yield null_server
