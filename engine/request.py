"""One request's life inside the engine: waiting -> running -> finished."""

from __future__ import annotations

import enum
import time
from typing import TYPE_CHECKING

from agentgate.engine.front.protocol import ProgramTag, RequestTimings
from agentgate.engine.kv.prefix_cache import salted_root
from agentgate.engine.sampling_params import SamplingParams
from agentgate.engine.scheduling.programs.table import ProgramRecord, Rank

if TYPE_CHECKING:
    from agentgate.engine.lora.adapter import LoraAdapter


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED = "finished"


class FinishReason(str, enum.Enum):
    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"
    ERROR = "error"


class Request:
    """Host-side source of truth for one request.

    ``num_computed_tokens`` counts tokens whose KV a scheduled step writes
    (advanced when the step is *scheduled*). ``num_output_placeholders``
    counts tokens that scheduled steps will sample but whose ids are not back
    yet; with the overlapped runner a request can have up to two.
    ``epoch`` grows on every preemption, so outputs of a step scheduled
    before the preemption are recognised and dropped.
    """

    __slots__ = (
        "request_id",
        "prompt_token_ids",
        "params",
        "seed",
        "eos_token_ids",
        "max_tokens",
        "arrival_time",
        "output_token_ids",
        "num_computed_tokens",
        "num_output_placeholders",
        "num_cached_tokens",
        "status",
        "finish_reason",
        "epoch",
        "block_hashes",
        "ever_scheduled",
        "first_scheduled_time",
        "first_token_time",
        "grammar",
        "program",
        "served",
        "key_served",
        "passed_since",
        "tenant",
        "cache_root",
        "lora",
        "server_tool_return",
        "returns_after_tools",
    )

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        *,
        seed: int,
        eos_token_ids: frozenset[int],
        max_model_len: int,
        arrival_time: float | None = None,
        program: ProgramTag | None = None,
        tenant: str = "",
        cache_salt: str = "",
        lora: LoraAdapter | None = None,
    ) -> None:
        self.request_id = request_id
        self.prompt_token_ids = prompt_token_ids
        self.params = params
        self.seed = seed
        self.eos_token_ids = frozenset() if params.ignore_eos else eos_token_ids
        room = max_model_len - len(prompt_token_ids)
        self.max_tokens = room if params.max_tokens is None else min(params.max_tokens, room)
        self.arrival_time = time.monotonic() if arrival_time is None else arrival_time
        self.output_token_ids: list[int] = []
        self.num_computed_tokens = 0
        self.num_output_placeholders = 0
        self.num_cached_tokens = 0
        self.status = RequestStatus.WAITING
        self.finish_reason: FinishReason | None = None
        self.epoch = 0
        self.block_hashes: list[int] = []
        self.ever_scheduled = False
        self.first_scheduled_time: float | None = None
        self.first_token_time: float | None = None  # when its first output token was confirmed
        # A program's next round after tools the server ran (engine.scheduling.retention): admitted first.
        self.server_tool_return = False
        # A turn that returns after tool calls its program's last turn made, as this engine saw that
        # turn end (set on arrival, engine.scheduling.retention). Only such a turn skips program
        # admission and may release others' pins: a client's messages that merely end in a tool-call
        # tail (ProgramTag.after_tool_calls) claim it, and a fabricated tail buys nothing (issue 50).
        self.returns_after_tools = False
        # The request's RequestGrammar when its output is constrained.
        self.grammar = None
        # The agent program it is a turn of, and that program's account of the service it has had
        # (engine.programs.table; set on arrival, engine.retention); without a program, its own.
        self.program = program
        self.served = ProgramRecord(level_since=self.arrival_time)
        # Its API key's account: the service of all the key's programs and requests of none (set on
        # arrival, engine.retention); the program policy ranks keys by it before their programs.
        self.key_served = self.served
        # When a request that arrived after it was first admitted while it waited (the wait
        # bound counts from there: engine.waiting_queue); None: never passed.
        self.passed_since: float | None = None
        # Its API key's digest (as the gateway names it; "" for an engine driven directly): drafts
        # come only from the same tenant's outputs (engine.speculative.proposers).
        self.tenant = tenant
        # Its LoRA adapter (engine.lora), held to its end; its uid salts the prefix cache too, so no
        # KV is shared across adapters (nor with the base model, nor with an earlier load of the name).
        self.lora = lora
        # The key of the block before its first: requests with another salt share no cached KV.
        self.cache_root = salted_root(cache_salt if lora is None else f"{cache_salt}\0lora:{lora.uid}")

    @property
    def rank(self) -> Rank:
        """The program policy's rank: its key's account, then its program's (lower goes first)."""
        return (self.key_served.rank, self.served.rank)

    def serve(self, tokens: int, now: float) -> None:
        """Count ``tokens`` served to it ``now``: to its program's account and its key's."""
        self.served.serve(tokens, now)
        if self.key_served is not self.served:
            self.key_served.serve(tokens, now)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        """Tokens whose ids are known: prompt plus confirmed outputs."""
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def num_pending_outputs(self) -> int:
        """Outputs confirmed plus in flight: what max_tokens is checked against."""
        return len(self.output_token_ids) + self.num_output_placeholders

    def timings(self, now: float) -> RequestTimings:
        """Where its time went, ``now`` being its end (see :class:`RequestTimings`)."""
        scheduled, first_token = self.first_scheduled_time, self.first_token_time
        if scheduled is None:
            return RequestTimings(max(0.0, now - self.arrival_time))
        return RequestTimings(
            max(0.0, scheduled - self.arrival_time),
            max(0.0, (first_token or now) - scheduled),
            None if first_token is None else max(0.0, now - first_token),
        )

    def check_stop(self, token: int) -> FinishReason | None:
        """Whether the confirmed output (ending in ``token``) is complete."""
        num_out = len(self.output_token_ids)
        if num_out >= self.params.min_tokens and (token in self.eos_token_ids or token in self.params.stop_token_ids):
            return FinishReason.STOP
        if num_out >= self.max_tokens:
            return FinishReason.LENGTH
        return None
