"""Which mode runs each linear with rows independent of the batch on this CPU, measured at load
(``--deterministic``; the modes and why they exist: `engine.layers.batch_invariant`).

The check (`row_invariance`) runs the linear on random rows, each alone and
inside batches of every size up to four tiles and one row, and of the sizes
around each power of two up to ``max_rows``, at several offsets, and
compares bitwise. When no mode passes, `make_rows_invariant` raises
`NoInvariantMode`: ``--deterministic`` must refuse to start rather than
serve output that moves with the batch.

The verdicts are remembered between starts with row choice's measurements
(`engine.kernel_choice.row_choice_cache`: per CPU, thread count, torch, dtype
and kernel shape; ``--remeasure`` checks again): on a 2-core AVX-512 Xeon the
default model's checks took 10.4 s of a 13.2 s ``--deterministic`` start (8 s
on the LM head), and a start that remembers them 3.0 s.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from agentgate.engine.kernel_choice.row_choice_cache import MeasurementCache, cache_key
from agentgate.engine.layers.batch_invariant import MAX_CHECKED_ROWS, MODES, TILE_ROWS, Mode, RowInvariantLinear

log = logging.getLogger("agentgate.engine")

# Distinct random rows the check compares (a batch repeats them cyclically), and where its batches
# start in them. A kernel's batch dependence shows in bf16 outputs only where a sum lands near a
# rounding boundary: with 24 rows the check missed oneDNN's at 13+ rows in 8 of 40 random weights,
# with 64 rows spread by these offsets in none of 200. Past 4 tiles, a batch shows it less often:
# on a Xeon with AMX, a 576x320 bf16 linear gives one element of a 64-row batch another ulp (an
# output near zero) in 37 of 50 random 64-row batches, and 64 rows from seed 0 missed it. So the
# large sizes run on `_LARGE_OFFSETS`: four disjoint stretches of a 256-row pool.
_POOL_ROWS = 256
_OFFSETS = (0, 21, 43)
_LARGE_OFFSETS = (0, 64, 128, 192)
# Names this check in the verdicts remembered between starts (engine.kernel_choice.row_choice_cache): a
# verdict of the earlier check (a 64-row pool, which missed the AMX case above) is not taken for one
# of this check's.
CHECK_REVISION = "pool256"


class NoInvariantMode(RuntimeError):
    """No mode makes a linear's rows independent of the batch on this CPU."""


def probe_sizes(max_rows: int) -> list[int]:
    """Batch sizes the check tries: every size up to 4 tiles and one more,
    then each power of two up to ``max_rows`` with its neighbours, and
    ``max_rows`` itself (kernels change blocking at such boundaries)."""
    sizes = set(range(1, min(max_rows, 4 * TILE_ROWS + 1) + 1))
    power = 8 * TILE_ROWS
    while power // 2 < max_rows:
        sizes.update(n for n in (power - 1, power, power + 1, power + power // 2) if n <= max_rows)
        power *= 2
    sizes.add(max_rows)
    return sorted(sizes, reverse=True)  # large batches first: where kernels switch paths


def _probes(mode: Mode, max_rows: int) -> Iterator[tuple[int, int]]:
    """(first row, rows) batches to check ``mode`` on. Modes that call the
    BLAS on one shape whatever the batch (tiles, per row) need only every
    offset within a tile; the others every probed size."""
    if mode in ("tiles", "per row"):
        for rows in range(1, min(max_rows, 2 * TILE_ROWS + 1) + 1):
            yield from ((first, rows) for first in range(TILE_ROWS))
        return
    for rows in probe_sizes(max_rows):
        # Where a row sits matters within a few tiles; past them, other rows matter (see _LARGE_OFFSETS).
        yield from ((first, rows) for first in (_OFFSETS if rows <= 4 * TILE_ROWS + 1 else _LARGE_OFFSETS))


def is_row_invariant(run: nn.Module, in_features: int, dtype: torch.dtype, max_rows: int) -> bool:
    """Whether ``run`` gives every row, in each probed batch, bit for bit
    what it gives that row alone (and the same twice in a row)."""
    probes = list(_probes(getattr(run, "mode", "as is"), max_rows))
    pool_rows = min(_POOL_ROWS, max(first + rows for first, rows in probes))  # the rows the probes reach
    generator = torch.Generator().manual_seed(0)
    pool = torch.randn(pool_rows, in_features, generator=generator).to(dtype)
    with torch.inference_mode():
        alone = torch.cat([run(pool[i : i + 1]) for i in range(pool_rows)])
        if not torch.equal(alone, torch.cat([run(pool[i : i + 1]) for i in range(pool_rows)])):
            return False  # not even repeatable
        for first, rows in probes:
            index = torch.arange(first, first + rows) % pool_rows
            if not torch.equal(run(pool[index]), alone[index]):
                return False
    return True


def row_invariance(linear: nn.Module, dtype: torch.dtype, max_rows: int = MAX_CHECKED_ROWS) -> Mode:
    """The cheapest mode that runs ``linear`` with rows independent of the
    batch here, found by trying each (see the module docstring). Raises
    `NoInvariantMode` when none is."""
    for mode in MODES:
        if is_row_invariant(RowInvariantLinear(linear, mode, max_rows), linear.in_features, dtype, max_rows):
            return mode
    raise NoInvariantMode(
        f"no way to run a {linear.in_features}x{linear.out_features} {type(linear).__name__} ({dtype}) whose rows "
        f"do not depend on the batch on this CPU: every mode ({', '.join(MODES)}) gave a row different results "
        "in different batches"
    )


@dataclass(frozen=True)
class ModeChoice:
    """The mode chosen for one kind of linear, and what it costs here: a
    ``rows``-row batch in this mode against the plain kernel."""

    mode: Mode
    label: str
    rows: int
    plain_ms: float
    mode_ms: float
    remembered: bool = False  # the verdict of an earlier start, not checked now

    def __str__(self) -> str:
        return (
            f"{self.label}: {self.mode}{' (remembered)' if self.remembered else ''} ({self.rows} rows "
            f"{self.mode_ms:.2f} ms, x{self.mode_ms / max(self.plain_ms, 1e-9):.2f} the plain kernel's)"
        )


def _time_ms(run: nn.Module, x: Tensor, repeat: int = 5) -> float:
    """The fastest of ``repeat`` calls after a warm-up (a busy neighbour only ever adds time)."""
    times = []
    with torch.inference_mode():
        run(x)
        for _ in range(repeat):
            start = time.perf_counter()
            run(x)
            times.append(time.perf_counter() - start)
    return min(times) * 1e3


def kernel_signature(linear: nn.Module) -> str:
    """What a linear's row invariance depends on besides the CPU, threads and torch: its kernel
    (the class), its shape, whether it adds a bias, and how many code groups share an input group."""
    bias, repeat = getattr(linear, "bias", None) is not None, getattr(linear, "repeat", 1)
    return f"{type(linear).__name__}:{linear.in_features}x{linear.out_features}:bias={bias}:repeat={repeat}"


def choose_mode(
    linear: nn.Module, dtype: torch.dtype, max_rows: int, cost_rows: int = 16, cache: MeasurementCache | None = None
) -> ModeChoice:
    """`row_invariance` plus the mode's measured cost on ``cost_rows`` rows; with ``cache``, the
    verdict remembered for this kernel, dtype and ``max_rows`` where there is one, else checked
    and remembered."""
    key = cache_key(f"deterministic mode {CHECK_REVISION} {dtype} max_rows={max_rows}", kernel_signature(linear))
    entry = None if cache is None else cache.recall(key)
    from_cache = entry is not None and entry.value in MODES
    mode = entry.value if from_cache else row_invariance(linear, dtype, max_rows)
    if cache is not None and not from_cache:
        cache.remember(key, mode)
    x = torch.randn(min(cost_rows, max_rows), linear.in_features, generator=torch.Generator().manual_seed(1)).to(dtype)
    label = f"{type(linear).__name__} {linear.in_features}x{linear.out_features}"
    wrapped = RowInvariantLinear(linear, mode, max_rows)
    return ModeChoice(mode, label, x.shape[0], _time_ms(linear, x), _time_ms(wrapped, x), from_cache)


def make_rows_invariant(
    model: nn.Module, dtype: torch.dtype, max_rows: int = MAX_CHECKED_ROWS, cache: MeasurementCache | None = None
) -> Counter[str]:
    """Wrap every linear of ``model`` (``nn.Linear``, packed or quantized:
    any child with ``in_features``/``out_features``, including the LM head)
    in the mode `row_invariance` finds invariant here; shapes and kernels
    are checked once each, up to ``max_rows`` rows (capped at
    `MAX_CHECKED_ROWS`: larger batches run in chunks). Logs each choice with
    its cost and returns how many linears run in each mode; raises
    `NoInvariantMode` when some linear has none. ``cache``: where verdicts
    are remembered between starts (`choose_mode`); None checks every time."""
    max_rows = max(1, min(max_rows, MAX_CHECKED_ROWS))
    choices: dict[str, ModeChoice] = {}
    counts: Counter[str] = Counter()
    targets = [
        (name, module)
        for name, module in model.named_modules()
        if name and hasattr(module, "in_features") and hasattr(module, "out_features")
    ]
    for name, module in targets:
        key = kernel_signature(module)
        if key not in choices:
            choices[key] = choose_mode(module, dtype, max_rows, cache=cache)
            log.info("deterministic: %s", choices[key])
        mode = choices[key].mode
        counts[mode] += 1
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent), child, RowInvariantLinear(module, mode, max_rows))
    return counts
