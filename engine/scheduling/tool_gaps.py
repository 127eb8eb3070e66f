"""How long programs stay away while their tools run: tool gaps (seconds from a turn's
end to the program's next turn) learned per program and tool, as log-normal laws.

The laws nest: the global law starts from a stated prior (median ``PRIOR_MEDIAN_S``,
log-space spread ``PRIOR_SIGMA``: P95 about 5 s), a tool's law starts from the global
one and a (program, tool) law from its tool's, each parent weighing ``PRIOR_WEIGHT``
observations. So a program's first return is predicted from everyone's use of the
same tool, and its own habits take over as it returns.

The TTL a pin gets is the gap law's ``TTL_QUANTILE`` quantile (P(return within the
TTL) = 0.9), clamped to [``MIN_TTL_S``, ``MAX_TTL_S``]: past it, the chance the program
returns in the next moment is small beside what its held blocks keep from others.
Pins are released under pressure by :meth:`GapLaw.return_soon`: the chance the program
returns within ``HORIZON_S`` given it has not yet.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

from agentgate.engine.byte_lru import ByteLRU, str_bytes

PRIOR_MEDIAN_S = 1.0
PRIOR_SIGMA = 1.0
PRIOR_WEIGHT = 2.0
TTL_QUANTILE = 0.9
MIN_TTL_S = 0.5
MAX_TTL_S = 60.0
HORIZON_S = 1.0
MIN_GAP_S = 1e-3
# Bytes of the laws kept per tool key and per (program, tool key), keys counted (tool names are the
# client's): the least recently observed are forgotten first, their returns then predicted from the
# next law up.
MAX_TOOL_BYTES = 4 << 20
MAX_PROGRAM_TOOL_BYTES = 32 << 20
# z of the normal law at TTL_QUANTILE (0.9).
_Z_TTL = 1.2815515655446004


@dataclass(frozen=True, slots=True)
class GapLaw:
    """A log-normal law of tool gaps: log(gap) ~ Normal(mu, sigma)."""

    mu: float
    sigma: float

    def cdf(self, seconds: float) -> float:
        if seconds <= 0:
            return 0.0
        return 0.5 * (1.0 + math.erf((math.log(seconds) - self.mu) / (self.sigma * math.sqrt(2.0))))

    def ttl(self) -> float:
        """The pin's time to live: the TTL_QUANTILE quantile, clamped."""
        return min(MAX_TTL_S, max(MIN_TTL_S, math.exp(self.mu + _Z_TTL * self.sigma)))

    def return_soon(self, elapsed: float, horizon: float = HORIZON_S) -> float:
        """P(gap <= elapsed + horizon | gap > elapsed)."""
        before = self.cdf(elapsed)
        if before >= 1.0:
            return 0.0
        return (self.cdf(elapsed + horizon) - before) / (1.0 - before)


PRIOR = GapLaw(math.log(PRIOR_MEDIAN_S), PRIOR_SIGMA)


class _Moments:
    """Count, mean and sum of squared deviations of log gaps (Welford)."""

    __slots__ = ("n", "mean", "m2")

    def __init__(self) -> None:
        self.n = 0
        self.mean = 0.0
        self.m2 = 0.0

    def add(self, value: float) -> None:
        self.n += 1
        delta = value - self.mean
        self.mean += delta / self.n
        self.m2 += delta * (value - self.mean)

    def law(self, parent: GapLaw) -> GapLaw:
        """The posterior-like blend of ``parent`` (weighing PRIOR_WEIGHT observations) and these."""
        if self.n == 0:
            return parent
        w, n = PRIOR_WEIGHT, self.n
        mu = (w * parent.mu + n * self.mean) / (w + n)
        var = (w * parent.sigma**2 + self.m2 + w * n / (w + n) * (self.mean - parent.mu) ** 2) / (w + n)
        return GapLaw(mu, max(math.sqrt(var), 0.05))


_MOMENTS_BYTES = sys.getsizeof(_Moments()) + 3 * sys.getsizeof(0.0)


def tool_key(tool_names: list[str] | tuple[str, ...], tenant: str = "") -> str:
    """One key for the tools a turn called (several: the set, in name order), scoped by the
    tenant (its API key's digest): tool names are the client's, so two keys' ``search`` are two
    tools with laws of their own (the global law, all gaps pooled, is still every tool's prior)."""
    names = "+".join(sorted(set(tool_names)))
    return f"{tenant}/{names}" if tenant else names


class ToolGaps:
    """Observed tool gaps: the global law, one per tool key, one per (program, tool key)."""

    def __init__(self, max_tool_bytes: int = MAX_TOOL_BYTES, max_program_bytes: int = MAX_PROGRAM_TOOL_BYTES) -> None:
        self._global = _Moments()
        self._tools: ByteLRU[str, _Moments] = ByteLRU(max_tool_bytes)
        self._programs: ByteLRU[tuple[str, str], _Moments] = ByteLRU(max_program_bytes)
        self.count = 0
        self.seconds_sum = 0.0

    def observe(self, program_id: str, tools: str, gap: float) -> None:
        log_gap = math.log(max(gap, MIN_GAP_S))
        self.count += 1
        self.seconds_sum += gap
        self._global.add(log_gap)
        keyed = (
            (self._tools, tools, str_bytes(tools)),
            (self._programs, (program_id, tools), str_bytes(program_id, tools)),
        )
        for laws, key, key_bytes in keyed:
            moments = laws.get(key)
            if moments is None:
                moments = _Moments()
                laws.put(key, moments, key_bytes + _MOMENTS_BYTES)
            moments.add(log_gap)

    def law(self, program_id: str | None = None, tools: str | None = None) -> GapLaw:
        """The most specific law known: (program, tools) over tools over global over the prior."""
        law = self._global.law(PRIOR)
        if tools is None:
            return law
        tool = self._tools.peek(tools)
        if tool is not None:
            law = tool.law(law)
        own = self._programs.peek((program_id, tools)) if program_id is not None else None
        return own.law(law) if own is not None else law
