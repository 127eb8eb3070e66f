"""Frozen engine configuration. Values measured at start-up (the number of KV
blocks) are returned by the runner, never written back into a config."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # torch only when a device is resolved: front ends import this module torch-free
    import torch

from agentgate.engine.errors import InvalidRequestError
from agentgate.engine.scheduling.wait_bound import parse_max_wait

RunnerKind = Literal["overlap", "sync", "null"]
RUNNERS: tuple[str, ...] = ("overlap", "sync", "null")
DTYPES: tuple[str, ...] = ("auto", "float32", "float16", "bfloat16")
QUANTIZATIONS: tuple[str, ...] = ("auto", "none", "int8", "int4")
BATCHED_MATMULS: tuple[str, ...] = ("auto", "quantized")
CPU_ATTENTIONS: tuple[str, ...] = ("auto", "torch")
# The choices of --scheduling-policy (engine.core_parts.make_queue), kept here so front ends import this module
# without the engine.
SCHEDULING_POLICIES: tuple[str, ...] = ("fcfs", "program")
# engine.speculative.SPECULATIVE_MODES, kept here so front ends import this module without the engine.
SPECULATIVE_MODES: tuple[str, ...] = ("off", "ngram", "suffix", "auto")


def parse_retention(mode: str) -> float | None:
    """``--kv-retention``: "auto" -> None (learned TTLs); "off" -> 0.0; "SECONDS" -> that fixed
    TTL. ValueError for anything else."""
    if mode in ("auto", "off"):
        return None if mode == "auto" else 0.0
    try:
        seconds = float(mode)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < float("inf"):
        raise ValueError(f"kv_retention must be auto, off or a positive number of seconds, got {mode!r}")
    return seconds


def parse_max_step_ms(setting: str) -> float | None:
    """``--max-step-ms``: "auto" -> None (chosen by the engine: `engine.scheduling.step_budget`); "off" ->
    0.0 (no budget); "MS" -> that many milliseconds, 0 meaning off. ValueError for anything else."""
    if setting in ("auto", "off"):
        return None if setting == "auto" else 0.0
    try:
        ms = float(setting)
    except ValueError:
        ms = -1.0
    if not 0 <= ms < float("inf"):
        raise ValueError(f"max_step_ms must be auto, off or a number of milliseconds, got {setting!r}")
    return ms


def parse_lora_modules(specs: Sequence[str]) -> list[tuple[str, str]]:
    """``--lora-modules NAME=PATH`` values as (name, path); ValueError for a malformed or repeated one."""
    pairs, seen = [], set()
    for spec in specs:
        name, sep, path = spec.partition("=")
        name, path = name.strip(), path.strip()
        if not sep or not name or not path:
            raise ValueError(f"lora_modules takes NAME=PATH, got {spec!r}")
        if name in seen:
            raise ValueError(f"lora_modules names {name!r} twice")
        seen.add(name)
        pairs.append((name, path))
    return pairs


@dataclass(frozen=True)
class EngineConfig:
    """Everything an engine needs to start.

    model:        None (the default model), a .gguf file or an HF directory.
    device:       "auto" picks CUDA when present, else the CPU.
    runner:       "overlap" (default), "sync" (the reference baseline) or
                  "null" (no model: instant tokens, for benchmarks of
                  everything around the model).
    steps_in_flight: the overlapped runner's pipeline depth; None: 2 on
                  CUDA (step N+1 launches while the GPU runs step N), 1 on
                  the CPU, where a forward pass runs on the calling thread
                  and a second step in flight only delays every token, the
                  admission of new prompts and the freeing of finished ones
                  by a step (measured slower under agent load).
    max_model_len: None = the model's context length, capped at 8192 on CPU.
    kv_cache_bytes: KV budget on the CPU (default 1 GiB); on CUDA the budget
                  is measured from free memory and ``gpu_memory_utilization``.
    num_kv_blocks: an exact block count, overriding both (tests use tiny ones).
    max_num_batched_tokens: tokens per step; longer prompts are chunked.
    max_step_ms:  a step budget in time: a step that carries decoding requests
                  takes only the prompt tokens a cost model fitted to the
                  engine's own steps says fit beside them in this many
                  milliseconds (at least one KV block), so streams keep their
                  pace while prompts advance in slices (``engine.scheduling.step_budget``).
                  "off" (default) or "0": no budget; "auto": 60 ms on the CPU
                  with a model, off on CUDA and with the null runner; a number:
                  that budget on any device. Off by default because on a
                  2-core CPU it costs agent traffic more than it gives: a prompt
                  token costs 1.5-3 ms there, so beside 16 decoding streams
                  (~50 ms a step) only one block of prompt fits, and 16 agents
                  with shared prefixes went from 146 to 92 output tokens/s
                  (loadtests/step_budget_bench.py and the README give both sides).
    speculative:  draft tokens without a draft model and verify them
                  (``engine.speculative``): "off", "ngram" (prompt lookup),
                  "suffix" (prompt lookup plus recent outputs of all
                  requests) or "auto" (suffix where it pays: on a CPU while
                  at most 4 requests decode; off with the null runner, which
                  samples no model). Both model runners verify drafts. None
                  (default): "auto" on the CPU, where it drafts only in the
                  steps that compute every decode token exactly as a lone
                  request's (`engine.step_rows`), so greedy output is the
                  same with and without drafts, and only where a load-time
                  check finds a verify step's logits bit for bit those of
                  plain decoding (`engine.kernel_choice.draft_exactness`); "off" on CUDA, whose kernels
                  compute a draft's row otherwise than a decode row.
    num_speculative_tokens: the most tokens drafted per request and step.
    speculative_step_tokens: the most draft tokens one step carries over all
                  its requests; None: 8 on the CPU (each verified row costs
                  there: drafts pay at small batch only), 256 on CUDA.
    quantization: "auto" (keep a GGUF file's quantized weights where a CPU
                  kernel reads them), "none" (dense), "int8"/"int4" (at
                  most that many bits per weight, quantizing at load what
                  the file has wider); see `engine.loaders.quantization`.
    batched_matmul: with quantized weights on a CPU, "auto" (default) gives
                  batches from a measured row count (prefill chunks, large
                  decode batches) to a dense bf16 copy of the weights, where
                  oneDNN is faster than the weight-only kernels; "quantized"
                  keeps the quantized kernels at every size and no copy
                  (`engine.kernel_choice.row_choice`). --deterministic implies it.
                  Copies are kept only while they fit in half of the memory
                  available after loading (`engine.kernel_choice.dense_budget`).
    cpu_attention: "auto" (default): a CPU's decode rows through the compiled
                  kernel (`engine.attention.cpu_native`), built with the C
                  compiler at first start and kept in cache_dir; "torch": the
                  plain-torch path. Auto falls back to torch, saying why, where
                  no compiler builds it or the model's heads do not fit it.
    cache_dir:    where measurements at load are remembered between starts
                  (the crossover, the prompt-row checks, --deterministic's linear checks:
                  `engine.kernel_choice.row_choice_cache`);
                  None: ``$XDG_CACHE_HOME/agentgate``, else ``~/.cache/agentgate``.
    remeasure:    measure them again at this start and rewrite what is remembered.
    kv_retention: "auto" (default): when a program's turn ends in tool calls, its
                  conversation's blocks stay pinned for a TTL learned from tool gaps;
                  "off"; or a fixed TTL in seconds (``engine.scheduling.retention``).
    kv_retention_max_fraction: the most of the cache pins may hold (0.8).
    scheduling_policy: "program" (default: by the rank of the request's
                  program, the level of service it has had, least first
                  (``engine.scheduling.programs.table``); memory by rank too, and new programs
                  admitted while they fit; ``engine.scheduling.programs.queue``,
                  ``engine.scheduling.programs.admission``) or "fcfs" (by request).
    max_wait:     seconds after which a waiting request is overdue, under every
                  policy: it goes first, program admission does not hold it, and
                  nothing after it is admitted before it (``engine.scheduling.waiting_queue``);
                  "auto" (default): max(10 s, 3 x the median turn service time, measured
                  online; ``engine.scheduling.wait_bound``), else a fixed number of seconds.
    deterministic: greedy output (and seeded sampling) that does not depend
                  on what else is in the batch: attention one token at a
                  time, row-invariant linears, a fixed thread count (CPU
                  only; slower, see `CausalLM.make_batch_invariant`).
    """

    model: str | None = None
    dtype: str = "auto"
    quantization: str = "auto"
    batched_matmul: str = "auto"
    cpu_attention: str = "auto"
    cache_dir: str | None = None
    remeasure: bool = False
    deterministic: bool = False
    load_format: str = "auto"
    device: str = "auto"
    runner: RunnerKind = "overlap"
    steps_in_flight: int | None = None
    block_size: int = 16
    max_model_len: int | None = None
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 1024
    max_step_ms: str = "off"  # auto costs agent traffic on 2 cores (see the docstring)
    gpu_memory_utilization: float = 0.85
    kv_cache_bytes: int | None = None
    num_kv_blocks: int | None = None
    enable_prefix_caching: bool = True
    enforce_eager: bool = False
    speculative: str | None = None
    num_speculative_tokens: int = 6
    speculative_step_tokens: int | None = None
    seed: int = 0
    kv_retention: str = "auto"
    kv_retention_max_fraction: float = 0.8  # 0.5 released pins whose memory nothing needed: docs/agent-programs.md
    scheduling_policy: str = "program"  # it won the agent-programs benchmark (docs/agent-programs.md)
    max_wait: str = "auto"
    # The null runner only: seconds each step takes, to emulate a model.
    null_step_seconds: float = 0.0
    # The null runner only: a reply ends (its first EOS token) after this many tokens (None: never
    # on purpose), so a client that needs a turn to end (an agent CLI) sees end_turn, not a cut.
    null_reply_tokens: int | None = None
    # CPU threads for the model's math; None: every core the machine's other
    # processes leave free, re-measured as the engine runs (engine.cpu_threads).
    cpu_threads: int | None = None
    # LoRA adapters (engine.lora, docs/lora.md): NAME=PATH PEFT directories loaded at start; the
    # model's linears take adapters when any is given or enable_lora; at most max_cpu_loras loaded
    # (stored) at once (None: max_loras), at most max_loras resident in one step (the scheduler
    # holds the rest), of rank at most max_lora_rank.
    lora_modules: tuple[str, ...] = ()
    enable_lora: bool = False
    max_loras: int = 4
    max_cpu_loras: int | None = None
    max_lora_rank: int = 16
    # Grammars (engine.structured): a constrained request waits at most grammar_compile_timeout
    # seconds for its grammar (then a 400 on its schema's field); compiles run on
    # grammar_compile_workers threads, a tenant on at most half of them (engine.structured.compile_pool).
    grammar_compile_timeout: float = 30.0
    grammar_compile_workers: int = 4

    @property
    def lora_enabled(self) -> bool:
        return self.enable_lora or bool(self.lora_modules)

    @property
    def stored_loras(self) -> int:
        """The most LoRA adapters loaded at once: ``max_cpu_loras``, by default ``max_loras``."""
        return self.max_loras if self.max_cpu_loras is None else self.max_cpu_loras

    def __post_init__(self) -> None:
        if self.runner not in RUNNERS:
            raise InvalidRequestError(f"runner must be one of {RUNNERS}, got {self.runner!r}", "runner")
        if self.dtype not in DTYPES:
            raise InvalidRequestError(f"dtype must be one of {DTYPES}, got {self.dtype!r}", "dtype")
        if self.quantization not in QUANTIZATIONS:
            raise InvalidRequestError(
                f"quantization must be one of {QUANTIZATIONS}, got {self.quantization!r}", "quantization"
            )
        if self.batched_matmul not in BATCHED_MATMULS:
            raise InvalidRequestError(
                f"batched_matmul must be one of {BATCHED_MATMULS}, got {self.batched_matmul!r}", "batched_matmul"
            )
        if self.cpu_attention not in CPU_ATTENTIONS:
            raise InvalidRequestError(
                f"cpu_attention must be one of {CPU_ATTENTIONS}, got {self.cpu_attention!r}", "cpu_attention"
            )
        for name in ("block_size", "max_num_seqs", "max_num_batched_tokens"):
            if getattr(self, name) < 1:
                raise InvalidRequestError(f"{name} must be positive", name)
        if self.speculative is not None and self.speculative not in SPECULATIVE_MODES:
            raise InvalidRequestError(
                f"speculative must be one of {SPECULATIVE_MODES}, got {self.speculative!r}", "speculative"
            )
        if self.num_speculative_tokens < 1:
            raise InvalidRequestError("num_speculative_tokens must be positive", "num_speculative_tokens")
        if self.steps_in_flight is not None and self.steps_in_flight not in (1, 2):
            raise InvalidRequestError("steps_in_flight must be 1 or 2", "steps_in_flight")
        if self.num_kv_blocks is not None and self.num_kv_blocks < 2:
            raise InvalidRequestError("num_kv_blocks must be at least 2", "num_kv_blocks")
        try:
            parse_max_step_ms(self.max_step_ms)
        except ValueError as exc:
            raise InvalidRequestError(str(exc), "max_step_ms") from None
        try:
            parse_retention(self.kv_retention)
        except ValueError as exc:
            raise InvalidRequestError(str(exc), "kv_retention") from None
        if not 0.0 <= self.kv_retention_max_fraction <= 1.0:
            raise InvalidRequestError("kv_retention_max_fraction must be in [0, 1]", "kv_retention_max_fraction")
        if self.scheduling_policy not in SCHEDULING_POLICIES:
            raise InvalidRequestError(
                f"scheduling_policy must be one of {SCHEDULING_POLICIES}, got {self.scheduling_policy!r}",
                "scheduling_policy",
            )
        try:
            parse_max_wait(self.max_wait)
        except ValueError as exc:
            raise InvalidRequestError(str(exc), "max_wait") from None
        if not self.grammar_compile_timeout > 0:
            raise InvalidRequestError("grammar_compile_timeout must be positive", "grammar_compile_timeout")
        for name in ("max_loras", "max_lora_rank", "grammar_compile_workers"):
            if getattr(self, name) < 1:
                raise InvalidRequestError(f"{name} must be positive", name)
        try:
            parse_lora_modules(self.lora_modules)
        except ValueError as exc:
            raise InvalidRequestError(str(exc), "lora_modules") from None
        if self.stored_loras < self.max_loras:
            raise InvalidRequestError(
                f"--max-cpu-loras {self.stored_loras} is below --max-loras {self.max_loras}: the adapters stored "
                "(--max-cpu-loras) include those resident in one step (--max-loras)",
                "max_cpu_loras",
            )
        if len(self.lora_modules) > self.stored_loras:
            raise InvalidRequestError(
                f"{len(self.lora_modules)} lora_modules given, --max-cpu-loras is {self.stored_loras} "
                "(by default --max-loras)",
                "max_cpu_loras",
            )
        if self.lora_enabled and self.runner == "null":
            raise InvalidRequestError("LoRA adapters need a model (the null runner has none)", "lora_modules")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise InvalidRequestError("gpu_memory_utilization must be in (0, 1]", "gpu_memory_utilization")

    def resolved_device(self) -> torch.device:
        import torch

        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)

    def resolved_device_type(self) -> str:
        """``resolved_device().type``; "cpu" for the null runner, which computes nothing and so
        asks torch nothing (its engine imports no torch)."""
        return "cpu" if self.runner == "null" else self.resolved_device().type

    def resolved_speculative(self) -> str:
        """``speculative``, its default resolved by device (see the class docstring)."""
        if self.speculative is not None:
            return self.speculative
        return "off" if self.resolved_device_type() == "cuda" else "auto"

    def with_changes(self, **changes: object) -> EngineConfig:
        return replace(self, **changes)
