"""Engine processes wait passively at OpenMP barriers (``engine.openmp``): a spawned engine
starts with ``OMP_WAIT_POLICY=PASSIVE`` in its environment, before it imports torch, unless the
user chose a policy; and the CLI gets to set it before anything in it imports torch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PARENT = (
    "import time\n"
    "from agentgate.engine.client import start_engine_process, stop_engine_process\n"
    "from agentgate.engine.ipc import private_address\n"
    "from agentgate.engine.config import EngineConfig\n"
    "if __name__ == '__main__':\n"
    "    p = start_engine_process(EngineConfig(runner='null', num_kv_blocks=64), private_address())\n"
    "    print(p.pid, flush=True)\n"
    "    input()\n"
    "    stop_engine_process(p)\n"
)


@pytest.mark.parametrize("given,expected", [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_a_spawned_engine_waits_passively_unless_told_otherwise(tmp_path, given, expected):
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"} | (
        {"OMP_WAIT_POLICY": given} if given else {}
    )
    parent = subprocess.Popen(
        [sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        engine_pid = int(parent.stdout.readline())
        environ = Path(f"/proc/{engine_pid}/environ").read_bytes().split(b"\0")
        assert f"OMP_WAIT_POLICY={expected}".encode() in environ
    finally:
        parent.communicate("\n", timeout=30)


def test_the_cli_imports_no_torch_before_the_engine_command_sets_the_policy():
    check = "import sys, agentgate.gateway.cli; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", check], check=True)
