"""An engine in a process of its own, started and stopped from the front end: the process
imports the engine core (torch, the model) only once it runs, so the gateway that starts
it never does (``tests/gateway/test_gateway_boundary.py``)."""

from __future__ import annotations

import multiprocessing
import os

from agentgate.engine.config import EngineConfig


def start_engine_process(
    config: EngineConfig, address: str, model_name: str | None = None
) -> multiprocessing.process.BaseProcess:
    """Spawn an engine process serving ``config`` at ``address`` (it binds)."""
    from agentgate.engine.front.process import run_engine_process
    from agentgate.engine.model_files.model_path import model_display_name

    process = multiprocessing.get_context("spawn").Process(
        target=run_engine_process,
        args=(config, address, model_name or model_display_name(config.model), os.getpid()),
        name="agentgate-engine",
        daemon=True,
    )
    process.start()
    return process


def stop_engine_process(process: multiprocessing.process.BaseProcess, timeout: float = 10.0) -> None:
    """SIGTERM, wait, then SIGKILL if it will not go."""
    if process.is_alive():
        process.terminate()
        process.join(timeout)
    if process.is_alive():
        process.kill()
        process.join(5)
