"""Continuous batching under a token budget: decodes first, then chunked
prefill; preemption by recompute when blocks run out; pause states.

The scheduler may schedule step N+1 before step N's tokens are known: each
in-flight sampled token counts as a placeholder (see Request).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from agentgate.engine.front.protocol import SchedulerStats
from agentgate.engine.kv.kv_cache_manager import KVCacheManager
from agentgate.engine.request import FinishReason, Request, RequestStatus
from agentgate.engine.scheduling.adapter_slots import AdapterLimit
from agentgate.engine.scheduling.admission_order import active_programs, next_waiting
from agentgate.engine.scheduling.memory_pressure import MemoryPressure
from agentgate.engine.scheduling.programs.admission import ProgramAdmission
from agentgate.engine.scheduling.retention import KVRetention
from agentgate.engine.scheduling.scheduler_output import (
    ModelRunnerOutput,
    NewRequestData,
    ScheduledRequest,
    SchedulerOutput,
)
from agentgate.engine.scheduling.step_budget import StepBudget
from agentgate.engine.scheduling.waiting_queue import FcfsQueue
from agentgate.engine.speculative.speculator import Speculator
from agentgate.engine.token_events import TokenEvent, confirm_tokens


class PauseState(enum.Enum):
    UNPAUSED = "unpaused"
    PAUSED_NEW = "paused_new"  # admit nothing new; in-flight work continues
    PAUSED_ALL = "paused_all"  # schedule nothing; state kept for resume


@dataclass(frozen=True)
class SchedulerLimits:
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int


class Scheduler:
    """``waiting``: the queue's order is the scheduling policy (engine.programs.queue); with it,
    the program policy preempts the running request whose program ranks last (engine.programs.table:
    by the level of service it has had, then by when it entered it). ``retention``: pins of
    programs waiting on tools (engine.retention). Who gives way when blocks run out, a pin or a
    running request: `engine.scheduling.memory_pressure`.

    ``step_budget``: with one, a step that decodes carries only the prompt tokens it says fit
    beside its decoding rows in time (engine.step_budget); a step that decodes nothing takes
    ``max_num_batched_tokens`` of prompt.

    A program's service (``Request.served``) counts the prompt tokens a turn computes when first
    admitted (what the prefix cache did not hold) and each token sampled; recomputing after a
    preemption is not charged to it.

    ``max_loras``: at most that many distinct LoRA adapters in a step (engine.scheduling.adapter_slots)."""

    def __init__(
        self,
        limits: SchedulerLimits,
        kv: KVCacheManager,
        speculator: Speculator | None = None,
        *,
        waiting: FcfsQueue | None = None,
        retention: KVRetention | None = None,
        step_budget: StepBudget | None = None,
        max_loras: int | None = None,
    ) -> None:
        self.limits = limits
        self.adapters = AdapterLimit(max_loras)
        self.step_budget = step_budget
        self.kv = kv
        self.speculator = speculator
        self.retention = retention if retention is not None else KVRetention(kv.pool, "off")
        # Request-steps that sampled, and the tokens they confirmed (> 1 per step with accepted drafts).
        self.num_sampling_steps = 0
        self.num_sampled_tokens = 0
        self.requests: dict[str, Request] = {}
        self.waiting = waiting if waiting is not None else FcfsQueue()
        by_program = type(self.waiting) is not FcfsQueue
        self.memory = MemoryPressure(kv, self.retention, self.waiting, by_program)
        self.admission = (
            ProgramAdmission(kv.pool.num_blocks, kv.block_size, clock=lambda: self.waiting.clock())
            if by_program
            else None
        )
        self.running: list[Request] = []
        self.pause_state = PauseState.UNPAUSED
        self.num_preemptions = 0
        self.num_budget_closed = 0  # replies whose budget closed a value or call (reported as cut)
        self.num_thinking_budget_closed = 0  # thinking blocks the engine closed (engine.structured.thinking)
        self._released: list[str] = []

    # -- requests in and out ---------------------------------------------
    def add_request(self, request: Request) -> None:
        self.requests[request.request_id] = request
        self.retention.on_arrival(request)
        self.waiting.push(request)
        if self.speculator is not None:
            self.speculator.start(request)

    def abort_requests(self, request_ids: list[str] | None = None) -> list[Request]:
        """Finish the named requests (all of them for None) as aborted."""
        ids = list(self.requests) if request_ids is None else request_ids
        aborted = []
        for request_id in ids:
            request = self.requests.get(request_id)
            if request is None:
                continue
            if request.status is RequestStatus.RUNNING:
                self.running.remove(request)
            else:
                self.waiting.remove(request)
                self.retention.on_abort(request)
            self._finish(request, FinishReason.ABORT)
            aborted.append(request)
        return aborted

    @property
    def num_in_flight_admitted(self) -> int:
        """Requests already started (running, or preempted to resume)."""
        return len(self.running) + sum(1 for r in self.waiting if r.ever_scheduled)

    def stats(self) -> SchedulerStats:
        self.retention.expire()
        return SchedulerStats(
            num_running=len(self.running),
            num_waiting=len(self.waiting),
            kv_usage=self.kv.usage,
            prefix_queries_tokens=self.kv.prefix_queries_tokens,
            prefix_hits_tokens=self.kv.prefix_hits_tokens,
            num_preemptions=self.num_preemptions,
            num_budget_closed=self.num_budget_closed,
            num_thinking_budget_closed=self.num_thinking_budget_closed,
            paused=self.pause_state.value,
            num_sampling_steps=self.num_sampling_steps,
            num_sampled_tokens=self.num_sampled_tokens,
            num_draft_tokens=self.speculator.num_drafted_tokens if self.speculator else 0,
            num_accepted_tokens=self.speculator.num_accepted_tokens if self.speculator else 0,
            retention=self.retention.stats(),
            kv_residency=self.kv.pool.residency.stats(),
            max_wait_s=self.waiting.max_wait,
            longest_wait_passed_s=self.waiting.longest_wait_passed,
            num_waits_past_bound=self.waiting.num_waits_past_bound,
            num_lora_held_steps=self.adapters.num_held_steps,
        )

    # -- one step -----------------------------------------------------------
    @property
    def has_schedulable_work(self) -> bool:
        """Whether ``schedule`` could produce a non-empty step now."""
        if self.pause_state is PauseState.PAUSED_ALL:
            return False
        if self.pause_state is PauseState.PAUSED_NEW:
            return bool(self.running) or any(r.ever_scheduled for r in self.waiting)
        return bool(self.requests)

    def take_released(self) -> list[str]:
        """Hand over released ids now (when no step will carry them soon)."""
        released, self._released = self._released, []
        return released

    def schedule(self) -> SchedulerOutput:
        """The next step. Released ids ride on the first non-empty step, so
        the runner always hears of them before a slot is reused."""
        out = SchedulerOutput()
        if self.pause_state is PauseState.PAUSED_ALL:
            return out
        self.retention.expire()
        rows: dict[str, int] = {}
        drafts: dict[str, tuple[int, ...]] = {}
        self.adapters.plan(self.running, self.waiting)
        budget = self._schedule_running(out, rows, drafts, self.limits.max_num_batched_tokens)
        self._schedule_waiting(out, rows, budget)
        if not rows and self.adapters.replan(self.running, self.waiting, self.waiting.peek() if self.waiting else None):
            budget = self._schedule_running(out, rows, drafts, self.limits.max_num_batched_tokens)
            self._schedule_waiting(out, rows, budget)
        self.adapters.step_done()
        for request_id, num_tokens in rows.items():
            request = self.requests[request_id]
            draft = drafts.get(request_id, ())
            decode = num_tokens == 1 + len(draft) and request.num_computed_tokens >= request.num_prompt_tokens
            request.num_computed_tokens += num_tokens
            samples = request.num_computed_tokens - len(draft) >= request.num_tokens
            if samples:
                request.num_output_placeholders += 1
            constrained = samples and request.grammar is not None
            out.scheduled.append(ScheduledRequest(request_id, num_tokens, samples, constrained, draft, decode))
            out.epochs[request_id] = request.epoch
            self.kv.cache_full_blocks(request)
        if out.scheduled:
            out.released_request_ids, self._released = self._released, []
        return out

    def _schedule_running(
        self, out: SchedulerOutput, rows: dict[str, int], drafts: dict[str, tuple[int, ...]], budget: int
    ) -> int:
        decodes = [r for r in self.running if r.num_computed_tokens >= r.num_prompt_tokens]
        prefills = [r for r in self.running if r.num_computed_tokens < r.num_prompt_tokens]
        speculator = self.speculator
        draft_room = speculator.step_drafts(len(decodes)) if speculator is not None else 0
        for request in decodes:
            budget, draft_room = self._schedule_running_one(request, out, rows, drafts, budget, draft_room)
        budget = self._prompt_budget(sum(rows.values()), budget)
        for request in prefills:
            budget, draft_room = self._schedule_running_one(request, out, rows, drafts, budget, draft_room)
        return budget

    def _prompt_budget(self, decode_tokens: int, budget: int) -> int:
        """The tokens left for prompts in a step whose decoding rows hold ``decode_tokens``: with
        a step budget and rows that decode, at most what fits beside them in time."""
        if self.step_budget is None or decode_tokens == 0:
            return budget
        return min(budget, self.step_budget.prompt_tokens(decode_tokens))

    def _schedule_running_one(
        self,
        request: Request,
        out: SchedulerOutput,
        rows: dict[str, int],
        drafts: dict[str, tuple[int, ...]],
        budget: int,
        draft_room: int,
    ) -> tuple[int, int]:
        """Schedule the running ``request`` within ``budget`` tokens and ``draft_room`` drafts
        (preempting for its memory if need be); returns what is left of both."""
        if budget == 0 or request.status is not RequestStatus.RUNNING:  # none left; preempted earlier
            return budget, draft_room
        if request.num_pending_outputs >= request.max_tokens or not self.adapters.allows(request):
            return budget, draft_room  # its last token is in flight, or its adapter waits a step
        speculator = self.speculator
        wanted = request.num_tokens + request.num_output_placeholders - request.num_computed_tokens
        draft = speculator.draft(request, draft_room) if draft_room > 0 else []
        num_tokens = min(wanted + len(draft), budget)
        if num_tokens <= 0:
            return budget, draft_room
        del draft[max(0, num_tokens - wanted) :]
        while (block_ids := self.kv.allocate(request, num_tokens)) is None:
            if self.retention.release_one(None, ranked_after=self.memory.ranked_after(request)):
                continue
            victim = self.memory.victim(self.running)
            budget += rows.pop(victim.request_id, 0)
            drafts.pop(victim.request_id, None)
            out.new_block_ids.pop(victim.request_id, None)
            self._preempt(victim)
            if victim is request:
                break
        if block_ids is None:
            return budget, draft_room
        if block_ids:
            out.new_block_ids[request.request_id] = block_ids
        rows[request.request_id] = num_tokens
        if draft:
            drafts[request.request_id] = tuple(draft)
            draft_room -= len(draft)
        return budget - num_tokens, draft_room

    def _schedule_waiting(self, out: SchedulerOutput, rows: dict[str, int], budget: int) -> None:
        # Active programs, once per step; each admission adds its own (engine.programs.admission).
        active = (
            active_programs(self.running, self.waiting, self.retention.pins.keys(), self.memory.lost_conversation)
            if self.admission is not None and self.waiting
            else None
        )
        latest_arrival = None  # of the requests admitted: those waiting that came before are passed
        while self.waiting and budget > 0 and len(self.running) < self.limits.max_num_seqs:
            request = next_waiting(self.waiting, self.adapters, self.admission, active)
            if request is None:
                break
            if self.pause_state is PauseState.PAUSED_NEW and not request.ever_scheduled:
                break
            num_cached, num_tokens = self.memory.allocate_waiting(request, budget, bool(self.running))
            if num_tokens is None:
                break
            self.waiting.take(request)
            latest_arrival = max(latest_arrival or request.arrival_time, request.arrival_time)
            self.kv.record_prefix_lookup(request.num_tokens, num_cached)
            self.retention.on_admitted(request, num_cached)
            request.status = RequestStatus.RUNNING
            request.num_computed_tokens = num_cached
            if not request.ever_scheduled:
                request.serve(request.num_tokens - num_cached, self.waiting.clock())
                request.num_cached_tokens = num_cached
                request.ever_scheduled = True
                request.first_scheduled_time = self.waiting.clock()
            self.running.append(request)
            if active is not None and request.program is not None:
                active.add(request.program.program_id)
            out.new_requests.append(
                NewRequestData(
                    request_id=request.request_id,
                    token_ids=request.all_token_ids,
                    num_prompt_tokens=request.num_prompt_tokens,
                    params=request.params,
                    seed=request.seed,
                    eos_token_ids=request.eos_token_ids,
                    block_ids=self.kv.block_ids(request.request_id),
                    num_computed_tokens=num_cached,
                    lora=request.lora,
                )
            )
            rows[request.request_id] = num_tokens
            budget -= num_tokens
            # Offer its blocks now, so requests admitted after it in this very
            # step (agents sharing a system prompt) hit them instead of
            # computing the same prefix again. Only here: a new admission can
            # no longer be preempted within this schedule.
            self.kv.cache_full_blocks(request, num_cached + num_tokens)
        if latest_arrival is not None and self.waiting:
            self.waiting.mark_passed(latest_arrival)

    def _preempt(self, request: Request) -> None:
        """Free the request's blocks and requeue it first in line; it is
        recomputed from its known tokens when readmitted."""
        self.running.remove(request)
        self.kv.free(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.num_output_placeholders = 0
        request.epoch += 1
        self.waiting.push_preempted(request)
        self._released.append(request.request_id)
        self.num_preemptions += 1

    # -- results of a step ----------------------------------------------------
    def update_from_output(self, step: SchedulerOutput, result: ModelRunnerOutput) -> list[TokenEvent]:
        """Confirm the tokens a step sampled; returns them with any finish.
        Outputs for requests finished, aborted or preempted since the step
        was scheduled are dropped. The KV of rejected drafts is rolled back:
        ``num_computed_tokens`` and the blocks past it. No token after a
        stop is confirmed."""
        events = []
        now = self.waiting.clock()
        drafted = {row.request_id: len(row.draft_token_ids) for row in step.scheduled if row.draft_token_ids}
        for row, request_id in enumerate(result.request_ids):
            request = self.requests.get(request_id)
            if (
                request is None
                or request.status is not RequestStatus.RUNNING
                or request.epoch != step.epochs.get(request_id)
            ):
                continue
            tokens = [result.sampled_token_ids[row]]
            if result.extra_token_ids is not None:
                tokens += result.extra_token_ids[row]
            request.num_output_placeholders -= 1
            num_drafted = drafted.get(request_id, 0)
            if num_drafted:
                request.num_computed_tokens -= num_drafted - (len(tokens) - 1)
                self.kv.trim(request)
                self.speculator.verified(request, num_drafted, len(tokens) - 1)
            if request.grammar is not None:  # where the budget removed the model's best (issue 48)
                request.grammar.note_overridden(result.overridden_rows or ())
            confirmed, reason = confirm_tokens(request, tokens)
            request.serve(len(confirmed), now)
            self.num_sampling_steps += 1
            self.num_sampled_tokens += len(confirmed)
            if reason is not None:
                self.num_budget_closed += request.grammar is not None and request.grammar.budget_cut
                self.num_thinking_budget_closed += getattr(request.grammar, "closed_by_engine", False)
                self.running.remove(request)
                self._finish(request, reason)
            elif self.speculator is not None:
                self.speculator.confirmed(request, confirmed)
            events.append(TokenEvent(request, confirmed, row, reason))
        return events

    def _finish(self, request: Request, reason: FinishReason) -> None:
        if self.admission is not None and request.program is not None:
            self.admission.turn_ended(len(self.kv.block_ids(request.request_id)))
        if reason is FinishReason.ABORT or reason is FinishReason.ERROR:
            self.kv.free(request)
        elif not self.retention.on_finished(request, self.kv.detach):
            self.kv.free(request)
        self.retention.on_left(request)
        if request.first_scheduled_time is not None and reason is not FinishReason.ABORT:
            self.waiting.bound.observe(self.waiting.clock() - request.first_scheduled_time)
        if self.speculator is not None:
            self.speculator.finish(request.request_id)
        request.status = RequestStatus.FINISHED
        request.finish_reason = reason
        del self.requests[request.request_id]
        self._released.append(request.request_id)
