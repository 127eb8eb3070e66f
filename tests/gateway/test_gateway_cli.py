"""`agentgate generate`: the offline engine from the command line."""

import subprocess
import sys

import pytest

from agentgate.engine import LLM, SamplingParams
from tests.support.answers import CAPITAL_CHAT, engine_top_two, require_margin
from tests.support.servers import REPO


@pytest.mark.slow
def test_generate_prints_the_completion():
    [prompt] = CAPITAL_CHAT
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentgate.gateway.cli",
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
        [sys.executable, "-m", "agentgate.gateway.cli", "serve", "--help"],
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
