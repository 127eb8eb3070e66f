"""Quantized linears that give large batches to a dense bfloat16 copy (``--batched-matmul auto``).

At one or a few rows a CPU step streams the weights, and the int4 kernel
reads a quarter of bf16's bytes. With more rows the work is arithmetic, and
the weight-only kernels dequantize every weight again for each tile of rows,
while oneDNN's bf16 GEMM (AVX512-BF16, AMX) only gets more efficient per row.
So each quantized linear keeps both forms, and decode rows (one per request)
pick by their count: below the crossover the quantized kernel, from it the
dense packed weight (`engine.layers.cpu_linear.PackedLinear`), the same
numbers rounded once to bf16.

Prompt rows (a prompt's tokens, a recomputation's) take the dense form where kept,
whatever their count: a retried request finds its prompt in the prefix cache
and computes only its last few tokens, which by count would go through the
other kernel, round differently, and could change a greedy reply. The dense
form runs them in the cheapest mode whose rows do not depend on how many rows
run with them, checked at load (`engine.kernel_choice.row_invariance`; measured on
an AMD EPYC: oneDNN gives a row the same numbers in every batch of two rows or
more, at any offset and thread count, but one row alone goes another way for
the 1536-wide down projection, so those are padded), and a cached and an
uncached prefill of the same prompt compute the same numbers. The runners say
which rows decode (`engine.step_rows`; the scheduler puts them first).

The crossover is measured at load on one decoder layer's projections (a
second or two), and the prompt-row checks run once per layer shape (about 3 s
for the default model); both are remembered under ``--cache-dir`` per CPU,
thread count, torch and layer shapes, with an expiry and a rule for noisy
measurements (`engine.kernel_choice.row_choice_cache`), so later starts skip them;
``--remeasure`` measures again. Where the dense form never wins up to
`CROSSOVER_ROWS`' largest size, no copy is kept. A copy costs 2 bytes per
weight (the default model: about 270 MB beside its 85 MB of int4), so copies
are kept only while they fit in a share of free memory, the rest staying int4
only (`engine.kernel_choice.dense_budget`); the start-up line says how much was kept
and why not the rest. A linear without a copy runs every row, prompt or
decode, through the quantized kernel as it is (PyTorch's int4 kernels give a
row the same numbers in any batch on the CPUs `engine.kernel_choice.row_invariance`
was measured on; such a linear's prompt rows are not checked at load).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from agentgate.engine.kernel_choice import dense_budget
from agentgate.engine.kernel_choice.row_choice_cache import MeasurementCache, cache_key, spread
from agentgate.engine.kernel_choice.row_invariance import CHECK_REVISION, is_row_invariant
from agentgate.engine.layers.batch_invariant import MAX_CHECKED_ROWS, Mode, RowInvariantLinear
from agentgate.engine.layers.cpu_linear import PackedLinear, can_pack
from agentgate.engine.layers.quant_linear import KERNEL_DTYPE, QuantLinear
from agentgate.engine.step_rows import decode_row_count, is_small_step

log = logging.getLogger("agentgate.engine")

# Row counts the measurement tries: decode batches, then prefill-chunk sizes.
CROSSOVER_ROWS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
# Modes prompt rows may run in (the others cost a call per tile or per row), in the order tried.
PROMPT_MODES: tuple[Mode, ...] = ("as is", "padded")


class RowChosenLinear(nn.Module):
    """Prompt rows through ``prompt`` (the dense form, in a mode whose rows do not depend on their
    count; ``dense`` itself when not given); decode rows through ``quantized`` when fewer than
    ``crossover`` of them or the step is small (`engine.step_rows.is_small_step`), else ``dense``
    (see the module docstring). Rows nobody described
    (outside `engine.step_rows.decode_rows`) go by their count."""

    def __init__(
        self, quantized: QuantLinear, dense: PackedLinear, crossover: int, prompt: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.quantized, self.dense, self.crossover = quantized, dense, crossover
        self.prompt = dense if prompt is None else prompt
        self.in_features, self.out_features = quantized.in_features, quantized.out_features

    def forward(self, x: Tensor) -> Tensor:
        rows = x.shape[0]
        decoding = decode_row_count(rows)
        if decoding == rows:
            return self._decode(x)
        if decoding == 0:
            return self.prompt(x)
        return torch.cat((self._decode(x[:decoding]), self.prompt(x[decoding:])))

    def _decode(self, x: Tensor) -> Tensor:
        # A small step's decode rows (drafts included) take the quantized kernel whatever their
        # count: a lone request's decode row does (`engine.step_rows`).
        return self.quantized(x) if x.shape[0] < self.crossover or is_small_step() else self.dense(x)

    def extra_repr(self) -> str:
        return f"crossover={self.crossover}"


@dataclass(frozen=True)
class RowChoice:
    """What `choose_by_rows` did: the crossover (None: quantized at every size), the bytes of the
    dense copies it keeps, how it knows (measured, remembered, or why it could not try), how
    prompt rows run (form and mode: how many projections each), and which linears got a copy
    and why not the others (`engine.kernel_choice.dense_budget.CopyPlan.describe`)."""

    crossover: int | None
    dense_bytes: int
    how: str
    prompt_forms: str = ""
    copies: str = ""

    def describe(self) -> str:
        if self.crossover is None:
            return f"quantized matmuls at every batch size ({self.how})"
        return (
            f"decode rows quantized below {self.crossover}, dense bf16 from {self.crossover} ({self.how}; "
            f"{self.copies}); prompt rows {self.prompt_forms}"
        )


def choose_by_rows(
    model: nn.Module, dtype: torch.dtype, cache_dir: Path | None = None, *, remeasure: bool = False
) -> RowChoice | None:
    """Give the quantized linears of ``model`` (activations in ``dtype``) that fit the memory budget
    a dense bf16 copy for batches from the crossover (measured here, or remembered in ``cache_dir``
    unless ``remeasure``), or none where dense never wins or cannot run here. None when the model
    has no quantized linear."""
    # Linears already given their copy (a model loaded once and handed to a second runner) stay as they are.
    chosen = {id(m.quantized) for m in model.modules() if isinstance(m, RowChosenLinear)}
    targets = [(name, m) for name, m in model.named_modules() if isinstance(m, QuantLinear) and id(m) not in chosen]
    if not targets:
        return None
    why_not = None if dtype == KERNEL_DTYPE else f"{dtype} activations"
    if why_not is None and not can_pack(KERNEL_DTYPE):
        why_not = "no packed bf16 matmul on this CPU"
    plan = dense_budget.plan_copies(targets, dense_budget.mem_available_bytes())
    if why_not is None and not plan.keep:
        why_not = f"no room for a dense copy: {plan.describe()}"
    if why_not is not None:
        release_quantized_weights(model)
        return RowChoice(None, 0, why_not)
    cache = MeasurementCache(cache_dir, remeasure=remeasure)
    layer = _first_layer_projections(targets)
    key = cache_key("crossover", _shapes(layer))
    remembered = cache.recall(key)
    if remembered is None or not (remembered.value is None or _is_row_count(remembered.value)):
        crossover, noise = _measure(layer)
        cache.remember(key, crossover, noise)
        how = f"measured, spread {noise:.0%}"
    else:
        crossover, how = remembered.value, "remembered"
    modes: dict[tuple[int, int], tuple[str, Mode | None]] = {}  # by shape: prompt form and mode
    if crossover is not None:
        for name, module in plan.keep:
            dense = PackedLinear(module.dense_weight(KERNEL_DTYPE), module.bias)
            prompt = None
            if name.startswith("layers."):  # the LM head reads sampled rows only, never a prompt's
                shape = (module.in_features, module.out_features)
                if shape not in modes:
                    modes[shape] = _prompt_mode(module, dense, cache)
                form, mode = modes[shape]
                if mode is not None:
                    prompt = RowInvariantLinear(dense if form == "dense" else module, mode, MAX_CHECKED_ROWS)
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, RowChosenLinear(module, dense, crossover, prompt))
    release_quantized_weights(model)
    if crossover is None:
        return RowChoice(None, 0, f"{how}: dense bf16 never faster up to {CROSSOVER_ROWS[-1]} rows")
    counts: dict[str, int] = {}
    for form, mode in modes.values():
        label = f"{form} {mode}" if mode is not None else "dense as is (NOT row-invariant here)"
        counts[label] = counts.get(label, 0) + 1
    forms = ", ".join(f"{label} x {count} shapes" for label, count in sorted(counts.items()))
    kept = sum(dense_budget.dense_bytes(m) for _, m in plan.keep)
    return RowChoice(crossover, kept, how, forms, plan.describe())


def _is_row_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _prompt_mode(quantized: QuantLinear, dense: PackedLinear, cache: MeasurementCache) -> tuple[str, Mode | None]:
    """How prompt rows of a linear run: the dense form in the first of `PROMPT_MODES` whose rows do
    not depend on how many run with them here, else the quantized form so, else dense as it is
    (mode None: then a retried request may compute its cached prompt's last tokens differently).
    The verdict is remembered per shape, as the crossover is."""
    key = cache_key(f"prompt rows {CHECK_REVISION}", _shapes([quantized]))
    remembered = cache.recall(key)
    if remembered is not None and _is_verdict(remembered.value):
        form, mode = remembered.value
        return form, mode
    form, mode = _check_prompt_modes(quantized, dense)
    cache.remember(key, [form, mode])
    return form, mode


def _is_verdict(value: object) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 2
        and value[0] in ("dense", "quantized")
        and (value[1] is None or value[1] in PROMPT_MODES)
    )


def _check_prompt_modes(quantized: QuantLinear, dense: PackedLinear) -> tuple[str, Mode | None]:
    for form, linear in (("dense", dense), ("quantized", quantized)):
        for mode in PROMPT_MODES:
            wrapped = RowInvariantLinear(linear, mode, MAX_CHECKED_ROWS)
            if is_row_invariant(wrapped, linear.in_features, KERNEL_DTYPE, MAX_CHECKED_ROWS):
                return form, mode
    log.warning(
        "batched matmul: no row-invariant way to run %dx%d prompt rows here; a request retried on "
        "its cached prompt may compute its last tokens differently",
        quantized.in_features,
        quantized.out_features,
    )
    return "dense", None


def release_quantized_weights(model: nn.Module) -> None:
    """Drop the quantized weights the linears kept for `choose_by_rows` (``--batched-matmul quantized``)."""
    for module in model.modules():
        if isinstance(module, QuantLinear):
            module.release_weight()


def _first_layer_projections(targets: list[tuple[str, QuantLinear]]) -> list[QuantLinear]:
    """The quantized projections of the first decoder layer that has any (the LM head apart)."""
    first = next((name.split(".")[1] for name, _ in targets if name.startswith("layers.")), None)
    chosen = [m for name, m in targets if first is not None and name.startswith(f"layers.{first}.")]
    return chosen or [targets[0][1]]


def _shapes(linears: list[QuantLinear]) -> str:
    return ",".join(f"{type(m).__name__}:{m.in_features}x{m.out_features}" for m in linears)


def _measure(layer: list[QuantLinear]) -> tuple[int | None, float]:
    """The crossover (`decide_crossover`) and the spread of the timings that decided it."""
    dense = [PackedLinear(m.dense_weight(KERNEL_DTYPE), m.bias) for m in layer]
    start = time.perf_counter()
    timings = {}
    for rows in CROSSOVER_ROWS:
        inputs = [torch.randn(rows, m.in_features).to(KERNEL_DTYPE) for m in layer]
        quantized_s = repeated_seconds(lambda xs=inputs: [m(x) for m, x in zip(layer, xs, strict=True)])
        dense_s = repeated_seconds(lambda xs=inputs: [m(x) for m, x in zip(dense, xs, strict=True)])
        timings[rows] = (quantized_s, dense_s)
    crossover, noise = decide_crossover(timings)
    log.info(
        "batched matmul: crossover measured in %.1f s: %s (spread %.0f%%)",
        time.perf_counter() - start,
        crossover,
        100 * noise,
    )
    return crossover, noise


def decide_crossover(timings: Mapping[int, tuple[Sequence[float], Sequence[float]]]) -> tuple[int | None, float]:
    """From each row count's repeated timings (quantized, dense): the smallest row count from which
    the dense form's fastest is faster at every larger count (None: not even at the largest), and
    the largest `spread` of either form's timings at the counts that decided it (the crossover and
    the count below it; the largest count where dense never wins)."""
    sizes = sorted(timings)
    crossover = None
    for rows in reversed(sizes):
        quantized_s, dense_s = timings[rows]
        if not min(dense_s) < min(quantized_s):
            break
        crossover = rows
    at = sizes.index(crossover) if crossover is not None else len(sizes) - 1
    deciding = sizes[max(at - 1, 0) : at + 1]
    return crossover, max(spread(times) for rows in deciding for times in timings[rows])


def repeated_seconds(run: Callable[[], object], repeat: int = 5) -> list[float]:
    """The seconds of ``repeat`` calls of ``run`` after one untimed call."""
    seconds = []
    with torch.inference_mode():
        run()
        for _ in range(repeat):
            start = time.perf_counter()
            run()
            seconds.append(time.perf_counter() - start)
    return seconds


def fastest_seconds(run: Callable[[], object], repeat: int = 5) -> float:
    """The fastest of ``repeat`` calls of ``run`` after one untimed call."""
    return min(repeated_seconds(run, repeat))
