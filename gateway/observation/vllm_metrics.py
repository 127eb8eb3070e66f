"""vLLM's metric names on the gateway's /metrics, beside agentgate's own.

Dashboards, autoscalers and routers built for vLLM (its Grafana dashboard, the
production-stack's KEDA recipes, the Gateway API Inference Extension's endpoint
picker) read ``vllm:*`` series. They are served with vLLM's names, types, units,
buckets and labels (``vllm/v1/metrics/loggers.py``): every series carries
``model_name`` (the first served model name) and ``engine`` (vLLM's engine
index; here the engine's address, as agentgate's per-engine series have it),
and ``vllm:request_success_total`` adds ``finished_reason``.

The engine's side of a request's time (queued, prefill, decode: the durations each
finished engine request reports) and its token counts fill vLLM's per-request
histograms; the engines' block pools fill the KV residency histograms, which vLLM
serves only with ``--kv-cache-metrics`` and from a sample of blocks, and
agentgate always, from every block.

Which process serves them: the gateway. The engine process speaks ZMQ only and
has no HTTP /metrics; the gateway reads the engines' scheduler stats when
/metrics is scraped (running, waiting, KV usage, prefix cache: the engines'
own figures, the same from every gateway replica) and observes latencies and
token counts as its requests run (this replica's requests only).
``docs/metrics.md`` maps each name to agentgate's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import NamedTuple

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from agentgate.engine.front.protocol import KV_RESIDENCY_BUCKETS, HistogramCounts, RequestTimings, SchedulerStats

EngineStats = Callable[[], list[tuple[str, SchedulerStats | None]]]

LABELS = ("model_name", "engine")
# agentgate's ends as vLLM's FinishReason names them (stop, length, abort, error, repetition):
# a client that went away (None) is an abort to the engine.
FINISHED_REASON = {None: "abort", "stop": "stop", "length": "length", "abort": "abort", "error": "error"}

# vLLM's buckets, written as one string each: tables of numbers, not one bound per line.
TTFT_BUCKETS = tuple(
    float(b)
    for b in "0.001 0.005 0.01 0.02 0.04 0.06 0.08 0.1 0.25 0.5 0.75 1 2.5 5 7.5 10 20 40 80 160 640 2560".split()
)
ITL_BUCKETS = tuple(
    float(b) for b in "0.01 0.025 0.05 0.075 0.1 0.15 0.2 0.3 0.4 0.5 0.75 1 2.5 5 7.5 10 20 40 80".split()
)
REQUEST_LATENCY_BUCKETS = tuple(
    float(b) for b in "0.3 0.5 0.8 1 1.5 2 2.5 5 10 15 20 30 40 50 60 120 240 480 960 1920 7680".split()
)


def build_1_2_5_buckets(max_value: int) -> tuple[float, ...]:
    """vLLM's token-count buckets: 1, 2, 5, 10, 20, 50... up to ``max_value`` (the engine's
    max_model_len), as its ``build_1_2_5_buckets``."""
    buckets, scale = [], 1
    while True:
        for mantissa in (1, 2, 5):
            if mantissa * scale > max_value:
                return tuple(float(b) for b in buckets)
            buckets.append(mantissa * scale)
        scale *= 10


class FinishedChoice(NamedTuple):
    """One finished engine request (a choice), as vLLM's per-request histograms count it: its
    prompt and generated tokens and the engine's timings (None: its end was never reported)."""

    prompt_tokens: int
    generation_tokens: int
    timings: RequestTimings | None
    reasoning_tokens: int = 0  # of its thinking block (a reasoning model's)


# vLLM's KV residency histograms: (name, help, the field of an engine's KvResidencyStats).
_RESIDENCY_SERIES = (
    (
        "vllm:kv_block_lifetime_seconds",
        "Histogram of KV cache block lifetime from allocation to eviction. Every block (vLLM samples).",
        "lifetime",
    ),
    (
        "vllm:kv_block_idle_before_evict_seconds",
        "Histogram of idle time before KV cache block eviction. Every block (vLLM samples).",
        "idle_before_evict",
    ),
    (
        "vllm:kv_block_reuse_gap_seconds",
        "Histogram of time gaps between consecutive KV cache block accesses. Only the most recent "
        "accesses are recorded (ring buffer). Every block (vLLM samples).",
        "reuse_gap",
    ),
)

# vLLM's scheduler series: (name, family, help, the field of an engine's SchedulerStats).
_SCHEDULER_SERIES: tuple[tuple[str, type[GaugeMetricFamily | CounterMetricFamily], str, str], ...] = (
    ("vllm:num_requests_running", GaugeMetricFamily, "Number of requests in model execution batches.", "num_running"),
    ("vllm:num_requests_waiting", GaugeMetricFamily, "Number of requests waiting to be processed.", "num_waiting"),
    ("vllm:kv_cache_usage_perc", GaugeMetricFamily, "KV-cache usage. 1 means 100 percent usage.", "kv_usage"),
    (
        "vllm:prefix_cache_queries",
        CounterMetricFamily,
        "Prefix cache queries, in terms of number of queried tokens.",
        "prefix_queries_tokens",
    ),
    (
        "vllm:prefix_cache_hits",
        CounterMetricFamily,
        "Prefix cache hits, in terms of number of cached tokens.",
        "prefix_hits_tokens",
    ),
    (
        "vllm:num_preemptions",
        CounterMetricFamily,
        "Cumulative number of preemption from the engine.",
        "num_preemptions",
    ),
)


class _SchedulerSeries(Collector):
    """vLLM's scheduler series, per engine, read from the engines' stats at scrape time."""

    def __init__(self, model_name: str, engines: EngineStats) -> None:
        self._model, self._engines = model_name, engines

    def collect(self) -> Iterator[Metric]:
        known = [(address, stats) for address, stats in self._engines() if stats is not None]  # none: no series yet
        for name, family, doc, field in _SCHEDULER_SERIES:
            metric = family(name, doc, labels=LABELS)
            for address, stats in known:
                metric.add_metric([self._model, address], getattr(stats, field))
            yield metric
        for name, doc, field in _RESIDENCY_SERIES:
            histogram = HistogramMetricFamily(name, doc, labels=LABELS)
            for address, stats in known:
                if stats.kv_residency is not None:
                    counts: HistogramCounts = getattr(stats.kv_residency, field)
                    histogram.add_metric([self._model, address], _cumulative(counts), counts.total)
            yield histogram
        yield from _lora_info([stats for _, stats in known])


def _lora_info(stats: list[SchedulerStats]) -> Iterator[Metric]:
    """vLLM's ``vllm:lora_requests_info`` (when an engine serves LoRA adapters): the adapters of the
    running and the waiting requests (comma-separated, over every engine), ``--max-loras``; the
    value is the time of the scrape, as vLLM's."""
    if not any(s.max_loras for s in stats):
        return
    metric = GaugeMetricFamily(
        "vllm:lora_requests_info",
        "Running stats on lora requests.",
        labels=["running_lora_adapters", "waiting_lora_adapters", "max_lora"],
    )
    running = ",".join(sorted({name for s in stats for name in s.running_loras}))
    waiting = ",".join(sorted({name for s in stats for name in s.waiting_loras}))
    metric.add_metric([running, waiting, str(max(s.max_loras for s in stats))], time.time())
    yield metric


def _cumulative(histogram: HistogramCounts) -> list[tuple[str, float]]:
    """Prometheus's buckets (``le``, observations up to it) from each bucket's own count."""
    bounds = [*(floatToGoString(b) for b in KV_RESIDENCY_BUCKETS), "+Inf"]
    running, buckets = 0, []
    for bound, count in zip(bounds, histogram.counts, strict=True):
        running += count
        buckets.append((bound, running))
    return buckets


class VllmMetrics:
    """The request series vLLM observes per request; ``gateway.observation.metrics.Metrics`` observes them as
    the gateway's requests run (there, so the request path calls no module more than before)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.model_name = ""  # set by :meth:`watch`, before the first request
        self._registry = r = registry
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            LABELS,
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            LABELS,
            buckets=ITL_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            LABELS,
            buckets=REQUEST_LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_time = Histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            LABELS,
            buckets=REQUEST_LATENCY_BUCKETS,
            registry=r,
        )
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", LABELS, registry=r)
        self.generation_tokens = Counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", LABELS, registry=r
        )
        self.success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            (*LABELS, "finished_reason"),
            registry=r,
        )
        phases = {
            "inference": "Histogram of time spent in RUNNING phase for request.",
            "prefill": "Histogram of time spent in PREFILL phase for request.",
            "decode": "Histogram of time spent in DECODE phase for request.",
        }
        self.phases = {
            phase: Histogram(
                f"vllm:request_{phase}_time_seconds", doc, LABELS, buckets=REQUEST_LATENCY_BUCKETS, registry=r
            )
            for phase, doc in phases.items()
        }
        self.request_tokens: dict[str, Histogram] = {}  # by :meth:`watch`: their buckets end at max_model_len

    def watch(self, model_name: str, engines: EngineStats, max_model_len: int) -> None:
        """Label every series with ``model_name``; publish the engines' scheduler series; the
        per-request token histograms get vLLM's buckets up to ``max_model_len``."""
        self.model_name = model_name
        self._registry.register(_SchedulerSeries(model_name, engines))
        buckets = build_1_2_5_buckets(max_model_len)
        for kind in ("prompt", "generation"):
            doc = f"Number of {'prefill' if kind == 'prompt' else 'generation'} tokens processed."
            self.request_tokens[kind] = Histogram(
                f"vllm:request_{kind}_tokens", doc, LABELS, buckets=buckets, registry=self._registry
            )
