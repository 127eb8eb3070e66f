"""Prometheus metrics, one registry per app, served on the gateway's /metrics
(the engine process has no HTTP endpoint).

Latencies and token counts are observed by the gateway as requests run.
Engine-side figures (running/waiting requests, KV usage, prefix cache,
preemptions) are read from the engines' scheduler stats when /metrics is
scraped, so nothing is done per step for them. vLLM's names for the same
figures are served beside these (``gateway.observation.vllm_metrics``; ``docs/metrics.md``
maps one onto the other).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agentgate.engine.front.protocol import SchedulerStats
from agentgate.gateway.observation.retention_metrics import retention_metrics
from agentgate.gateway.observation.vllm_metrics import FINISHED_REASON, EngineStats, FinishedChoice, VllmMetrics

if TYPE_CHECKING:
    from agentgate.gateway.admission.rate_limits import RateLimiter
    from agentgate.gateway.state.redis_state import SharedState

__all__ = ["CONTENT_TYPE_LATEST", "Metrics"]

# Formatted by hand: a table of numbers, not one bound per line.
_LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
_REQUEST_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0)


class _EngineCollector(Collector):
    """Engine stats and gateway state, read at scrape time."""

    def __init__(
        self,
        stats: Callable[[], list[SchedulerStats | None]],
        in_flight: Callable[[], int],
        waiting: Callable[[], int],
        engines_alive: Callable[[], int],
    ) -> None:
        self._stats, self._in_flight, self._waiting, self._alive = stats, in_flight, waiting, engines_alive

    def collect(self) -> Iterator[Metric]:
        known = [s for s in self._stats() if s is not None]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, value=value)

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            return CounterMetricFamily(name, doc, value=value)

        yield gauge("agentgate_requests_running", "Requests running in the engines.", sum(s.num_running for s in known))
        yield gauge("agentgate_requests_waiting", "Requests queued in the engines.", sum(s.num_waiting for s in known))
        usage = sum(s.kv_usage for s in known) / len(known) if known else 0.0
        yield gauge("agentgate_kv_cache_usage_ratio", "Fraction of KV cache blocks in use (mean over engines).", usage)
        yield counter(
            "agentgate_prefix_cache_queries_tokens",
            "Prompt tokens looked up in the prefix cache.",
            sum(s.prefix_queries_tokens for s in known),
        )
        yield counter(
            "agentgate_prefix_cache_hits_tokens",
            "Prompt tokens found in the prefix cache.",
            sum(s.prefix_hits_tokens for s in known),
        )
        yield counter(
            "agentgate_preemptions", "Requests preempted by the engines.", sum(s.num_preemptions for s in known)
        )
        yield counter(
            "agentgate_budget_closed_replies",
            "Replies whose output budget closed a value or tool call the model had not finished (ended as length).",
            sum(s.num_budget_closed for s in known),
        )
        yield counter(
            "agentgate_thinking_budget_closed",
            "Thinking blocks the engine closed itself: at the thinking budget, "
            "or to leave max_tokens room for the answer.",
            sum(s.num_thinking_budget_closed for s in known),
        )
        yield counter(
            "agentgate_lora_held_steps",
            "Engine steps that held a request because --max-loras other LoRA adapters filled the step.",
            sum(s.num_lora_held_steps for s in known),
        )
        yield gauge(
            "agentgate_max_wait_seconds",
            "The wait bound in force: seconds a request may wait behind later ones (--max-wait; largest over engines).",
            max((s.max_wait_s for s in known), default=0.0),
        )
        yield gauge(
            "agentgate_longest_wait_passed_seconds",
            "The longest wait from a request's first pass (a later request admitted ahead of it) to its "
            "admission since the engine started (largest over engines).",
            max((s.longest_wait_passed_s for s in known), default=0.0),
        )
        yield counter(
            "agentgate_waits_past_bound",
            "Requests admitted after waiting longer than the wait bound in force since a later request "
            "was first admitted ahead of them.",
            sum(s.num_waits_past_bound for s in known),
        )
        yield from _speculation_metrics(known)
        yield from retention_metrics(known)
        yield gauge("agentgate_engines_alive", "Engines this gateway can reach.", self._alive())
        yield gauge("agentgate_gateway_requests_in_flight", "HTTP generation requests in flight.", self._in_flight())
        yield gauge(
            "agentgate_gateway_requests_waiting", "Requests admitted that have no first token yet.", self._waiting()
        )


def _speculation_metrics(known: list[SchedulerStats]) -> Iterator[Metric]:
    """Speculative decoding: drafted and accepted tokens, their ratio, and
    tokens confirmed per request-step (1.0 without speculation)."""
    drafted = sum(s.num_draft_tokens for s in known)
    accepted = sum(s.num_accepted_tokens for s in known)
    steps = sum(s.num_sampling_steps for s in known)
    tokens = sum(s.num_sampled_tokens for s in known)
    yield CounterMetricFamily("agentgate_spec_draft_tokens", "Speculative tokens drafted.", value=drafted)
    yield CounterMetricFamily(
        "agentgate_spec_accepted_tokens", "Drafted tokens the target model accepted.", value=accepted
    )
    yield GaugeMetricFamily(
        "agentgate_spec_acceptance_ratio",
        "Accepted over drafted tokens (0 before any draft).",
        value=accepted / drafted if drafted else 0.0,
    )
    yield CounterMetricFamily("agentgate_decode_request_steps", "Request-steps that sampled tokens.", value=steps)
    yield CounterMetricFamily("agentgate_decode_step_tokens", "Tokens those request-steps confirmed.", value=tokens)
    yield GaugeMetricFamily(
        "agentgate_tokens_per_step",
        "Mean tokens confirmed per request-step (above 1 with accepted drafts).",
        value=tokens / steps if steps else 0.0,
    )


class _SharedStateCollector(Collector):
    """Redis's health and the rate limiter's refusals, read at scrape time."""

    def __init__(self, shared: SharedState, limiter: RateLimiter | None) -> None:
        self._shared, self._limiter = shared, limiter

    def collect(self) -> Iterator[Metric]:
        shared, limiter = self._shared, self._limiter
        yield GaugeMetricFamily(
            "agentgate_redis_up",
            "Whether Redis (shared state) is reachable.",
            value=float(shared.up and shared.subscribed),
        )
        yield CounterMetricFamily("agentgate_redis_errors", "Redis calls that failed.", value=shared.errors)
        yield CounterMetricFamily(
            "agentgate_redis_dropped_writes",
            "Background Redis writes dropped (Redis unreachable).",
            value=shared.dropped_writes,
        )
        yield CounterMetricFamily(
            "agentgate_rate_limited", "Requests refused by a rate limit.", value=limiter.refused if limiter else 0
        )


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.ttft = Histogram(
            "agentgate_time_to_first_token_seconds",
            "Seconds from a request's arrival to its first token.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "agentgate_inter_token_latency_seconds",
            "Seconds between consecutive tokens of a request.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        # The same two latencies by engine, for the dashboard's per-engine plots.
        self.engine_ttft = Histogram(
            "agentgate_engine_time_to_first_token_seconds",
            "Seconds from a request's arrival to its first token, by engine.",
            ["engine"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.engine_itl = Histogram(
            "agentgate_engine_inter_token_latency_seconds",
            "Seconds between consecutive tokens of a request, by engine.",
            ["engine"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_time = Histogram(
            "agentgate_request_queue_time_seconds",
            "Seconds a request waited in the engine queue before its first step.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "agentgate_e2e_request_latency_seconds",
            "Seconds from a request's arrival to its end.",
            buckets=_REQUEST_BUCKETS,
            registry=r,
        )
        self.prompt_tokens = Counter("agentgate_prompt_tokens", "Prompt tokens of requests.", registry=r)
        self.generation_tokens = Counter("agentgate_generation_tokens", "Tokens generated.", registry=r)
        self.reasoning_tokens = Counter(
            "agentgate_reasoning_tokens", "Tokens generated inside thinking blocks (their tags included).", registry=r
        )
        self.engine_generation_tokens = Counter(
            "agentgate_engine_generation_tokens", "Tokens generated, by engine.", ["engine"], registry=r
        )
        self.requests = Counter(
            "agentgate_requests", "Finished requests (choices), by finish reason.", ["finish_reason"], registry=r
        )
        self._finished = {
            reason: self.requests.labels(reason) for reason in ("stop", "length", "abort", "error", "disconnect")
        }
        self.vllm = VllmMetrics(r)

    def watch(
        self,
        model_name: str,
        engines: EngineStats,
        in_flight: Callable[[], int],
        waiting: Callable[[], int],
        engines_alive: Callable[[], int],
        max_model_len: int,
    ) -> None:
        """Publish the engines' stats (each engine's address and its last stats) and gateway
        state read through these callables; vLLM's series are labelled ``model_name`` (its token
        histograms' buckets end at ``max_model_len``)."""
        self.registry.register(_EngineCollector(lambda: [s for _, s in engines()], in_flight, waiting, engines_alive))
        self.vllm.watch(model_name, engines, max_model_len)

    def first_token(self, engine: str, seconds: float, queue_time: float | None = None) -> None:
        """A request's time to first token on ``engine`` (its address), and the seconds it
        waited in the engine's queue when the engine said."""
        self.ttft.observe(seconds)
        self.engine_ttft.labels(engine).observe(seconds)
        vllm = self.vllm
        vllm.ttft.labels(vllm.model_name, engine).observe(seconds)
        if queue_time is not None:
            self.queue_time.observe(queue_time)
            vllm.queue_time.labels(vllm.model_name, engine).observe(queue_time)

    def next_tokens(self, engine: str, gap: float, count: int) -> None:
        """``count`` more tokens of a request on ``engine``, ``gap`` seconds apart."""
        by_engine, vllm = self.engine_itl.labels(engine), self.vllm.itl.labels(self.vllm.model_name, engine)
        for _ in range(count):
            self.itl.observe(gap)
            by_engine.observe(gap)
            vllm.observe(gap)

    def request_ended(
        self,
        engine: str,
        prompt_tokens: int,
        generated: int,
        reasons: list[str | None],
        seconds: float,
        choices: list[FinishedChoice],
    ) -> None:
        """A request on ``engine`` (its address) ended: its prompt and generated tokens, each
        choice's finish reason (None: the client went away) and its end-to-end seconds, and each
        choice's figures for vLLM's per-request histograms. vLLM counts each of n choices as a
        request of its own (it runs them as n requests)."""
        self.prompt_tokens.inc(prompt_tokens)
        self.generation_tokens.inc(generated)
        self.reasoning_tokens.inc(sum(choice.reasoning_tokens for choice in choices))
        self.engine_generation_tokens.labels(engine).inc(generated)
        self.e2e.observe(seconds)
        vllm, labels = self.vllm, (self.vllm.model_name, engine)
        vllm.prompt_tokens.labels(*labels).inc(prompt_tokens)
        vllm.generation_tokens.labels(*labels).inc(generated)
        e2e = vllm.e2e.labels(*labels)
        for reason in reasons:
            self._finish(reason)
            vllm.success.labels(*labels, FINISHED_REASON.get(reason, reason)).inc()
            e2e.observe(seconds)
        tokens, phases = vllm.request_tokens, vllm.phases
        for choice in choices:  # vLLM's per-request histograms: an engine request each
            if tokens:
                tokens["prompt"].labels(*labels).observe(choice.prompt_tokens)
                tokens["generation"].labels(*labels).observe(choice.generation_tokens)
            if choice.timings is not None:  # the engine's own durations; a phase never reached took none
                prefill, decode = choice.timings.prefill or 0.0, choice.timings.decode or 0.0
                phases["prefill"].labels(*labels).observe(prefill)
                phases["decode"].labels(*labels).observe(decode)
                phases["inference"].labels(*labels).observe(prefill + decode)

    def watch_shared_state(self, shared: SharedState, limiter: RateLimiter | None) -> None:
        """Publish Redis's health and the rate limiter's refusals."""
        self.registry.register(_SharedStateCollector(shared, limiter))

    def _finish(self, reason: str | None) -> None:
        counter = self._finished.get(reason or "disconnect")
        if counter is None:
            counter = self._finished[reason] = self.requests.labels(reason)
        counter.inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
