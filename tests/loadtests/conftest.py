"""The load generator's live server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.servers import ADMIN_KEY, LiveServer, start_server


@pytest.fixture(scope="session")
def loadtest_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The null runner (a few ms a step), with an admin key for pauses and server-side aborts."""
    # Formatted by hand: each flag beside its value, as on a command line.
    server = start_server(
        tmp_path_factory.mktemp("loadtest-server"),
        "--runner", "null", "--null-step-seconds", "0.005", "--max-num-seqs", "64", "--max-model-len", "2048",
        "--num-kv-blocks", "4096",
        admin_key=ADMIN_KEY,
    )  # fmt: skip
    yield server
    server.stop()
