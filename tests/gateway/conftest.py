"""Servers for the gateway tests.

- ``model_server`` (``tests.support.fixtures``): the default model on the sync
  runner, no keys: the OpenAI SDK tests (real text, logprobs, seeds).
- ``null_server``: a live ``agentgate serve`` on the null runner (instant
  tokens, a few ms per step) with API keys, an admin key and CORS: streams
  read while they run (load, disconnects, pause, aborts). Its keys come from
  ``AGENTGATE_*`` variables, so the environment path is exercised too.
- ``gateway``: the same configuration in this process (``create_app`` +
  ``httpx.ASGITransport``, ``tests.support.inprocess``), with an embedded
  Redis: routes, errors, auth and CORS, which need no live stream.
- ``smollm_tokenizer``: the default model's tokenizer (its ChatML template has no tool support).
- ``redis_server``: a real redis-server on 127.0.0.1 for a module's in-process Redis tests.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentgate.engine.errors import ModelLoadError
from agentgate.engine.model_files.model_path import default_model_path
from agentgate.engine.text.tokenizer import Tokenizer, load_tokenizer
from agentgate.gateway.config.settings import Settings
from tests.support.fixtures import idle_around
from tests.support.inprocess import InProcessGateway
from tests.support.servers import (
    ADMIN_KEY,
    ALLOWED_ORIGIN,
    SEALING_KEY,
    USER_KEY,
    USER_KEY_2,
    LiveServer,
    RedisServer,
    bearer,
    start_server,
)

# Formatted by hand: each flag beside its value, as on a command line.
NULL_FLAGS = ("--runner", "null", "--null-step-seconds", "0.004", "--max-num-seqs", "256", "--max-model-len", "1024",
              "--num-kv-blocks", "16384", "--max-body-bytes", "65536", "--allowed-origins", ALLOWED_ORIGIN)  # fmt: skip


@pytest.fixture(scope="session")
def smollm_tokenizer() -> Tokenizer:
    try:
        return load_tokenizer(default_model_path())
    except ModelLoadError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def null_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = start_server(
        tmp_path_factory.mktemp("null-server"),
        *NULL_FLAGS,
        env={
            "AGENTGATE_API_KEY": f"{USER_KEY},{USER_KEY_2}",
            "AGENTGATE_ADMIN_KEY": ADMIN_KEY,
            "AGENTGATE_SEALING_KEY": SEALING_KEY,
        },
    )
    server.headers = bearer(USER_KEY)
    server.admin_headers = bearer(ADMIN_KEY)
    yield server
    server.stop()


@pytest.fixture
def null(null_server: LiveServer) -> Iterator[LiveServer]:
    """The null server, checked idle and unpaused before and after each test."""
    with idle_around(null_server, before=10, after=20):
        yield null_server


@pytest.fixture(scope="session")
def gateway() -> Iterator[InProcessGateway]:
    """The null server's configuration, in this process (see the module docstring)."""
    settings = Settings(
        api_keys=(USER_KEY, USER_KEY_2),
        admin_key=ADMIN_KEY,
        allowed_origins=(ALLOWED_ORIGIN,),
        max_body_bytes=65536,
        sealing_key=(SEALING_KEY,),
    )
    with InProcessGateway(settings, redis=True) as gw:
        yield gw
