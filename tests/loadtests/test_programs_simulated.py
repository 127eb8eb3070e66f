"""The simulated agent_programs (null runner, virtual time): the modeled step time, and a run
whose figures have the shape of the live benchmark's (retention with program scheduling keeps the
returning prompts that retention off recomputes)."""

from __future__ import annotations

import argparse

from agentgate.engine.sampling_params import SamplingParams
from agentgate.loadtests.agent_programs import VARIANTS
from agentgate.loadtests.programs_simulated import PROMPT_TOKEN_S, ROW_S, STEP_S, VirtualClock, engine, simulate


def test_a_step_takes_its_modeled_time_on_the_virtual_clock():
    """A 10-token prompt's step: one row, ten prompt tokens; then its decode step: one row."""
    clock = VirtualClock()
    args = argparse.Namespace(num_kv_blocks=64, max_wait="auto", retention_fraction=0.8)
    core = engine(VARIANTS["auto/program"], args, clock)
    core.add_request("r", list(range(3, 13)), SamplingParams(max_tokens=2, ignore_eos=True), arrival_time=0.0)
    core.step()
    assert clock.now == STEP_S + ROW_S + 10 * PROMPT_TOKEN_S
    core.step()
    assert clock.now == 2 * (STEP_S + ROW_S) + 10 * PROMPT_TOKEN_S
    assert core.scheduler.retention.clock is clock and core.scheduler.waiting.clock is clock


def test_a_run_keeps_the_returning_prompts_only_with_retention():
    args = argparse.Namespace(agents=12, turns=5, num_kv_blocks=283, max_wait="auto", retention_fraction=0.8)
    off = simulate(VARIANTS["off/fcfs"], args, seed=1)
    program = simulate(VARIANTS["auto/program"], args, seed=1)
    assert off["return_hit_rate"] < 0.2 < 0.5 < program["return_hit_rate"]
    assert program["jct_p50"] < off["jct_p50"]
    for figures in (off, program):
        assert figures["max_wait_s"] >= 10.0 and figures["longest_wait"] > 0
