"""Reading Prometheus text (``GET /metrics``): samples, histogram quantiles, deltas."""

from __future__ import annotations

import math
import re

Samples = dict[str, float]

_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse(text: str) -> Samples:
    """Every sample as ``name{labels}`` (labels as the server wrote them) -> value."""
    samples: Samples = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        if "}" in line:
            brace = line.rindex("}") + 1
            name, rest = line[:brace], line[brace:].split()
        else:
            name, *rest = line.split()
        if not rest:
            continue
        try:
            samples[name] = float(rest[0])  # a timestamp may follow
        except ValueError:
            continue
    return samples


def split(key: str) -> tuple[str, dict[str, str]]:
    """``name{a="1"}`` -> ("name", {"a": "1"})."""
    if "{" not in key:
        return key, {}
    name, _, rest = key.partition("{")
    return name, dict(_LABEL.findall(rest))


def value(samples: Samples, name: str, default: float = 0.0, **labels: str) -> float:
    """The sample ``name`` with these labels; summed over the rest of the labels when several match."""
    if not labels and name in samples:
        return samples[name]
    total, found = 0.0, False
    for key, v in samples.items():
        if key == name or key.startswith(name + "{"):
            key_name, key_labels = split(key)
            if key_name == name and all(key_labels.get(k) == val for k, val in labels.items()):
                total += v
                found = True
    return total if found else default


def delta(after: Samples, before: Samples) -> Samples:
    """Counter increases between two scrapes (gauges come out as differences too)."""
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


def histogram_quantile(samples: Samples, name: str, q: float) -> float | None:
    """The ``q`` quantile of histogram ``name`` (``name_bucket`` samples), interpolated as Prometheus does;
    None when it has no observations."""
    buckets: list[tuple[float, float]] = []
    prefix = name + "_bucket{"
    for key, v in samples.items():
        if key.startswith(prefix):
            le = split(key)[1].get("le")
            if le is not None:
                buckets.append((math.inf if le == "+Inf" else float(le), v))
    if not buckets:
        return None
    buckets.sort()
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    previous_bound, previous_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return previous_bound
            if count == previous_count:
                return bound
            return previous_bound + (bound - previous_bound) * (rank - previous_count) / (count - previous_count)
        previous_bound, previous_count = bound, count
    return buckets[-1][0]
