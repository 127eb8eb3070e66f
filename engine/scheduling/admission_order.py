"""Which waiting request the scheduler admits next: the queue's order (the scheduling policy),
program admission (`engine.scheduling.programs.admission`) and the LoRA adapters the step may hold
(`engine.scheduling.adapter_slots`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from agentgate.engine.request import Request
from agentgate.engine.scheduling.adapter_slots import AdapterLimit
from agentgate.engine.scheduling.programs.admission import ProgramAdmission
from agentgate.engine.scheduling.waiting_queue import FcfsQueue


def next_waiting(
    waiting: FcfsQueue, adapters: AdapterLimit, admission: ProgramAdmission | None, active: set[str] | None
) -> Request | None:
    """The head of the queue, else the first in its order that program admission (given the
    ``active`` programs; None: no program admission) and the step's adapters let start; None when
    none may. An overdue head is never held back by program admission, nor passed."""
    head = waiting.peek()
    if waiting.overdue(head):
        return head if adapters.allows(head) else None

    def may_start(request: Request) -> bool:
        programs = active is None or request.program is None or admission.admits(request, active)
        return programs and adapters.allows(request)

    if may_start(head):
        return head
    return next((r for r in waiting.ordered() if may_start(r)), None)


def active_programs(
    running: Iterable[Request],
    waiting: Iterable[Request],
    pinned: Iterable[str],
    lost_conversation: Callable[[Request], bool] = lambda request: False,
) -> set[str]:
    """Programs with a running request, a pin, or a turn waiting that resumes, or that returns after
    tool calls unless its conversation was lost to pressure (``lost_conversation``: it is admitted as
    a new program is, ``engine.scheduling.programs.admission``)."""
    active = {r.program.program_id for r in running if r.program is not None}
    active.update(
        r.program.program_id
        for r in waiting
        if r.program is not None and (r.ever_scheduled or (r.returns_after_tools and not lost_conversation(r)))
    )
    return active | set(pinned)
