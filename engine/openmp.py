"""Engine processes wait passively at OpenMP barriers.

By default GNU OpenMP (PyTorch's, on Linux) spins at the end of every
parallel region before it sleeps. On a machine whose cores are shared with
the gateway, the agents and other programs, a spinning thread holds a core
the thread it waits for needs: measured on 2 cores beside one busy process,
a batch-1 decode step at 2 threads fell to ~1 token/s spinning against
35-50 tokens/s waiting passively (``loadtests/threads_bench``). So every
process that runs an engine asks for passive waits, unless the user set
``OMP_WAIT_POLICY`` themselves. OpenMP reads it when torch loads: this must
run before the engine process imports torch (a spawned engine inherits it).
Kept free of torch imports for that reason.
"""

from __future__ import annotations

import os


def wait_passively() -> None:
    """``OMP_WAIT_POLICY=PASSIVE`` for this process and the ones it starts, unless already set."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
