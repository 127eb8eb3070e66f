"""The load generator's tests reuse the agents tests' live-server helpers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agents"))

from agents_helpers import ADMIN_KEY, start_server


@pytest.fixture(scope="session")
def loadtest_server(tmp_path_factory: pytest.TempPathFactory):
    """The null runner (a few ms a step), with an admin key for pauses and server-side aborts."""
    server = start_server(
        tmp_path_factory.mktemp("loadtest-server"),
        "--runner", "null", "--null-step-seconds", "0.005", "--max-num-seqs", "64", "--max-model-len", "2048",
        "--num-kv-blocks", "4096",
        admin_key=ADMIN_KEY,
    )  # fmt: skip
    yield server
    server.stop()
