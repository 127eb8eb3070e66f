"""One live server for the reliability cases (null runner, short client timeouts), shared by
the modules: ``served``. Cases that break it for good start their own."""

from __future__ import annotations

import pytest

from tests.support.servers import NULL_ENGINE, start_server

SLOW_CLIENT_FLAGS = (
    "--header-timeout",
    "1",
    "--body-timeout",
    "1",
    "--max-connections",
    "40",
    "--sse-send-timeout",
    "2",
)


@pytest.fixture(scope="session")
def served(tmp_path_factory):
    server = start_server(tmp_path_factory.mktemp("reliability"), *NULL_ENGINE, *SLOW_CLIENT_FLAGS)
    yield server
    server.stop()
