"""An engine of the null runner (no model: the tests' and benchmarks' many short-lived engines)
imports no torch, in process and as the engine process `agentgate serve --runner null` spawns;
a model runner's engine does (the check can fail)."""

import subprocess
import sys

import httpx

from tests.support.servers import start_server

SERVE_ONE = """
import sys
from agentgate.engine.config import EngineConfig
from agentgate.engine.core import EngineCore
from agentgate.engine.sampling_params import SamplingParams
core = EngineCore(EngineConfig(runner={runner!r}, max_model_len=256, null_reply_tokens=4, load_format="dummy"))
core.add_request("a", [1, 2, 3], SamplingParams(max_tokens=8))
while core.has_work:
    core.step()
print("torch" in sys.modules)
"""


def _loads_torch(runner: str) -> bool:
    out = subprocess.run([sys.executable, "-c", SERVE_ONE.format(runner=runner)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1] == "True"


def test_a_null_engine_serves_a_request_without_importing_torch():
    assert not _loads_torch("null")


def test_the_check_sees_torch_in_an_engine_with_a_model():
    assert _loads_torch("sync")


def test_the_engine_process_of_serve_runner_null_maps_no_libtorch(tmp_path):
    server = start_server(tmp_path, "--runner", "null", "--null-reply-tokens", "4")
    try:
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
        assert httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=60).status_code == 200
        engine_pids = server.engine_pids()
        assert engine_pids, "serve started no engine process"
        for pid in engine_pids:
            with open(f"/proc/{pid}/maps") as maps:
                assert "libtorch" not in maps.read(), pid
    finally:
        server.stop()
