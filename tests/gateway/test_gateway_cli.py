"""`agentgate generate`: the offline engine from the command line."""

import subprocess
import sys

import pytest

from agentgate.engine import LLM, SamplingParams
from agentgate.gateway.engines.registry import undialable
from tests.support.answers import CAPITAL_CHAT, engine_top_two, require_margin
from tests.support.servers import REPO, run_agentgate


@pytest.mark.slow
def test_generate_prints_the_completion():
    [prompt] = CAPITAL_CHAT
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentgate.gateway.command.cli",
            "generate",
            prompt["content"],
            "--runner",
            "sync",
            "--max-tokens",
            "8",
            "--dtype",
            "float32",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    # What the offline engine answers with the same settings, in this process.
    [reference] = LLM(runner="sync", dtype="float32").chat(
        CAPITAL_CHAT, SamplingParams(temperature=0, max_tokens=8, logprobs=2)
    )
    require_margin(engine_top_two(reference.logprobs))
    assert out.stdout == reference.text + "\n"


def test_help_lists_the_serve_flags():
    out = subprocess.run(
        [sys.executable, "-m", "agentgate.gateway.command.cli", "serve", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    for flag in (
        "--model",
        "--served-model-name",
        "--host",
        "--port",
        "--api-key",
        "--admin-key",
        "--allowed-origins",
        "--allowed-methods",
        "--allowed-headers",
        "--allow-credentials",
        "--runner",
        "--max-num-seqs",
        "--max-model-len",
        "--max-waiting",
    ):
        assert flag in out.stdout
    assert "AGENTGATE_API_KEY" in out.stdout


@pytest.mark.parametrize("bound", ["tcp://0.0.0.0:5555", "tcp://[::]:5555", "tcp://*:5555"])
def test_an_engine_bound_to_every_interface_must_say_what_to_announce(bound):
    """Announced as bound, ``tcp://0.0.0.0:5555`` would have every remote gateway dial itself, and
    two such engines would overwrite one record: the engine refuses to register, naming the flag,
    before it loads anything."""
    out = run_agentgate("engine", "--address", bound, "--runner", "null", "--redis-url", "redis://127.0.0.1:9/0")
    assert out.returncode == 2, out.stderr[-2000:]
    assert "will not register" in out.stderr and "--advertise-address" in out.stderr, out.stderr


def test_only_tcp_addresses_of_every_interface_are_undialable():
    for address in ("tcp://0.0.0.0:5555", "tcp://[::]:5555", "tcp://*:5555", "tcp://:5555"):
        assert undialable(address), address
    for address in ("tcp://10.1.2.3:5555", "tcp://engine-0.engines:5555", "tcp://[fd00::1]:5555", "ipc:///tmp/e"):
        assert undialable(address) is None, address
