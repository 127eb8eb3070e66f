"""A runner without a model: it "samples" a deterministic function of the
previous token and the position, instantly. It keeps the same per-request
bookkeeping as a real runner and checks it, so the scheduler, the engine
core and everything above them can be exercised and measured alone."""

from __future__ import annotations

import time
from dataclasses import dataclass

from agentgate.engine.runner.interface import KVCacheSpec, ModelRunner
from agentgate.engine.scheduling.scheduler_output import ModelRunnerOutput, NewRequestData, SchedulerOutput
from agentgate.engine.speculative.verify import emitted_tokens


def null_next_token(previous: int, position: int, seed: int, greedy: bool, vocab_size: int) -> int:
    """The token the null runner emits after ``previous`` at ``position``."""
    mix = previous * 1_000_003 + position * 7_919 + (0 if greedy else seed % 65_521)
    return mix % vocab_size


@dataclass
class _State:
    new: NewRequestData
    token_ids: list[int]
    num_blocks: int
    num_computed: int


class NullRunner(ModelRunner):
    """``max_steps_in_flight`` 2 emulates the overlapped runner's pipeline."""

    architecture = "null"
    device_type = device_name = "cpu"
    dtype_name = "float32"

    def __init__(
        self,
        *,
        num_blocks: int = 4096,
        block_size: int = 16,
        max_model_len: int = 8192,
        vocab_size: int = 49152,
        max_steps_in_flight: int = 1,
        step_seconds: float = 0.0,
        reply_tokens: int | None = None,
    ) -> None:
        self.kv_spec = KVCacheSpec(num_blocks, block_size, min(max_model_len, num_blocks * block_size))
        self.vocab_size = vocab_size
        self.max_steps_in_flight = max_steps_in_flight
        self.states: dict[str, _State] = {}
        self.step_seconds = step_seconds
        self.reply_tokens = reply_tokens  # a reply's EOS after this many tokens (None: never on purpose)
        self.num_steps = 0
        self.num_tokens_computed = 0

    def release(self, request_ids: list[str]) -> None:
        for request_id in request_ids:
            self.states.pop(request_id, None)

    def execute(self, step: SchedulerOutput) -> ModelRunnerOutput:
        self.release(step.released_request_ids)
        for new in step.new_requests:
            assert new.request_id not in self.states, f"{new.request_id} admitted twice"
            self.states[new.request_id] = _State(new, list(new.token_ids), len(new.block_ids), new.num_computed_tokens)
        for request_id, block_ids in step.new_block_ids.items():
            self.states[request_id].num_blocks += len(block_ids)
        ids, tokens, extras = [], [], []
        for row in step.scheduled:
            state = self.states[row.request_id]
            drafts = list(row.draft_token_ids)
            state.num_computed += row.num_tokens
            self.num_tokens_computed += row.num_tokens
            assert state.num_computed <= len(state.token_ids) + len(drafts), "computing tokens not yet sampled"
            assert state.num_blocks * self.kv_spec.block_size >= state.num_computed, "block table too short"
            assert row.samples == (state.num_computed >= len(state.token_ids)), "samples flag disagrees"
            if row.samples:
                new = state.new
                targets = []
                for i in range(len(drafts) + 1):
                    history = state.token_ids + drafts[:i]
                    targets.append(
                        null_next_token(history[-1], len(history), new.seed, new.params.greedy, self.vocab_size)
                    )
                emitted = emitted_tokens(drafts, targets)
                if self.reply_tokens is not None and new.eos_token_ids:
                    emitted = self._ended(emitted, len(state.token_ids) - new.num_prompt_tokens, new.eos_token_ids)
                state.token_ids.extend(emitted)
                state.num_computed -= len(drafts) + 1 - len(emitted)
                state.num_blocks = min(state.num_blocks, -(-state.num_computed // self.kv_spec.block_size))
                ids.append(row.request_id)
                tokens.append(emitted[0])
                extras.append(emitted[1:])
        self.num_steps += 1
        if self.step_seconds:
            time.sleep(self.step_seconds)
        return ModelRunnerOutput(ids, tokens, extras if any(extras) else None)

    def _ended(self, emitted: list[int], generated: int, eos: frozenset[int]) -> list[int]:
        """``emitted`` cut at the reply's end: its EOS at token ``reply_tokens`` of the reply."""
        end = self.reply_tokens - 1 - generated
        if 0 <= end < len(emitted):
            return [*emitted[:end], min(eos)]
        return emitted

    def wait(self, handle: ModelRunnerOutput) -> ModelRunnerOutput:
        return handle
