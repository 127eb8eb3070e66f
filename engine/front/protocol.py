"""The wire protocol between front ends and engine processes.

Every message is a msgspec struct encoded as msgpack (``array_like`` keeps
them compact), one tagged union each way. Front end -> engine: Hello,
AddRequest, TurnEnded, ToolsReturned, AbortRequests, and the calls that get a CallResult (Pause,
Resume, IsPaused, GetStats, Health, LoadLora, UnloadLora). Engine -> front end: Ready,
StartupFailed, EngineOutputs, CallResult, Heartbeat. Token ids travel, never
text.
"""

from __future__ import annotations

from typing import Literal, get_args

import msgspec

from agentgate.engine.sampling_params import SamplingParams

# abort: end requests in flight; wait: let them finish; keep: freeze them in place.
PauseMode = Literal["abort", "wait", "keep"]
PAUSE_MODES: tuple[str, ...] = get_args(PauseMode)


class Hello(msgspec.Struct, tag="hello", array_like=True):
    """A front end introducing itself; the engine answers with Ready."""

    client_name: str


class ProgramTag(msgspec.Struct, array_like=True, omit_defaults=True):
    """Which agent program a request is a turn of (the gateway's choice: a session, a
    Responses chain, a ``prompt_cache_key`` or a ``user``, in that order), for KV
    retention and program-level scheduling.

    ``tools_offered``: the turn may end in tool calls (its conversation may be pinned
    when it ends, until a TurnEnded says whether it did). ``after_tool_calls``: the
    previous turn ended in tool calls, whose results this turn carries; it ended at
    ``previous_turn_end`` (wall clock, ``time.time()``; 0: unknown) calling
    ``tool_names``."""

    program_id: str
    tools_offered: bool = False
    after_tool_calls: bool = False
    previous_turn_end: float = 0.0
    tool_names: list[str] = []


class ThinkingSpec(msgspec.Struct, array_like=True, omit_defaults=True):
    """A reasoning model's thinking block, which the engine enforces (``engine.structured.thinking``):
    its parser's start and end sequences in tokens, whether the rendered prompt already opened the
    block (else the model may open it with its first tokens), and at most how many tokens the
    thinking may take (None: only ``max_tokens`` bounds it)."""

    start_token_ids: list[int]
    end_token_ids: list[int]
    prompt_opened: bool = False
    budget: int | None = None


class AddRequest(msgspec.Struct, tag="add", array_like=True, omit_defaults=True):
    """A request for the engine. It carries no time: the engine stamps its arrival with its own
    clock, so no front end's clock (another host's) is compared inside the engine. ``tenant``: its
    API key's digest (drafts never cross tenants); ``cache_salt``: requests with another salt share
    no cached KV (``engine.kv.prefix_cache``)."""

    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    eos_token_ids: list[int] = []
    program: ProgramTag | None = None
    tenant: str = ""
    cache_salt: str = ""
    thinking: ThinkingSpec | None = None
    lora: str = ""  # the LoRA adapter it runs through, by name ("": the base model; engine.lora)


class TurnEnded(msgspec.Struct, tag="turn_ended", array_like=True):
    """A program's turn (engine request ``request_id``) finished and the gateway has read
    its reply: it called ``tool_names`` (empty: no tool call, so nothing is kept for it).
    ``server_hold`` > 0: the server runs those tools itself (the hosted MCP loop), for at most
    that many seconds; the pin is held until ToolsReturned or the next round (no TTL guessed)."""

    program_id: str
    request_id: str
    tool_names: list[str]
    server_hold: float = 0.0


class ToolsReturned(msgspec.Struct, tag="tools_returned", array_like=True):
    """The server-run tools of ``request_id``'s turn returned and no next round follows (the loop
    stopped): the pin held for them is released. (A next round claims the pin itself.)"""

    program_id: str
    request_id: str


class AbortRequests(msgspec.Struct, tag="abort", array_like=True):
    """Abort the named requests; ``all_requests`` aborts every request."""

    request_ids: list[str]
    all_requests: bool = False


# -- calls: each carries the id its CallResult answers with ---------------------------


class Pause(msgspec.Struct, tag="pause", array_like=True):
    """Pause the engine (``EngineCore.pause``); answered once done, in mode ``wait`` once drained.
    ``mode`` is checked by the engine, so a wrong one is an error answer, not a dropped message."""

    call_id: int
    mode: str = "abort"


class Resume(msgspec.Struct, tag="resume", array_like=True):
    call_id: int


class IsPaused(msgspec.Struct, tag="is_paused", array_like=True):
    call_id: int


class GetStats(msgspec.Struct, tag="get_stats", array_like=True):
    """Answered with the scheduler's SchedulerStats."""

    call_id: int


class Health(msgspec.Struct, tag="health", array_like=True):
    """Answered with True by an engine whose loop runs."""

    call_id: int


class LoadLora(msgspec.Struct, tag="load_lora", array_like=True):
    """Load the LoRA adapter at ``path`` (a PEFT directory on the engine's host) as ``name``."""

    call_id: int
    name: str
    path: str


class UnloadLora(msgspec.Struct, tag="unload_lora", array_like=True):
    """Stop serving LoRA adapter ``name``; its running requests finish through it."""

    call_id: int
    name: str


EngineCall = Pause | Resume | IsPaused | GetStats | Health | LoadLora | UnloadLora


class EngineInfo(msgspec.Struct, array_like=True, omit_defaults=True):
    """What a front end learns about an engine at the handshake. ``engine_id``
    is unique per engine process, whatever address it is reached by."""

    model: str
    architecture: str
    vocab_size: int
    max_model_len: int
    block_size: int
    num_kv_blocks: int
    runner: str
    device: str
    dtype: str
    pid: int = 0
    engine_id: str = ""
    quantization: str = "none"
    weights: str = ""  # what the linear layers hold, e.g. "int4 Q4_1 x 120, int4 Q8_0 x 1"
    weight_bytes_per_step: int = 0
    max_num_seqs: int = 0  # sequences it runs at once (0: not said); front ends route by it
    loras: list[str] = []  # the LoRA adapters it serves at the handshake, by name (engine.lora)

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_kv_blocks * self.block_size


class Ready(msgspec.Struct, tag="ready", array_like=True):
    info: EngineInfo


class StartupFailed(msgspec.Struct, tag="startup_failed", array_like=True):
    message: str


class TokenLogprobs(msgspec.Struct, array_like=True):
    """The sampled token's logprob and the top alternatives at its step."""

    logprob: float
    top_token_ids: list[int]
    top_logprobs: list[float]


class RequestTimings(msgspec.Struct, array_like=True, omit_defaults=True):
    """Where a finished request's time went in the engine, in seconds (the engine's own clock;
    durations, so no clock is compared across hosts): waiting for its first step, from then
    to its first token (prefill, preemptions' recompute included), from there to its end
    (decode). A phase the request never reached is None."""

    queued: float
    prefill: float | None = None
    decode: float | None = None


class EngineCoreOutput(msgspec.Struct, array_like=True, omit_defaults=True):
    """New tokens of one request from one step; ``finish_reason`` on its last.

    A request that ends with finish reason "error" carries ``error``, and
    ``invalid`` when the engine rejected it as bad input. Its first output
    carries ``queue_time``; its last, ``timings`` (what the gateway's trace spans are
    built from)."""

    request_id: str
    new_token_ids: list[int]
    finish_reason: str | None = None
    logprobs: list[TokenLogprobs] | None = None
    num_cached_tokens: int = 0
    error: str | None = None
    invalid: bool = False
    # On a request's first output: seconds from its arrival to its first scheduled step.
    queue_time: float | None = None
    timings: RequestTimings | None = None  # on its last output
    # On the last output of a request with a thinking block: its output tokens up to the end of
    # the block, start and end sequences included (engine.structured.thinking).
    reasoning_tokens: int = 0


class RetentionStats(msgspec.Struct, array_like=True):
    """KV retention for programs waiting on tools (counters since start, but ``pins``
    and ``held_blocks``, which are now). Returning turns: turns after tool calls; their
    prompt tokens looked up in the prefix cache and found there. Tool gaps: seconds from
    a turn's end to the program's next turn."""

    pins: int = 0
    held_blocks: int = 0
    max_held_blocks: int = 0
    pinned_total: int = 0
    released_returned: int = 0
    released_expired: int = 0
    released_pressure: int = 0
    released_no_tool_call: int = 0
    released_loop_ended: int = 0  # server-run tools returned and the loop stopped
    returning_turns: int = 0
    returning_queries_tokens: int = 0
    returning_hits_tokens: int = 0
    tool_gaps: int = 0
    tool_gap_seconds_sum: float = 0.0
    # Pinned KV released for memory: the blocks only those pins held (freed to the LRU), and the
    # returning turns of those programs that then found less of their conversation cached than
    # the pin had held.
    pressure_released_blocks: int = 0
    returning_missed_after_eviction: int = 0


# vLLM's buckets for its KV residency histograms (``vllm/v1/metrics/loggers.py``), in seconds.
KV_RESIDENCY_BUCKETS: tuple[float, ...] = tuple(
    float(b) for b in "0.001 0.002 0.005 0.01 0.02 0.05 0.1 0.2 0.5 1 2 5 10 20 30 60 120 300 600 1200 1800".split()
)


class HistogramCounts(msgspec.Struct, array_like=True):
    """Observations since start: how many fell in each bucket of `KV_RESIDENCY_BUCKETS` (each
    bucket's own, not cumulative; one more for above the last bound) and their sum."""

    counts: list[int]
    total: float = 0.0


class KvResidencyStats(msgspec.Struct, array_like=True):
    """vLLM's KV residency figures, observed when a block is taken for new content (its last
    life ends): seconds from its allocation (``lifetime``) and from its last access
    (``idle_before_evict``), and the gaps between its last accesses (prefix-cache hits)."""

    lifetime: HistogramCounts
    idle_before_evict: HistogramCounts
    reuse_gap: HistogramCounts


class SchedulerStats(msgspec.Struct, array_like=True):
    num_running: int
    num_waiting: int
    kv_usage: float
    prefix_queries_tokens: int
    prefix_hits_tokens: int
    num_preemptions: int
    paused: str
    # Request-steps that sampled and the tokens they confirmed; drafted and
    # accepted speculative tokens (zero with speculation off).
    num_sampling_steps: int = 0
    num_sampled_tokens: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    retention: RetentionStats | None = None
    # Replies a grammar's budget closed (a value or call the model did not finish: ended as length).
    num_budget_closed: int = 0
    kv_residency: KvResidencyStats | None = None
    # Thinking blocks the engine closed: at the thinking budget, or to leave max_tokens room for the
    # end sequence and the grammar's shortest completion (engine.structured.thinking).
    num_thinking_budget_closed: int = 0
    # The wait bound in force, in seconds (``--max-wait``; auto: from turn service times,
    # ``engine.scheduling.wait_bound``).
    max_wait_s: float = 0.0
    # LoRA adapters (engine.lora) of the running and the waiting requests, by name; at most this many
    # in one step (--max-loras; 0: LoRA off). vLLM's vllm:lora_requests_info reads them.
    running_loras: list[str] = []
    waiting_loras: list[str] = []
    max_loras: int = 0
    # Steps that held a request because the step had --max-loras distinct adapters already
    # (engine.scheduling.adapter_slots).
    num_lora_held_steps: int = 0
    # The longest wait from a request's first pass (a request that came after it admitted ahead of
    # it) to its admission, since the engine started, and the admissions after a wait longer than the
    # bound in force then (engine.scheduling.waiting_queue).
    longest_wait_passed_s: float = 0.0
    num_waits_past_bound: int = 0


class EngineOutputs(msgspec.Struct, tag="outputs", array_like=True):
    """One step's outputs for one front end."""

    outputs: list[EngineCoreOutput]


class Heartbeat(msgspec.Struct, tag="heartbeat", array_like=True):
    """Sent to every front end twice a second, busy or idle: proof of life
    for front ends that cannot watch the engine's process. (Stats are asked
    for when /metrics is scraped: GetStats.)"""


class CallResult(msgspec.Struct, tag="result", array_like=True, omit_defaults=True):
    """The answer to a call: its value (a flag, or the stats), or the engine's error."""

    call_id: int
    value: bool | SchedulerStats | None = None
    error: str | None = None


ToEngine = (
    Hello
    | AddRequest
    | TurnEnded
    | ToolsReturned
    | AbortRequests
    | Pause
    | Resume
    | IsPaused
    | GetStats
    | Health
    | LoadLora
    | UnloadLora
)
FromEngine = Ready | StartupFailed | EngineOutputs | CallResult | Heartbeat

_encoder = msgspec.msgpack.Encoder()
_to_engine = msgspec.msgpack.Decoder(ToEngine)
_from_engine = msgspec.msgpack.Decoder(FromEngine)


def encode(message: msgspec.Struct) -> bytes:
    return _encoder.encode(message)


def decode_to_engine(data: bytes) -> ToEngine:
    return _to_engine.decode(data)


def decode_from_engine(data: bytes) -> FromEngine:
    return _from_engine.decode(data)
