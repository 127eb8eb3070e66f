"""Test-wide set-up.

Triton kernels run under the interpreter when there is no GPU; the variable
must be set before any ``@triton.jit`` executes, so it is set here, first.
The shared fixtures come from ``tests.support.fixtures``.
"""

import atexit
import os
import shutil
import tempfile

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Under scripts/test.sh's two workers, a worker's own torch work (reference forwards, in-process
# engines before their thread governor looks) runs on one thread: two workers of two threads each
# on two cores wait at every parallel op's barrier for a thread that is off its core.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)

# Servers the tests start keep their state (embedded Redis files) under
# XDG_STATE_HOME and their measurements at load (engine.kernel_choice.row_choice_cache)
# under XDG_CACHE_HOME: throwaway directories, not the user's home.
os.environ["XDG_STATE_HOME"] = _state_home = tempfile.mkdtemp(prefix="agentgate-tests-")
os.environ["XDG_CACHE_HOME"] = _cache_home = tempfile.mkdtemp(prefix="agentgate-tests-cache-")
atexit.register(shutil.rmtree, _state_home, ignore_errors=True)
atexit.register(shutil.rmtree, _cache_home, ignore_errors=True)

pytest_plugins = ["tests.support.fixtures"]


@pytest.fixture
def anyio_backend():
    """anyio tests run on asyncio, as the gateway does under uvicorn."""
    return "asyncio"


# The longest test files, longest first (seconds of their tests in a full run beside the other worker
# on the 2-core AVX-512 Xeon, issue 54): scripts/test.sh hands whole files to two workers in
# collection order, so the long ones start first and the short ones fill in around them, instead of
# one long file ending the run.
LONGEST_FIRST = (
    "tests/gateway/test_tools_live.py",  # ~686: generating tests on two servers of their own
    "tests/gateway/test_tools_speculative_live.py",  # ~128: one, on a speculative server
    "tests/gateway/test_harness_clis.py",  # ~120: two CLIs installed, one turn on the default model
    "tests/gateway/test_greedy_retry_live.py",  # ~93
    "tests/engine/test_structured_output.py",  # ~84: two --deterministic starts
    "tests/gateway/test_kv_retention_live.py",  # ~63
    "tests/gateway/test_structured_constraints.py",  # ~59
    "tests/engine/test_llm.py",  # ~57
    "tests/gateway/test_reasoning_live.py",  # ~54
    "tests/reliability/test_multi_host.py",  # ~50
    "tests/gateway/test_pydantic_ai_live.py",  # ~50
    "tests/reliability/test_engine_discovery.py",  # ~49
    "tests/engine/speculative/test_default_speculation.py",  # ~45
    "tests/gateway/test_lora_live.py",  # ~44
    "tests/gateway/test_multi_cluster.py",  # ~43
    "tests/gateway/web/test_playground.py",  # ~39
    "tests/reliability/test_fuzz.py",  # ~38
    "tests/loadtests/test_gpu_check.py",  # ~38
    "tests/gateway/test_responses_api.py",  # ~37
    "tests/test_readme.py",  # ~36
)


def pytest_collection_modifyitems(config, items):
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: the rest keep their order
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device; run loadtests/gpu_check.sh on one")
    for item in items:
        if item.get_closest_marker("gpu") is not None:  # not `in keywords`: a checkout folder named gpu matches that
            item.add_marker(skip_gpu)
