"""What the scheduler hands the runner for one step, and what comes back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agentgate.engine.sampling_params import SamplingParams

if TYPE_CHECKING:
    from agentgate.engine.lora.adapter import LoraAdapter


@dataclass(frozen=True)
class NewRequestData:
    """A request entering the runner (first admission or resumption after
    preemption). ``token_ids`` are all its known tokens; the runner computes
    them from ``num_computed_tokens`` (a prefix-cache hit) on."""

    request_id: str
    token_ids: list[int]
    num_prompt_tokens: int
    params: SamplingParams
    seed: int
    eos_token_ids: frozenset[int]
    block_ids: list[int]
    num_computed_tokens: int
    lora: LoraAdapter | None = None  # its LoRA adapter (engine.lora), held from arrival to end


@dataclass(frozen=True)
class ScheduledRequest:
    """One row of the step: compute ``num_tokens`` tokens of the request;
    ``samples`` when this step completes its known tokens and so samples;
    ``constrained`` when that sample must obey the request's grammar.
    ``draft_token_ids``: speculated tokens to verify; they are the row's
    last ``len(draft_token_ids)`` inputs (``num_tokens`` counts them), and
    the row samples at each of its last ``1 + len(draft_token_ids)`` positions.
    ``decode``: the row computes one token past the prompt (and its drafts);
    any other row (a prompt's, a recomputation's) is a prompt row, whose
    numbers must not depend on how much of it the prefix cache held
    (`engine.kernel_choice.row_choice`)."""

    request_id: str
    num_tokens: int
    samples: bool
    constrained: bool = False
    draft_token_ids: tuple[int, ...] = ()
    decode: bool = False

    @property
    def num_sampling_rows(self) -> int:
        """Positions this row samples at (its rows in a grammar bitmask)."""
        return 1 + len(self.draft_token_ids) if self.samples else 0


@dataclass
class SchedulerOutput:
    """One step. The runner first forgets ``released_request_ids`` (finished,
    aborted or preempted since the previous step), then takes
    ``new_requests``, appends ``new_block_ids`` to running requests' tables,
    and runs ``scheduled`` in order."""

    scheduled: list[ScheduledRequest] = field(default_factory=list)
    new_requests: list[NewRequestData] = field(default_factory=list)
    new_block_ids: dict[str, list[int]] = field(default_factory=dict)
    released_request_ids: list[str] = field(default_factory=list)
    # Request epochs at scheduling time: outputs of a preempted epoch are dropped.
    epochs: dict[str, int] = field(default_factory=dict)

    @property
    def needs_bitmask(self) -> bool:
        """Whether sampling waits for a grammar bitmask (see EngineCore.step)."""
        return any(row.constrained for row in self.scheduled)

    @property
    def num_sampling_rows(self) -> int:
        return sum(row.num_sampling_rows for row in self.scheduled)

    @property
    def total_num_tokens(self) -> int:
        return sum(row.num_tokens for row in self.scheduled)

    @property
    def num_decode_tokens(self) -> int:
        """Tokens of the step's leading decode rows (the scheduler puts decodes first); every token
        after them is computed as a prompt's."""
        count = 0
        for row in self.scheduled:
            if not row.decode:
                break
            count += row.num_tokens
        return count

    @property
    def num_decode_requests(self) -> int:
        """Requests among the step's leading decode rows (`engine.step_rows.decode_rows`)."""
        count = 0
        for row in self.scheduled:
            if not row.decode:
                break
            count += 1
        return count

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


@dataclass
class ModelRunnerOutput:
    """Sampled tokens of one step, one entry per row that sampled, in order.

    ``logprobs[i]`` is the sampled token's logprob; ``top_token_ids[i]`` /
    ``top_logprobs[i]`` the step's top alternatives (the batch's widest
    request decides how many; narrower requests are cut on the host).

    With drafts (speculative decoding), ``sampled_token_ids[i]`` is the first
    token a row emits and ``extra_token_ids[i]`` the tokens it emits after it
    (its accepted drafts but the first, then the target's next token), so a
    row accepted ``len(extra_token_ids[i])`` drafts. Rows that request
    logprobs never draft."""

    request_ids: list[str]
    sampled_token_ids: list[int]
    extra_token_ids: list[list[int]] | None = None
    logprobs: list[float] | None = None
    top_token_ids: list[list[int]] | None = None
    top_logprobs: list[list[float]] | None = None
    # Sampling rows (the grammar bitmask's) where a forced-call budget removed the token the model would
    # have taken (``SamplerOutput.overridden``); None when no row was narrowed.
    overridden_rows: set[int] | None = None
