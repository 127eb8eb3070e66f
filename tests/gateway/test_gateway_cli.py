"""`agentgate generate`: the offline engine from the command line."""

import subprocess
import sys

import pytest

from tests.support.servers import REPO


@pytest.mark.slow
def test_generate_prints_the_completion():
    out = subprocess.run(
        [sys.executable, "-m", "agentgate.gateway.cli", "generate", "What is the capital of France?", "--runner", "sync",
         "--max-tokens", "8", "--dtype", "float32"],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Paris" in out.stdout


def test_help_lists_the_serve_flags():
    out = subprocess.run([sys.executable, "-m", "agentgate.gateway.cli", "serve", "--help"], capture_output=True, text=True,
                         cwd=REPO, check=True)  # fmt: skip
    for flag in ("--model", "--served-model-name", "--host", "--port", "--api-key", "--admin-key", "--allowed-origins",
                 "--allowed-methods", "--allowed-headers", "--allow-credentials", "--runner", "--max-num-seqs",
                 "--max-model-len", "--max-waiting"):  # fmt: skip
        assert flag in out.stdout
    assert "AGENTGATE_API_KEY" in out.stdout
