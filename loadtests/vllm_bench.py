"""vLLM bench's conventions for the load test's figures (``vllm bench serve``,
``vllm/benchmarks/serve.py``), so its plotting and comparison scripts read our runs:

- the names: TTFT (send to first token), TPOT (time per output token after the first:
  ``(E2EL - TTFT) / (output tokens - 1)``, per request with more than one token), ITL (every gap
  between streamed chunks), E2EL (send to the end of the response), goodput (completed requests per
  second within every SLO, an SLO in milliseconds; a request with one token counts TPOT 0);
- the figures: mean, median, std (population) and the chosen percentiles (numpy's linear
  interpolation) of each, in milliseconds, as ``mean_ttft_ms``, ``median_ttft_ms``, ``std_ttft_ms``,
  ``p99_ttft_ms``...; throughputs per second of the run's duration;
- ``--save-result``: the result JSON with vLLM bench's keys (its setup, traffic and result keys;
  without ``--save-detailed``, so no per-request lists), under its file name
  ``{label}-{request_rate}qps[-concurrency{N}]-{model}-{date}.json``.

Where our load differs from vLLM bench's, the keys say ours: ``request_rate`` is ``"inf"`` for the
closed loop (agents send as soon as their last turn ends), ``max_concurrency`` is the number of agents
(closed) or of conversations at once (open); ``num_prompts`` is the requests sent.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from agentgate.loadtests.metrics import SLO, RequestRecord, percentile

METRICS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2EL"}
DEFAULT_PERCENTILE_METRICS = ("ttft", "tpot", "itl")  # vLLM bench's default for generative models
DEFAULT_PERCENTILES = (99.0,)  # vLLM bench's --metric-percentiles default


def samples(records: Sequence[RequestRecord]) -> dict[str, list[float]]:
    """The seconds each metric is computed from, over the completed requests."""
    ok = [r for r in records if r.ok]
    return {
        "ttft": [r.ttft for r in ok if r.ttft is not None],
        "tpot": [t for r in ok if (t := r.tpot) is not None],  # RequestRecord.tpot: vLLM bench's
        "itl": [gap for r in ok for gap in r.itls()],
        "e2el": [r.e2e for r in ok],
    }


def figures(
    records: Sequence[RequestRecord],
    duration: float,
    slo: SLO,
    percentile_metrics: Sequence[str] = DEFAULT_PERCENTILE_METRICS,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
) -> dict[str, Any]:
    """vLLM bench's result keys for these requests over ``duration`` seconds."""
    ok = [r for r in records if r.ok]
    duration = max(duration, 1e-9)
    total_input = sum(r.prompt_tokens for r in ok)
    total_output = sum(r.completion_tokens for r in ok)
    result: dict[str, Any] = {
        "duration": duration,
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": len(ok) / duration,
        "request_goodput": sum(slo.met(r) for r in ok) / duration,  # a TPOT of 0 below two tokens, as vLLM's
        "output_throughput": total_output / duration,
        "total_token_throughput": (total_input + total_output) / duration,
        **_peaks(ok),
    }
    seconds = samples(records)
    for name in percentile_metrics:
        values = [1000 * v for v in seconds[name]] or [0.0]  # vLLM bench: 0 where there is nothing
        result[f"mean_{name}_ms"] = statistics.fmean(values)
        result[f"median_{name}_ms"] = statistics.median(values)
        result[f"std_{name}_ms"] = statistics.pstdev(values)
        for p in percentiles:
            result[f"p{_p_word(p)}_{name}_ms"] = percentile(values, p)
    return result


def _p_word(p: float) -> str:
    return str(int(p)) if int(p) == p else str(p)


def _peaks(ok: Sequence[RequestRecord]) -> dict[str, float | int]:
    """vLLM bench's peaks over 1 s buckets from the first request's start: output tokens in one, and
    the requests active in one."""
    if not ok:
        return {"max_output_tokens_per_s": 0.0, "max_concurrent_requests": 0}
    start = min(r.start for r in ok)
    seconds = math.ceil(max(r.end for r in ok) - start) + 1
    tokens, active = [0] * seconds, [0] * seconds
    for r in ok:
        for t in r.token_times:
            if 0 <= (i := int(t - start)) < seconds:
                tokens[i] += 1
        for i in range(int(r.start - start), int(r.end - start) + 1):
            active[i] += 1
    return {"max_output_tokens_per_s": float(max(tokens)), "max_concurrent_requests": max(active)}


def result_json(
    records: Sequence[RequestRecord],
    duration: float,
    slo: SLO,
    *,
    model_id: str,
    request_rate: float | None,
    max_concurrency: int | None,
    percentile_metrics: Sequence[str] = DEFAULT_PERCENTILE_METRICS,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    label: str = "agentgate",
    date: str | None = None,
) -> dict[str, Any]:
    """The JSON ``vllm bench serve --save-result`` writes: setup, traffic, then the figures."""
    return {
        "date": date or datetime.now().strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": "openai-chat",
        "backend": "openai-chat",
        "label": label,
        "model_id": model_id,
        "tokenizer_id": model_id,
        "num_prompts": len(records),
        "request_rate": "inf" if request_rate is None else request_rate,
        "burstiness": 1.0,  # Poisson arrivals (open loop)
        "max_concurrency": max_concurrency,
        **figures(records, duration, slo, percentile_metrics, percentiles),
    }


def save(result: dict[str, Any], folder: Path, filename: str | None = None) -> Path:
    """Write ``result`` as vLLM bench names its file (or as ``filename``) in ``folder``."""
    concurrency = f"-concurrency{result['max_concurrency']}" if result["max_concurrency"] is not None else ""
    model = str(result["model_id"]).split("/")[-1]
    name = filename or f"{result['label']}-{result['request_rate']}qps{concurrency}-{model}-{result['date']}.json"
    path = folder / name
    path.write_text(json.dumps(result))
    return path
