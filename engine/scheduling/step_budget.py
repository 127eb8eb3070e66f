"""A step budget in time (``--max-step-ms``): how many prompt tokens a step may carry beside its
decoding rows so that it stays within the budget.

A step that carries a prompt chunk makes every decoding stream in it wait for the chunk: on a CPU
a 512-token chunk takes hundreds of milliseconds, which each stream then shows as one long gap
between two tokens. With a budget, the scheduler (`engine.scheduling.scheduler`) gives a step that decodes
only the prompt tokens that fit beside its decoding rows, so streams keep their pace while prompts
advance in slices, and time to first token pays instead. A step that decodes nothing still takes
``max_num_batched_tokens`` of prompt: a lone request's first token costs what it did.

The cost of a step, in milliseconds, is modelled as

    fixed + per_row * decode_rows + per_token * prompt_tokens + prompt_fixed * (prompt_tokens > 0)

(prompt rows run in another form than decode rows, `engine.step_rows`: a step with any pays a
fixed cost of its own). The four costs are fitted online from the engine's own measured steps, by
least squares that forgets (each step weighs ``FORGET`` times the step after it), pulled toward a
prior (``PRIOR_MS``) that never decays, so the first steps are bounded and a cost that no recent
step shows stays at what was last known or at the prior. Online rather than measured once at
start-up: the costs depend on the thread count, which the engine re-measures as it runs
(`engine.cpu_threads`), and on what else the machine runs; a measurement at start would cost
start-up time and go stale.

Bound: a prompt always advances. A step with decoding rows carries at least one KV block
(``block_size`` tokens) of prompt, whatever the budget says, so such a step may run over the
budget by at most one block's cost; its prompt chunk is otherwise a multiple of ``block_size``.
"""

from __future__ import annotations

import numpy as np

from agentgate.engine.config import parse_max_step_ms

# Used when --max-step-ms is auto (not the default: engine.config.EngineConfig says why): on the
# CPU, with a model (measured: decode ITL p50 within the 80 ms at 16 streams;
# loadtests/step_budget_bench.py).
DEFAULT_CPU_STEP_MS = 60.0
# (fixed, per decode row, per prompt token, prompt fixed) in ms: a CPU of this project's kind, on
# the side of caution, so a first step with decodes takes a small chunk.
PRIOR_MS = (20.0, 2.0, 1.0, 0.0)
# How much the prior weighs (a ridge toward it, per cost): a hundredth of a step's, so it settles
# only what no recent step shows.
PRIOR_WEIGHT = 0.01
# Each step weighs this much less than the step after it: the fit follows the last ~30 steps.
FORGET = 0.97
# A step is taken as at most this many times what the fit predicted for it: one slow step (a
# kernel's first set-up at a new shape, a neighbour's burst) moves the fit by a bounded amount,
# while a lasting change still wins within a few steps.
OUTLIER_FACTOR = 3.0
# A fitted per-token cost is never taken below this share of the prior's (noise in a fit whose
# steps all carry the same chunk), so a chunk stays finite.
MIN_TOKEN_COST_SHARE = 0.01


def resolve_max_step_ms(setting: str, device_type: str, runs_model: bool) -> float | None:
    """The budget ``--max-step-ms`` gives (`engine.config.parse_max_step_ms`), None for none:
    "auto" is `DEFAULT_CPU_STEP_MS` on the CPU with a model, none on CUDA (prompt rows cost far
    less there) or without a model (the null runner); "off" or "0" is none; a positive number is
    that many milliseconds, on any device."""
    ms = parse_max_step_ms(setting)
    if ms is None:
        return DEFAULT_CPU_STEP_MS if device_type == "cpu" and runs_model else None
    return ms or None


def _features(decode_rows: int, prompt_tokens: int) -> np.ndarray:
    return np.array([1.0, decode_rows, prompt_tokens, 1.0 if prompt_tokens else 0.0])


class StepBudget:
    """The prompt tokens a step may carry beside ``decode_rows`` decoding rows within
    ``max_step_ms``, from a cost model fitted to the steps `observe` is told of."""

    def __init__(
        self,
        max_step_ms: float,
        block_size: int,
        prior: tuple[float, float, float, float] = PRIOR_MS,
        forget: float = FORGET,
    ) -> None:
        self.max_step_ms = max_step_ms
        self.block_size = block_size
        self._prior = np.array(prior, dtype=np.float64)
        self._forget = forget
        self._weights = np.zeros((4, 4))  # sum of forget^age * x x^T
        self._targets = np.zeros(4)  # sum of forget^age * x * ms
        self._costs: np.ndarray | None = self._prior.copy()
        self.num_observed = 0

    def observe(self, decode_rows: int, prompt_tokens: int, ms: float) -> None:
        """A step of ``decode_rows`` decoding rows (drafts included) and ``prompt_tokens`` prompt
        tokens took ``ms`` milliseconds (taken as at most `OUTLIER_FACTOR` times the prediction)."""
        x = _features(decode_rows, prompt_tokens)
        predicted = float(x @ np.array(self.costs))
        if predicted > 0:
            ms = min(ms, predicted * OUTLIER_FACTOR)
        self._weights = self._forget * self._weights + np.outer(x, x)
        self._targets = self._forget * self._targets + x * ms
        self._costs = None
        self.num_observed += 1

    @property
    def costs(self) -> tuple[float, float, float, float]:
        """The fitted (fixed, per decode row, per prompt token, prompt fixed) costs in ms."""
        if self._costs is None:
            ridge = PRIOR_WEIGHT * np.eye(4)
            self._costs = np.linalg.solve(self._weights + ridge, self._targets + ridge @ self._prior)
        fixed, per_row, per_token, prompt_fixed = (float(c) for c in self._costs)
        return fixed, per_row, per_token, prompt_fixed

    def predict_ms(self, decode_rows: int, prompt_tokens: int) -> float:
        """The fitted time of a step of this shape."""
        return float(_features(decode_rows, prompt_tokens) @ np.array(self.costs))

    def prompt_tokens(self, decode_rows: int) -> int:
        """The most prompt tokens a step with ``decode_rows`` decoding rows may carry: what the
        fit says fits in the budget, in whole blocks, at least one block."""
        fixed, per_row, per_token, prompt_fixed = self.costs
        spare = self.max_step_ms - (fixed + per_row * decode_rows + prompt_fixed)
        per_token = max(per_token, MIN_TOKEN_COST_SHARE * self._prior[2])
        fits = int(spare / per_token) if spare > 0 else 0
        return max(self.block_size, fits // self.block_size * self.block_size)
