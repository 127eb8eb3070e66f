"""Per-request records and what is computed from them: latency percentiles,
throughput, goodput under an SLO, and time series for the plots.

Latencies are measured by the client, per request:

- TTFT: from sending the request to the first content token;
- ITL: the gaps between consecutive content tokens (each SSE chunk of the
  gateway carries one token; chunks that arrive in one network read share
  one timestamp, so their gaps are 0, which is what the client saw);
- TPOT: (end-to-end - TTFT) / (output tokens - 1), per request with two tokens or more, as
  vLLM bench computes it (``loadtests.vllm_bench``: its names, figures and result JSON);
- end-to-end (vLLM bench's E2EL): from sending to the end of the stream.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(slots=True)
class RequestRecord:
    agent: int
    conversation: int
    turn: int
    start: float  # seconds since the run's start
    end: float = 0.0
    ttft: float | None = None
    token_times: list[float] = field(default_factory=list)  # seconds since the run's start, per content chunk
    prompt_tokens: int = 0
    completion_tokens: int = 0
    status: str = "ok"  # ok, aborted, error, truncated
    finish_reason: str | None = None
    retries: int = 0
    error: str | None = None
    request_id: str | None = None
    tool_calls: int = 0  # calls the model wrote in its reply (--format tools)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def e2e(self) -> float:
        return self.end - self.start

    @property
    def tpot(self) -> float | None:
        """vLLM bench's time per output token after the first; None below two tokens."""
        if self.ttft is None or self.completion_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.completion_tokens - 1)

    def itls(self) -> list[float]:
        times = self.token_times
        return [b - a for a, b in zip(times, times[1:])]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("token_times")
        data["e2e"] = self.e2e
        data["tpot"] = self.tpot
        return data


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in [0, 100]) of unsorted values; None for none."""
    if not values:
        return None
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def distribution(values: Sequence[float]) -> dict[str, float | int | None]:
    return {
        "count": len(values),
        "mean": sum(values) / len(values) if values else None,
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "max": max(values) if values else None,
    }


@dataclass(frozen=True)
class SLO:
    """A request is good when its TTFT and TPOT are within these bounds (and it completed)."""

    ttft: float = 2.7
    tpot: float = 0.25

    def met(self, record: RequestRecord) -> bool:
        if not record.ok or record.ttft is None or record.ttft > self.ttft:
            return False
        tpot = record.tpot
        return tpot is None or tpot <= self.tpot


def summarize(records: Iterable[RequestRecord], window: float, slo: SLO) -> dict[str, Any]:
    """The run's figures; ``window`` is the seconds over which throughput is counted."""
    records = list(records)
    ok = [r for r in records if r.ok]
    window = max(window, 1e-9)
    completion = sum(r.completion_tokens for r in ok)
    prompt = sum(r.prompt_tokens for r in ok)
    good = [r for r in ok if slo.met(r)]
    itls = [gap for r in ok for gap in r.itls()]
    prompt_sizes = [r.prompt_tokens for r in ok]
    reply_sizes = [r.completion_tokens for r in ok]
    by_turn: dict[int, list[int]] = {}
    for r in ok:
        by_turn.setdefault(r.turn, []).append(r.prompt_tokens)
    return {
        "requests": {
            "total": len(records),
            "ok": len(ok),
            "aborted": sum(r.status == "aborted" for r in records),
            "errors": sum(r.status == "error" for r in records),
            "truncated": sum(r.status == "truncated" for r in records),
            "retries": sum(r.retries for r in records),
            "finish_reasons": _count(r.finish_reason or "none" for r in ok),
            "tool_calls": sum(r.tool_calls for r in ok),
        },
        "window_s": window,
        "throughput": {
            "output_tokens_per_s": completion / window,
            "prompt_tokens_per_s": prompt / window,
            "requests_per_s": len(ok) / window,
            "output_tokens": completion,
            "prompt_tokens": prompt,
        },
        "goodput": {
            "slo": {"ttft_s": slo.ttft, "tpot_s": slo.tpot},
            "requests_per_s": len(good) / window,
            "output_tokens_per_s": sum(r.completion_tokens for r in good) / window,
            "fraction": len(good) / len(ok) if ok else None,
        },
        "latency_s": {
            "ttft": distribution([r.ttft for r in ok if r.ttft is not None]),
            "ttft_p50_by_turn": {
                turn: percentile([r.ttft for r in ok if r.turn == turn and r.ttft is not None], 50)
                for turn in sorted(by_turn)
            },
            "itl": distribution(itls),
            "tpot": distribution([t for r in ok if (t := r.tpot) is not None]),
            "e2e": distribution([r.e2e for r in ok]),
        },
        "tokens": {
            "prompt": distribution(prompt_sizes),
            "completion": distribution(reply_sizes),
            "prompt_mean_by_turn": {turn: sum(v) / len(v) for turn, v in sorted(by_turn.items())},
            "prompt_min": min(prompt_sizes) if prompt_sizes else None,
        },
    }


def _count(values: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return counts


def token_rate_series(records: Iterable[RequestRecord], end: float, bin_s: float = 1.0) -> list[tuple[float, float]]:
    """(bin start, output tokens/s) over the run, from every request's token times (aborted ones too:
    the server generated those tokens)."""
    bins = [0] * (int(end / bin_s) + 1)
    for r in records:
        for t in r.token_times:
            i = int(t / bin_s)
            if 0 <= i < len(bins):
                bins[i] += 1
    return [(i * bin_s, count / bin_s) for i, count in enumerate(bins)]
