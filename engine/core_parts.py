"""The parts an `EngineCore` runs, as its config chooses them: the runner, the waiting queue of
the scheduling policy, the step budget and the speculator."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from agentgate.engine.config import SCHEDULING_POLICIES, EngineConfig
from agentgate.engine.runner.interface import ModelRunner
from agentgate.engine.scheduling.programs.queue import ProgramQueue
from agentgate.engine.scheduling.step_budget import StepBudget, resolve_max_step_ms
from agentgate.engine.scheduling.waiting_queue import FcfsQueue
from agentgate.engine.speculative import make_proposer
from agentgate.engine.speculative.speculator import CPU_AUTO_MAX_BATCH, CPU_STEP_DRAFTS, CUDA_STEP_DRAFTS, Speculator

log = logging.getLogger("agentgate.engine")


def make_queue(policy: str, max_wait: str | float = "auto") -> FcfsQueue:
    """The waiting queue of ``--scheduling-policy`` (``engine.scheduling.waiting_queue``,
    ``engine.scheduling.programs.queue``) keeping the wait bound ``max_wait`` (``engine.scheduling.wait_bound``)."""
    if policy == "fcfs":
        return FcfsQueue(max_wait)
    if policy == "program":
        return ProgramQueue(max_wait)
    raise ValueError(f"scheduling policy must be one of {SCHEDULING_POLICIES}, got {policy!r}")


def make_runner(config: EngineConfig) -> ModelRunner:
    if config.runner == "null":
        from agentgate.engine.runner.null import NullRunner

        return NullRunner(
            num_blocks=config.num_kv_blocks or 1 << 16,
            block_size=config.block_size,
            max_model_len=config.max_model_len or 8192,
            max_steps_in_flight=2,
            step_seconds=config.null_step_seconds,
            reply_tokens=config.null_reply_tokens,
        )
    if config.runner == "sync":
        from agentgate.engine.runner.sync import SyncRunner

        return SyncRunner(config)
    from agentgate.engine.runner.overlap import OverlapRunner

    return OverlapRunner(config)


def make_step_budget(config: EngineConfig, runner: ModelRunner) -> StepBudget | None:
    """The step budget ``config.max_step_ms`` gives on ``runner`` (``auto``: on the CPU with a
    model; `engine.scheduling.step_budget`), None for none."""
    ms = resolve_max_step_ms(config.max_step_ms, runner.device_type, runner.architecture != "null")
    return None if ms is None else StepBudget(ms, runner.kv_spec.block_size)


def make_speculator(config: EngineConfig, batch_dependent_decode: Sequence[str] = ()) -> Speculator | None:
    """The speculator ``config.speculative`` asks for (``auto``: the suffix
    proposer where it pays: on a CPU while at most `CPU_AUTO_MAX_BATCH` requests
    decode; off with the null runner, and where ``batch_dependent_decode`` names
    what makes a drafted step compute other numbers than plain decoding here (decode
    linears whose rows depend on the batch, `engine.kernel_choice.decode_exactness`; a
    verify step's logits, `engine.kernel_choice.draft_exactness`), since drafts would then
    change greedy tokens; None: auto on the CPU, off on CUDA)."""
    mode = config.resolved_speculative()
    cpu = config.resolved_device_type() != "cuda"
    max_batch = CPU_AUTO_MAX_BATCH if mode == "auto" and cpu else None
    if mode == "auto" and cpu and batch_dependent_decode:
        log.warning(
            "speculative auto: off: drafts would change greedy tokens here, a drafted step computes other "
            "numbers than plain decoding on this CPU: %s",
            ", ".join(batch_dependent_decode),
        )
        return None
    if mode == "auto":
        mode = "off" if config.runner == "null" else "suffix"
    proposer = make_proposer(mode)
    if proposer is None:
        return None
    step_drafts = config.speculative_step_tokens
    if step_drafts is None:
        step_drafts = CPU_STEP_DRAFTS if cpu else CUDA_STEP_DRAFTS
    return Speculator(proposer, config.num_speculative_tokens, step_drafts, max_batch)
