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

# Servers the tests start keep their state (embedded Redis files) under
# XDG_STATE_HOME: a throwaway directory, not the user's home.
os.environ["XDG_STATE_HOME"] = _state_home = tempfile.mkdtemp(prefix="agentgate-tests-")
atexit.register(shutil.rmtree, _state_home, ignore_errors=True)

pytest_plugins = ["tests.support.fixtures"]


@pytest.fixture
def anyio_backend():
    """anyio tests run on asyncio, as the gateway does under uvicorn."""
    return "asyncio"


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device; run loadtests/gpu_check.sh on one")
    for item in items:
        if item.get_closest_marker("gpu") is not None:  # not `in keywords`: a checkout folder named gpu matches that
            item.add_marker(skip_gpu)
