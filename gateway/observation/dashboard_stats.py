"""The operator dashboard's numbers (``GET /dashboard/stats``, admin): one
compact snapshot of what the gateway already keeps.

- per engine, its scheduler stats (running, waiting, KV-cache usage, prefix
  cache lookups and hits, preemptions, pause state) and the tokens it has
  generated for this gateway (finished requests' count from
  :class:`~gateway.observation.metrics.Metrics`, plus what requests in flight have so far);
- the TTFT and inter-token-latency histograms (cumulative bucket counts),
  over all engines and per engine;
- this gateway's requests in flight, with their age and tokens;
- KV retention for agent programs waiting on their tools, summed over the
  engines as /metrics has it (``gateway.observation.retention_metrics``): pins and blocks
  held now and the most they may hold, returning turns and their prefix hits,
  tool gaps, pins made and released by reason.

Counters are cumulative, as Prometheus exposes them: rates and percentiles
over time are the page's work (the difference between two snapshots), so the
gateway keeps no history and any number of dashboards cost it nothing
between polls. With several gateway replicas, the latencies and requests are
those of the replica that answered (``replica``); engine figures are the
engines' own.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict

import msgspec
from prometheus_client import Counter, Histogram

from agentgate.gateway.engines.pool import EnginePool
from agentgate.gateway.observation.metrics import Metrics
from agentgate.gateway.observation.retention_metrics import retention_totals
from agentgate.gateway.state.requests_in_flight import Entry, RequestRegistry
from agentgate.gateway.state.sessions import owner_label


class LatencyHistogram(msgspec.Struct):
    """Cumulative counts per upper bound, in seconds (the last count is +Inf's: the total)."""

    bounds: list[float]
    counts: list[float]
    sum: float


class EngineLoad(msgspec.Struct):
    address: str
    alive: bool
    running: int
    waiting: int
    kv_usage: float
    prefix_queries: int  # prompt tokens looked up in the prefix cache (cumulative)
    prefix_hits: int  # of which found (cumulative)
    preemptions: int
    paused: str  # unpaused, paused_new, paused_all; "unknown" before the first stats
    tokens: int  # tokens generated for this gateway (cumulative)
    ttft: LatencyHistogram  # this gateway's requests on this engine
    itl: LatencyHistogram


class RequestLoad(msgspec.Struct):
    id: str
    engine: str
    age: float  # seconds since it arrived
    prompt_tokens: int
    output_tokens: int
    session: str | None
    owner: str
    adapter: str | None = None  # the LoRA adapter it runs through (None: the base model)


class DashboardStats(msgspec.Struct):
    time: float  # the server's clock (Unix seconds)
    replica: str
    paused: bool
    engines: list[EngineLoad]
    ttft: LatencyHistogram
    itl: LatencyHistogram
    requests: list[RequestLoad]
    retention: dict[str, float]  # engine.protocol.RetentionStats's fields, summed over the engines
    budget_closed: int = 0  # replies whose budget closed a value or call (said to be cut), all engines


def _histogram(histogram: Histogram, engine: str | None = None) -> LatencyHistogram:
    """The histogram's counts; with ``engine``, its series for that engine."""
    if engine is not None:
        histogram.labels(engine)  # an engine with no requests yet: zeros, not no buckets
    bounds, counts, total = [], [], 0.0
    for sample in histogram.collect()[0].samples:
        if sample.labels.get("engine") != engine:
            continue
        if sample.name.endswith("_bucket"):
            bound = float(sample.labels["le"])
            if not math.isinf(bound):
                bounds.append(bound)
            counts.append(sample.value)
        elif sample.name.endswith("_sum"):
            total = sample.value
    return LatencyHistogram(bounds, counts, total)


def _finished_tokens(counter: Counter) -> dict[str, float]:
    return {s.labels["engine"]: s.value for s in counter.collect()[0].samples if s.name.endswith("_total")}


def _request(request_id: str, entry: Entry, now: float) -> RequestLoad:
    progress, ctx = entry.progress, entry.context
    usage = progress.usage if progress is not None else None
    return RequestLoad(
        id=request_id,
        engine=entry.engine.address,
        age=round(now - progress.arrival, 3) if progress is not None else 0.0,
        prompt_tokens=usage.prompt_tokens if usage is not None else 0,
        output_tokens=usage.completion_tokens if usage is not None else 0,
        session=ctx.session_id,
        owner=owner_label(ctx.key),
        adapter=(progress.lora or None) if progress is not None else None,
    )


async def dashboard_stats(
    pool: EnginePool, registry: RequestRegistry, metrics: Metrics, replica_id: str
) -> DashboardStats:
    """The snapshot of ``pool``'s engines and ``registry``'s requests in flight, from this replica's
    ``metrics``; asks each live engine for its stats (one utility call each)."""
    stats = await pool.refresh_stats()
    now = time.monotonic()
    requests = [_request(rid, entry, now) for rid, entry in registry.requests.items()]
    in_flight: dict[str, int] = defaultdict(int)
    for request in requests:
        in_flight[request.engine] += request.output_tokens
    finished = _finished_tokens(metrics.engine_generation_tokens)
    engines = []
    for engine, s in zip(pool.engines, stats, strict=True):
        tokens = int(finished.get(engine.address, 0)) + in_flight[engine.address]
        ttft, itl = (
            _histogram(metrics.engine_ttft, engine.address),
            _histogram(metrics.engine_itl, engine.address),
        )
        if s is None:
            engines.append(
                EngineLoad(engine.address, not engine.is_dead, 0, 0, 0.0, 0, 0, 0, "unknown", tokens, ttft, itl)
            )
            continue
        engines.append(
            EngineLoad(
                engine.address,
                not engine.is_dead,
                s.num_running,
                s.num_waiting,
                s.kv_usage,
                s.prefix_queries_tokens,
                s.prefix_hits_tokens,
                s.num_preemptions,
                s.paused,
                tokens,
                ttft,
                itl,
            )
        )
    requests.sort(key=lambda r: -r.age)
    return DashboardStats(
        time=time.time(),
        replica=replica_id,
        paused=any(e.paused not in ("unpaused", "unknown") for e in engines),
        engines=engines,
        ttft=_histogram(metrics.ttft),
        itl=_histogram(metrics.itl),
        requests=requests,
        retention=msgspec.structs.asdict(retention_totals([s for s in stats if s is not None])),
        budget_closed=sum(s.num_budget_closed for s in stats if s is not None),
    )
