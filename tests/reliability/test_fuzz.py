"""A bounded schemathesis run over ``/openapi.json`` (the long one is
``loadtests/reliability/fuzz.py``): every operation, a few examples each, in
positive and negative mode; no answer may be a 5xx."""

from __future__ import annotations

import pytest

from agentgate.loadtests.reliability.fuzz import FAST_NULL, FLAGS, fuzz
from tests.support.servers import start_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory):
    server = start_server(tmp_path_factory.mktemp("fuzz"), *FAST_NULL, *FLAGS)
    yield server
    server.stop()


@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_the_spec_fuzzed_gets_no_5xx(fuzz_server, mode):
    # bounded for CI (a 2-core machine, the whole suite under 15 minutes): seconds, not minutes
    result = fuzz(fuzz_server.url, mode, examples=3, phases="fuzzing", max_time=15)
    assert result["cases"], result["output"]
    assert result["5xx"] == 0 and result["exit"] == 0, result["output"]
