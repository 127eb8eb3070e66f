"""At most ``--max-loras`` distinct LoRA adapters in one step: the adapters a step may hold
(issue 53; `engine.lora.slots` keeps that many resident on the device).

Rule: when the pending requests (running, and waiting) use more distinct adapters than
``max_loras``, the step keeps the adapters of the oldest of them by arrival; requests of the other
adapters wait this step: a running one is held (not preempted: it keeps its KV), a waiting one is
not admitted (the requests queued behind it may be). Base-model requests are never held.

Progress: holding may leave a step empty, for instance when the oldest request waits for memory
that held running requests keep. Such a step is planned again (`AdapterLimit.replan`) from the
running requests alone, oldest first, or, when none runs, from the head of the waiting queue, and
scheduled again: running requests always advance, and an empty engine always admits its head.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from agentgate.engine.request import Request


class AdapterLimit:
    """The adapters the step being scheduled may hold (by load uid, `LoraAdapter.uid`); ``max_loras``
    None: no limit (LoRA off)."""

    def __init__(self, max_loras: int | None) -> None:
        self.max_loras = max_loras
        self.allowed: set[str] | None = None  # None: every adapter this step
        self.held = False  # whether `allows` refused a request since the last plan
        self.num_held_steps = 0  # steps that held a request (SchedulerStats.num_lora_held_steps)

    def plan(self, running: Iterable[Request], waiting: Iterable[Request], first: Sequence[Request] = ()) -> None:
        """Plan a step for these pending requests: the adapters of ``first``, then of the oldest by arrival."""
        self.held, self.allowed, limit = False, None, self.max_loras
        if limit is None:
            return
        pending = [r for r in (*running, *waiting) if r.lora is not None]
        if len({r.lora.uid for r in pending}) <= limit:  # ``first`` is among them: every adapter fits
            return
        pending.sort(key=lambda r: r.arrival_time)
        kept = list(dict.fromkeys(r.lora.uid for r in (*first, *pending) if r.lora is not None))
        self.allowed = set(kept[:limit])

    def replan(self, running: Sequence[Request], waiting: Iterable[Request], head: Request | None) -> bool:
        """After a step that scheduled nothing: when it held a request, plan again with the running
        requests first (oldest first), or the waiting ``head`` when none runs, and return True
        (schedule again)."""
        if not self.held:
            return False
        self.plan(running, waiting, sorted(running, key=lambda r: r.arrival_time) if running else [head])
        return True

    def allows(self, request: Request) -> bool:
        """Whether ``request`` may run in this step (see the module docstring); a refusal marks the
        step as holding."""
        if self.allowed is None or request.lora is None or request.lora.uid in self.allowed:
            return True
        self.held = True
        return False

    def step_done(self) -> None:
        """Count the step just scheduled if it held a request."""
        self.num_held_steps += self.held
