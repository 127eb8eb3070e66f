"""EngineCore: the step loop. Inbox -> scheduler -> runner -> outbox, token
ids in and token ids out. With the overlapped runner, step N+1 is launched
before step N's tokens are waited for."""

from __future__ import annotations

import logging
import os
import random
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any

from agentgate.engine import cpu_threads
from agentgate.engine.config import EngineConfig
from agentgate.engine.core_parts import make_queue, make_runner, make_speculator, make_step_budget
from agentgate.engine.errors import InvalidRequestError
from agentgate.engine.front.protocol import (
    PAUSE_MODES,
    EngineCoreOutput,
    EngineInfo,
    ProgramTag,
    SchedulerStats,
    ThinkingSpec,
    TokenLogprobs,
)
from agentgate.engine.kv.kv_cache_manager import KVCacheManager
from agentgate.engine.lora.calls import LoraCalls
from agentgate.engine.request import FinishReason, Request
from agentgate.engine.runner.interface import ModelRunner
from agentgate.engine.sampling_params import SamplingParams
from agentgate.engine.scheduling.retention import KVRetention
from agentgate.engine.scheduling.scheduler import PauseState, Scheduler, SchedulerLimits
from agentgate.engine.scheduling.scheduler_output import ModelRunnerOutput, SchedulerOutput
from agentgate.engine.structured.grammar_waits import GrammarWaits
from agentgate.engine.token_events import TokenEvent

log = logging.getLogger("agentgate.engine")

# While requests wait only for their grammars: how long a loop sleeps between looks at the compiles.
# Stepping at once would spin, and a spinning thread holds the GIL the grammar thread needs (measured:
# the first budgeted grammar of a server took ~20 s beside the spin instead of ~0.5 s).
COMPILE_POLL_S = 0.002


@dataclass
class _InFlight:
    step: SchedulerOutput
    handle: Any
    awaiting_bitmask: bool
    launched: float  # time.perf_counter() before the runner took it


class EngineCore(LoraCalls):  # LoRA adapters by name: engine.lora.calls
    """Owns the scheduler and the runner; everything here runs on one thread."""

    def __init__(self, config: EngineConfig, runner: ModelRunner | None = None) -> None:
        self.config = config
        self.runner = runner or make_runner(config)
        self._threads = cpu_threads.configure(config, self.runner.device_type)
        spec = self.runner.kv_spec
        self.max_model_len = spec.max_model_len
        self.vocab_size = self.runner.vocab_size
        kv = KVCacheManager(spec.num_blocks, spec.block_size, config.enable_prefix_caching)
        retention = "off" if not config.enable_prefix_caching else config.kv_retention
        self.scheduler = Scheduler(
            SchedulerLimits(config.max_num_seqs, config.max_num_batched_tokens, spec.max_model_len),
            kv,
            make_speculator(config, self.runner.batch_dependent_decode),
            waiting=make_queue(config.scheduling_policy, config.max_wait),
            retention=KVRetention(kv.pool, retention, config.kv_retention_max_fraction, kv.block_size),
            step_budget=make_step_budget(config, self.runner),
            max_loras=config.max_loras if config.lora_enabled else None,
        )
        self._in_flight: deque[_InFlight] = deque()
        self._last_resolved = 0.0  # time.perf_counter() when the last step resolved
        self._seeds = random.Random(config.seed)
        self.engine_id = uuid.uuid4().hex[:12]
        self._grammars = None  # GrammarCompiler, made on the first constrained request
        self._compiling = GrammarWaits(config.grammar_compile_timeout)  # requests waiting for their grammar

    def info(self, model_name: str) -> EngineInfo:
        runner = self.runner
        return EngineInfo(
            model=model_name,
            architecture=runner.architecture,
            vocab_size=self.vocab_size,
            max_model_len=self.max_model_len,
            block_size=runner.kv_spec.block_size,
            num_kv_blocks=runner.kv_spec.num_blocks,
            runner=self.config.runner,
            device=runner.device_name,
            dtype=runner.dtype_name,
            pid=os.getpid(),
            engine_id=self.engine_id,
            quantization=runner.quantization,
            weights=runner.weights,
            weight_bytes_per_step=runner.weight_bytes_per_step,
            max_num_seqs=self.config.max_num_seqs,
            loras=self.lora_names(),
        )

    # -- requests --------------------------------------------------------------
    def add_request(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        eos_token_ids: frozenset[int] | list[int] = frozenset(),
        arrival_time: float | None = None,
        program: ProgramTag | None = None,
        tenant: str = "",
        cache_salt: str = "",
        thinking: ThinkingSpec | None = None,
        lora: str = "",
    ) -> None:
        """Validate and queue a request; InvalidRequestError leaves no trace. ``program``: the
        agent program it is a turn of (KV retention, program scheduling); ``tenant`` and
        ``cache_salt``: see ``engine.front.protocol.AddRequest``; ``thinking``: its reasoning
        model's thinking block, enforced before its grammar (engine.structured.thinking); ``lora``: the
        name of the LoRA adapter it runs through ("" for none; engine.lora)."""
        self.validate_request(request_id, prompt_token_ids, params)
        adapter = self.lora_adapter(lora)
        seed = params.seed if params.seed is not None else self._seeds.getrandbits(63)
        request = Request(
            request_id,
            list(prompt_token_ids),
            params,
            seed=seed % (1 << 64),
            eos_token_ids=frozenset(eos_token_ids),
            max_model_len=self.max_model_len,
            arrival_time=arrival_time,
            program=program,
            tenant=tenant,
            cache_salt=cache_salt,
            lora=adapter,
        )
        structured = params.structured
        if thinking is not None:
            if self.config.runner == "null":
                raise InvalidRequestError(
                    "thinking blocks need a model (the null runner samples no bitmask)", "thinking"
                )
            from agentgate.engine.structured.thinking import open_gate

            request.grammar, structured = open_gate(thinking, request, self.vocab_size)
        if structured is None:
            self.scheduler.add_request(request)
        else:  # scheduled once its grammar has compiled (see _admit_compiled)
            self._compiling.add(request, self._grammar_compiler().submit(structured, tenant, cache_salt))

    def turn_ended(self, program_id: str, request_id: str, tool_names: list[str], server_hold: float = 0.0) -> None:
        """The front end read the reply of ``request_id``, a turn of ``program_id``: it called
        ``tool_names`` (none: the conversation's pin, if any, is released); ``server_hold`` > 0: the
        server runs them, for at most that many seconds (engine.scheduling.retention)."""
        self.scheduler.retention.on_turn_ended(program_id, request_id, tool_names, server_hold)

    def tools_returned(self, program_id: str, request_id: str) -> None:
        """The server-run tools of ``request_id``'s turn returned and the loop stopped
        (engine.scheduling.retention)."""
        self.scheduler.retention.on_tools_returned(program_id, request_id)

    def _grammar_compiler(self):
        if self._grammars is None:
            from agentgate.engine.model_files.model_path import resolve_model_path
            from agentgate.engine.structured.structured_output import GrammarCompiler

            if self.config.runner == "null":
                raise InvalidRequestError("structured outputs need a model with a tokenizer", "structured")
            workers = self.config.grammar_compile_workers
            self._grammars = GrammarCompiler(resolve_model_path(self.config.model), self.vocab_size, workers=workers)
        return self._grammars

    def _admit_compiled(self) -> list[EngineCoreOutput]:
        """Schedule requests whose grammar is ready; the final outputs of those whose grammar failed
        or missed its deadline (engine.structured.grammar_waits)."""
        if not self._compiling:
            return []
        ready, failed = self._compiling.take_ready()
        for request in ready:
            self.scheduler.add_request(request)
        return failed

    def validate_request(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams) -> None:
        if request_id in self.scheduler.requests or request_id in self._compiling:
            raise InvalidRequestError(f"request id {request_id!r} is already in use", "request_id")
        if not prompt_token_ids:
            raise InvalidRequestError("the prompt is empty", "prompt")
        if min(prompt_token_ids) < 0 or max(prompt_token_ids) >= self.vocab_size:
            raise InvalidRequestError(f"prompt token ids must be in [0, {self.vocab_size})", "prompt")
        if len(prompt_token_ids) >= self.max_model_len:
            raise InvalidRequestError(
                f"the prompt has {len(prompt_token_ids)} tokens; this model's context is "
                f"{self.max_model_len} tokens, which leaves no room to generate",
                "prompt",
            )
        params.validate(self.vocab_size)

    def abort_requests(self, request_ids: list[str] | None) -> list[EngineCoreOutput]:
        """Abort the named requests (every request for None); returns their
        final outputs."""
        aborted = self.scheduler.abort_requests(request_ids) + self._compiling.remove(request_ids)
        self._release_if_idle()
        return [EngineCoreOutput(r.request_id, [], FinishReason.ABORT.value) for r in aborted]

    def fail_all(self, message: str) -> list[EngineCoreOutput]:
        """After a failed step: end every request with finish reason "error"
        and drop the steps in flight, so the engine can carry on."""
        self._in_flight.clear()
        failed = self.scheduler.abort_requests(None) + self._compiling.remove(None)
        self.runner.release(self.scheduler.take_released())
        return [EngineCoreOutput(r.request_id, [], "error", error=message) for r in failed]

    # -- pause -----------------------------------------------------------------
    def pause(self, mode: str) -> list[EngineCoreOutput]:
        """abort: end every request now, then admit nothing new. wait: admit
        nothing new, let started requests finish. keep: freeze everything in
        place until resume."""
        if mode not in PAUSE_MODES:
            raise InvalidRequestError(f"pause mode must be one of {PAUSE_MODES}, got {mode!r}", "mode")
        if mode == "keep":
            self.scheduler.pause_state = PauseState.PAUSED_ALL
            return []
        self.scheduler.pause_state = PauseState.PAUSED_NEW
        return self.abort_requests(None) if mode == "abort" else []

    def resume(self) -> None:
        self.scheduler.pause_state = PauseState.UNPAUSED

    @property
    def is_paused(self) -> bool:
        return self.scheduler.pause_state is not PauseState.UNPAUSED

    @property
    def is_drained(self) -> bool:
        """No started request and no step in flight (what pause(wait) waits for)."""
        return not self._in_flight and self.scheduler.num_in_flight_admitted == 0

    def stats(self) -> SchedulerStats:
        return self.lora_stats(self.scheduler.stats(), self.scheduler.running, self.scheduler.waiting)

    # -- the step ----------------------------------------------------------------
    @property
    def has_work(self) -> bool:
        return bool(self._in_flight) or bool(self._compiling) or self.scheduler.has_schedulable_work

    @property
    def only_compiling(self) -> bool:
        """Work waits on grammar compiles alone: a step now would do nothing, so the caller may
        sleep a little instead of spinning (a spinning loop holds the GIL the compiling thread needs)."""
        return bool(self._compiling) and not self._in_flight and not self.scheduler.has_schedulable_work

    def step(self) -> list[EngineCoreOutput]:
        """Launch the next step if the pipeline has room, then resolve the
        oldest step once the pipeline is full (or nothing new was launched).

        Constrained decoding: the bitmask of a step's constrained rows depends
        on the tokens of the step before, which with the overlapped runner
        are not known when the step is launched. Such a step launches its
        forward pass at once and leaves sampling for when it becomes the
        oldest step in flight, i.e. right after its predecessor resolves and
        its grammars have accepted those tokens. The forward pass still
        overlaps; only sampling waits, and only in steps with constrained
        rows.
        """
        if self._threads is not None:
            self._threads.tick()
        outputs = self._admit_compiled()
        launched = False
        if len(self._in_flight) < self.runner.max_steps_in_flight and self.scheduler.has_schedulable_work:
            step = self.scheduler.schedule()
            if not step.is_empty:
                launched_at = time.perf_counter()
                self._in_flight.append(_InFlight(step, self.runner.execute(step), step.needs_bitmask, launched_at))
                launched = True
        if self._in_flight and (not launched or len(self._in_flight) >= self.runner.max_steps_in_flight):
            self._complete_oldest()
            oldest = self._in_flight.popleft()
            result = self.runner.wait(oldest.handle)
            self._observe_step_time(oldest)
            outputs += self._to_outputs(self.scheduler.update_from_output(oldest.step, result), result)
        self._complete_oldest()
        self._release_if_idle()
        return outputs

    def _observe_step_time(self, resolved: _InFlight) -> None:
        """Tell the step budget how long the step just resolved took: from its launch, or, when
        it was launched while the step before ran (two in flight), from that step's end."""
        now = time.perf_counter()
        started, self._last_resolved = max(resolved.launched, self._last_resolved), now
        budget = self.scheduler.step_budget
        if budget is not None:
            step = resolved.step
            decode_tokens = step.num_decode_tokens
            budget.observe(decode_tokens, step.total_num_tokens - decode_tokens, 1000.0 * (now - started))

    def _complete_oldest(self) -> None:
        """Sample the oldest step in flight if it waits for a bitmask: every
        step before it has resolved, so its grammars are current."""
        if not self._in_flight or not self._in_flight[0].awaiting_bitmask:
            return
        from agentgate.engine.structured.structured_output import new_bitmask, unnarrowed_bitmask
        from agentgate.engine.structured.thinking import Redirects, ThinkingGate

        entry = self._in_flight[0]
        step = entry.step
        bitmask = new_bitmask(step.num_sampling_rows, self.vocab_size, pinned=self.runner.device_type == "cuda")
        redirects = Redirects()  # rows in an open thinking block: an end-of-turn token there ends the block
        narrowed: dict = {}  # rows a forced-call budget narrowed, as their grammar alone allowed them
        index = 0
        for row in step.scheduled:
            request = self.scheduler.requests.get(row.request_id)
            if row.constrained and request is not None and request.grammar is not None:
                if isinstance(request.grammar, ThinkingGate):
                    request.grammar.fill(bitmask, index, row.draft_token_ids, redirects)
                else:
                    request.grammar.fill(bitmask, index, row.draft_token_ids)
                narrowed.update(request.grammar.unnarrowed)
            index += row.num_sampling_rows
        redirect = redirects.tensors(step.num_sampling_rows)
        self.runner.complete(entry.handle, bitmask, redirect, unnarrowed_bitmask(bitmask, narrowed))
        entry.awaiting_bitmask = False

    def _release_if_idle(self) -> None:
        """With no step to carry them, released ids go to the runner now, so
        an idle engine holds no request state."""
        if not self.has_work:
            self.runner.release(self.scheduler.take_released())

    @staticmethod
    def _to_outputs(events: list[TokenEvent], result: ModelRunnerOutput) -> list[EngineCoreOutput]:
        outputs = []
        now = time.monotonic()
        for event in events:
            request = event.request
            out = EngineCoreOutput(
                request.request_id,
                event.token_ids,
                event.finish_reason.value if event.finish_reason else None,
                num_cached_tokens=request.num_cached_tokens,
            )
            if event.finish_reason is FinishReason.ERROR:
                out.error = "the grammar rejected a sampled token"
            if len(request.output_token_ids) == len(event.token_ids) and request.first_scheduled_time is not None:
                out.queue_time = max(0.0, request.first_scheduled_time - request.arrival_time)
                if event.token_ids:
                    request.first_token_time = now
            if event.finish_reason is not None:
                out.timings = request.timings(now)
                out.reasoning_tokens = getattr(request.grammar, "reasoning_tokens", 0)
            wanted = request.params.logprobs
            if wanted is not None and result.logprobs is not None:
                top_ids = result.top_token_ids[event.row][:wanted] if result.top_token_ids else []
                top_lps = result.top_logprobs[event.row][:wanted] if result.top_logprobs else []
                out.logprobs = [TokenLogprobs(result.logprobs[event.row], top_ids, top_lps)]
            outputs.append(out)
        return outputs

    def shutdown(self) -> None:
        self._in_flight.clear()
        if self._grammars is not None:
            self._grammars.shutdown()
        self.runner.shutdown()
