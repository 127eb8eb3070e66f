"""Gateway settings: one frozen dataclass, filled from CLI flags or ``AGENTGATE_*`` variables.

Every field is a flag (``--field-name``, or the name in its ``flag``
metadata) of the commands in its ``commands`` metadata (``serve``, ``gateway``,
``engine``) and an environment variable (``AGENTGATE_FIELD_NAME``, the flag's
name in upper case). Engine fields belong to ``serve`` and ``engine``; the
rest to ``serve`` and ``gateway`` unless said otherwise. Tuple fields are
repeatable flags; in the environment they are comma-separated. A flag given
on the command line wins over the environment.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentgate.gateway.config.grammar_settings import GrammarSettings
from agentgate.gateway.config.harness_settings import HarnessSettings
from agentgate.gateway.config.lora_settings import LoraSettings
from agentgate.gateway.config.mcp_settings import McpSettings
from agentgate.gateway.config.reasoning_settings import ReasoningSettings
from agentgate.gateway.config.setting_values import COMMANDS, env_values, setting
from agentgate.gateway.config.settings_checks import check_settings, check_shared_state

if TYPE_CHECKING:
    from agentgate.engine.config import EngineConfig


@dataclass(frozen=True)
class Settings(HarnessSettings, ReasoningSettings, McpSettings, LoraSettings, GrammarSettings):  # own modules
    # -- the model and the engine -------------------------------------------------
    model: str | None = setting(
        "model: a .gguf file or an HF directory (default: the default model); a gateway reads its tokenizer",
        default=None,
        engine=True,
        commands=COMMANDS,
    )
    served_model_name: tuple[str, ...] = setting(
        "name(s) the model is served under (default: derived from --model); the first is reported",
        default=(),
    )
    runner: str = setting(
        "engine runner: overlap, sync or null (no model, for benchmarks)",
        default="overlap",
        engine=True,
    )
    steps_in_flight: int | None = setting(
        "overlap runner: steps launched before the oldest is waited for (default: 2 on CUDA, 1 on the CPU)",
        default=None,
        engine=True,
    )
    max_num_seqs: int = setting("most sequences the engine runs at once", default=64, engine=True)
    max_model_len: int | None = setting(
        "context length (default: the model's, capped on CPU)",
        default=None,
        engine=True,
    )
    max_num_batched_tokens: int | None = setting(
        "tokens per engine step (default: the engine's)", default=None, engine=True
    )
    max_step_ms: str = setting(
        "a step budget in time: a step with decoding requests carries only the prompt tokens that fit beside "
        "them in this many ms (at least one KV block; fitted to the engine's measured steps), so streams keep "
        "their pace and prompts advance in slices, and TTFT pays: off (default), auto (60 on the CPU with a model, "
        "off on CUDA), or MS",
        default="off",
        engine=True,
    )
    num_kv_blocks: int | None = setting(
        "exact number of KV cache blocks (default: measured)", default=None, engine=True
    )
    device: str = setting("engine device: auto, cpu, cuda, cuda:N", default="auto", engine=True)
    dtype: str = setting(
        "engine dtype: float32, float16, bfloat16 or auto (CUDA: the model's, bfloat16 for float32 ones; "
        "CPU: bfloat16 where it has AVX512-BF16 or AMX, else float32)",
        default="auto",
        engine=True,
    )
    quantization: str = setting(
        "CPU weights: auto (a GGUF file's Q4_0/Q4_1/Q4_K/Q8_0 weights as stored), none (dense), "
        "int8 or int4 (at most that many bits per weight, quantizing at load what is wider)",
        default="auto",
        engine=True,
    )
    batched_matmul: str = setting(
        "CPU, quantized weights: auto (batches from a measured row count, such as prefill chunks, through a "
        "dense bf16 copy of the weights where oneDNN beats the weight-only kernels; the copy costs 2 bytes per "
        "weight) or quantized (the quantized kernels at every size, no copy)",
        default="auto",
        engine=True,
    )
    cpu_attention: str = setting(
        "CPU attention and norms: auto (compiled kernels: one that reads each decode row's context in place, one "
        "that applies RoPE and writes the KV cache bit for bit as the torch path does, one for RMSNorm with its "
        "residual add, each row's bits its own, built with the C compiler ($CC, else cc) at the first start and "
        "kept under --cache-dir; under --deterministic every query token takes the decode kernel; the torch path, "
        "said in the log, where none builds it) or torch (the plain-torch path)",
        default="auto",
        engine=True,
    )
    cache_dir: str | None = setting(
        "where the engine remembers what it measures at load and the CPU kernels it compiles "
        "(default: $XDG_CACHE_HOME/agentgate)",
        default=None,
        engine=True,
    )
    remeasure: bool = setting("measure again at this start what --cache-dir remembers", default=False, engine=True)
    speculative: str | None = setting(
        "speculative decoding without a draft model: off, ngram (prompt lookup), suffix (prompt lookup and "
        "recent outputs of all requests) or auto (suffix where it pays: on a CPU while at most 4 requests "
        "decode, steps whose every token is computed as a lone request's, so greedy output is the same "
        "with and without drafts); verified by either runner (default: auto on the CPU, off on CUDA)",
        default=None,
        engine=True,
    )
    num_speculative_tokens: int = setting("most tokens drafted per request and step", default=6, engine=True)
    speculative_step_tokens: int | None = setting(
        "most draft tokens per step over all requests (default: 8 on the CPU, 256 on CUDA)", default=None, engine=True
    )
    deterministic: bool = setting(
        "CPU: output that does not depend on what else is in the batch (attention one token at a time, "
        "row-invariant matmuls, fixed threads); slower",
        default=False,
        engine=True,
    )
    null_step_seconds: float = setting("null runner only: seconds each step takes", default=0.0, engine=True)
    cpu_threads: int | None = setting(
        "CPU threads for the engine's math (default: every core other busy processes leave free, "
        "re-measured every 2 s; a fixed count turns that off)",
        default=None,
        engine=True,
    )
    enforce_eager: bool = setting(
        "overlap runner on CUDA: run every step eagerly, no CUDA graphs", default=False, engine=True
    )
    gpu_memory_utilization: float = setting(
        "CUDA: fraction of the GPU's memory the engine may use (the KV cache takes what is left)",
        default=0.85,
        engine=True,
    )
    enable_prefix_caching: bool = setting(
        "reuse the KV of shared prompt prefixes (turn off with --no-enable-prefix-caching)",
        default=True,
        engine=True,
    )
    # -- agents as programs (issue 26) ----------------------------------------------------
    prefix_cache_isolation: str = setting(
        "none (every API key shares cached prefixes: most reuse, but one key can time another's prompts) or key "
        "(salted by key: keys never share KV, each prefills its own); a request's cache_salt salts further",
        default="none",
    )
    kv_retention: str = setting(
        "keep a program's KV while its tools run: auto (TTL learned from tool gaps), off, or SECONDS",
        default="auto",
        engine=True,
    )
    kv_retention_max_fraction: float = setting("most of the KV cache retention may hold", default=0.8, engine=True)
    scheduling_policy: str = setting(
        "program (by the service a program has had, least first, in levels: queue, memory and preemption; "
        "new programs while they fit) or fcfs (by request)",
        default="program",
        engine=True,
    )
    max_wait: str = setting(
        "seconds a request may wait while requests that came after it are admitted, under every policy; "
        "then it goes first. auto: max(10 s, 3 x the engine's median turn service time, measured online)",
        default="auto",
        engine=True,
    )
    # -- HTTP -----------------------------------------------------------------------
    host: str = setting("address to listen on", default="127.0.0.1")
    port: int = setting("port to listen on", default=8000)
    max_waiting: int = setting(
        "most requests waiting for their first token; more get 429 with Retry-After (0: unbounded)",
        default=1024,
    )
    max_engine_requests_per_request: int = setting(
        "most generations (n x prompts) one request may ask for; more get 400. --max-waiting and rate limits "
        "count generations too",
        default=128,
    )
    max_body_bytes: int = setting(
        "largest request body accepted; larger ones get 413 before they are read", default=4 * 1024 * 1024
    )
    header_timeout: float = setting("seconds a request's headers may take to arrive; slower gets 408", default=10.0)
    body_timeout: float = setting("seconds a request body may stall between two chunks; longer gets 408", default=30.0)
    max_connections: int = setting(
        "open HTTP connections per gateway process; more get 503 and are closed (0: no cap)", default=4096
    )
    sse_send_timeout: float = setting(
        "seconds an SSE write may wait on a client that stopped reading; then the stream is aborted "
        "(its engine request and KV blocks freed)",
        default=30.0,
    )
    tool_call_parser: str | None = setting(
        "how tool calls are read from the model's text: hermes (<tool_call> blocks) or llama3_json "
        "(default: chosen from the chat template)",
        default=None,
    )
    default_temperature: float | None = setting(
        "temperature of requests that leave it unset (default: the model's generation_config.json; "
        "for a GGUF without one, 0.2)",
        default=None,
    )
    default_top_p: float | None = setting(
        "top_p of requests that leave it unset (as --default-temperature)", default=None
    )
    default_top_k: int | None = setting(
        "top_k of requests that leave it unset (as --default-temperature)", default=None
    )
    default_min_p: float | None = setting(
        "min_p of requests that leave it unset (as --default-temperature)", default=None
    )
    default_repetition_penalty: float | None = setting(
        "repetition_penalty of requests that leave it unset (as --default-temperature)", default=None
    )
    max_forced_tool_calls: int = setting(
        "most tool calls in one reply under tool_choice required (Anthropic any) with parallel calls; "
        "enforced by the grammar, so a model that would repeat its call stops",
        default=4,
    )
    max_tokens_default: int = setting(
        "output budget (tokens) of a request that sets none (max_tokens, max_completion_tokens, "
        "max_output_tokens), never more than the context leaves; 0: up to the context. /v1/completions keeps "
        "OpenAI's 16 when that is smaller",
        default=2048,
    )
    max_tokens_cap: int | None = setting(
        "most output tokens one request may ask for; more is a 400 naming the parameter (default: no cap but "
        "the context)",
        default=None,
    )
    # -- auth and CORS ----------------------------------------------------------
    api_keys: tuple[str, ...] = setting(
        "API key for /v1/*, /tokenize, /detokenize (repeatable; none: open)",
        flag="api-key",
        secret=True,
        default=(),
    )
    admin_key: str | None = setting(
        "key for /pause, /resume, /is_paused, /abort_requests, DELETE /v1/requests/{id}, the dashboard's stats "
        "and the request, session and replica listings; required for them whenever any key is set, or the "
        "server listens off loopback (unless --allow-unauthenticated-ops)",
        secret=True,
        default=None,
    )
    sealing_key: tuple[str, ...] = setting(
        "key that seals what clients send back (Responses encrypted_content, Messages thinking signatures; "
        "repeatable: the first seals, every one opens, for rotation; none: the key shared in Redis, else a "
        "random key of this process; docs/sealing.md)",
        secret=True,
        default=(),
    )
    allow_unauthenticated_ops: bool = setting(
        "off loopback, serve /metrics without a key and, with no --admin-key, the operator routes and the "
        "dashboard to anyone who reaches the port, instead of refusing them (403): a private network only "
        "(logged at WARNING)",
        default=False,
    )
    trusted_proxies: tuple[str, ...] = setting(
        "addresses or CIDRs of reverse proxies whose Forwarded / X-Forwarded-For headers are honoured "
        "(repeatable; none: no such header is honoured, and a request that carries one counts as from off "
        "loopback for the operator routes)",
        default=(),
    )
    engine_curve_dir: str | None = setting(
        "directory of CurveZMQ keys (agentgate keys DIR makes them; docs/deploy.md): an engine's key pair "
        "(engine.key_secret) and the public keys of the gateways it accepts (gateway.key, any *.key), a "
        "gateway's key pair (gateway.key_secret) and the engines' public key (engine.key); every engine "
        "socket but ipc:// then authenticates its peers and encrypts",
        default=None,
        commands=("gateway", "engine"),
    )
    insecure_engine_socket: bool = setting(
        "bind the engine off loopback without --engine-curve-dir: anyone who reaches the port can submit, "
        "abort and read every request (logged at WARNING); a private network only",
        default=False,
        commands=("engine",),
    )
    key_digest_secret: str | None = setting(
        "secret keying the digests of API keys stored in Redis (HMAC-SHA256); every gateway sharing a Redis "
        "needs the same one (default: one made once per machine in the state directory)",
        secret=True,
        default=None,
    )
    allowed_origins: tuple[str, ...] = setting("CORS origins allowed (repeatable; none: no CORS headers)", default=())
    allowed_methods: tuple[str, ...] = setting("CORS methods allowed (repeatable)", default=("*",))
    allowed_headers: tuple[str, ...] = setting("CORS request headers allowed (repeatable)", default=("*",))
    allow_credentials: bool = setting("CORS: allow credentials", default=False)
    # -- operations -----------------------------------------------------------------
    drain_seconds: float = setting(
        "on SIGTERM/SIGINT, seconds requests in flight get to finish before they are aborted (agentgate "
        "engine: refusing new ones, its registry entry saying draining; then it exits 0)",
        default=5.0,
        commands=COMMANDS,
    )
    log_level: str = setting("log level: debug, info, warning, error", default="info", commands=COMMANDS)
    access_log: bool = setting(
        "log every request (uvicorn's access log; a traced request's line ends in its trace id)", default=False
    )
    otlp_traces_endpoint: str | None = setting(
        "OpenTelemetry traces of generation requests, exported over OTLP/HTTP to this URL (e.g. "
        "http://collector:4318/v1/traces); the standard OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or "
        "OTEL_EXPORTER_OTLP_ENDPOINT turns them on too; needs pip install 'agentgate[otel]' (default: off)",
        default=None,
    )
    startup_timeout: float = setting("seconds to wait for the engine to load its model", default=600.0)
    on_engine_death: str = setting(
        "when an engine dies: restart (one this command spawned is started again with backoff; one "
        "started apart is re-attached when it answers) or exit (the gateway exits non-zero)",
        default="restart",
    )
    engine_max_restarts: int = setting(
        "restarts of one engine allowed within --engine-restart-window; one more death and the gateway "
        "exits non-zero (for an outer supervisor)",
        default=5,
    )
    engine_restart_window: float = setting("seconds over which --engine-max-restarts counts", default=300.0)
    health_degraded_status: int = setting(
        "HTTP status of /health when degraded (an engine of several down, Redis unreachable): 200 or 503",
        default=200,
    )
    # -- processes ------------------------------------------------------------------
    engines: int = setting(
        "serve: engine processes to start on this machine",
        default=1,
        commands=("serve",),
    )
    gateway_workers: int = setting(
        "gateway processes sharing the port (SO_REUSEPORT; 1: the gateway runs in this process)",
        default=1,
    )
    # -- shared state (Redis) -----------------------------------------------------------
    redis_url: str | None = setting(
        "Redis shared by every replica (redis://HOST:PORT/DB, unix:///PATH); default: an embedded "
        "redis-server on a private unix socket, started and stopped with agentgate. agentgate engine: the "
        "registry it announces itself in; agentgate gateway without --engine: the registry it finds engines in",
        default=None,
        secret=True,
        commands=COMMANDS,
    )
    redis_dir: str | None = setting(
        "embedded Redis: data directory (sessions survive restarts); default ~/.local/state/agentgate/redis-PORT "
        "(a temporary one with --port 0)",
        default=None,
    )
    redis_prefix: str = setting(
        "prefix of every Redis key and channel of agentgate", default="agentgate", commands=COMMANDS
    )
    session_ttl: float = setting("seconds a session lives after its last activity", default=3600.0)
    response_ttl: float = setting(
        "seconds a stored /v1/responses response (and its chain) is kept", default=30 * 86400.0
    )
    rate_limit_rpm: int = setting("requests per minute per API key (0: unlimited)", default=0)
    rate_limit_tpm: int = setting("tokens (prompt + completion) per minute per API key (0: unlimited)", default=0)
    key_rate_limits: tuple[str, ...] = setting(
        "limits of one key, KEY:RPM:TPM (repeatable; 0: unlimited); overrides --rate-limit-rpm/-tpm for it",
        flag="key-rate-limit",
        secret=True,
        default=(),
    )
    rate_limit_redis_down: str = setting(
        "rate-limited requests while Redis is unreachable: allow (serve them unlimited) or reject (503)",
        default="allow",
    )

    def __post_init__(self) -> None:
        check_settings(self)

    def check_shared_state(self) -> None:
        """ValueError for shared-state settings a gateway cannot run with (checked when one starts)."""
        check_shared_state(self)

    def engine_config(self) -> EngineConfig:
        """The EngineConfig these settings describe (the engine's own defaults where unset)."""
        from agentgate.engine.config import EngineConfig

        options = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.metadata.get("engine") and getattr(self, f.name) is not None
        }
        return EngineConfig(**options)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Settings from ``AGENTGATE_*`` variables, then ``overrides``."""
        environ = os.environ if environ is None else environ
        return cls(**(env_values(dataclasses.fields(cls), environ) | overrides))
