"""Quantized linears that give large batches to a dense bfloat16 copy (``--batched-matmul auto``).

At one or a few rows a CPU step streams the weights, and the int4 kernel
reads a quarter of bf16's bytes. With more rows the work is arithmetic, and
the weight-only kernels dequantize every weight again for each tile of rows,
while oneDNN's bf16 GEMM (AVX512-BF16, AMX) only gets more efficient per row.
So each quantized linear keeps both forms, and decode rows (one per request)
pick by their count: below the crossover the quantized kernel, from it the
dense packed weight (`engine.layers.cpu_linear.PackedLinear`), the same
numbers rounded once to bf16.

Prompt rows (a prompt's tokens, a recomputation's) always take the dense form,
whatever their count: a retried request finds its prompt in the prefix cache
and computes only its last few tokens, which by count would go through the
other kernel, round differently, and could change a greedy reply. The dense
form runs them in the cheapest mode whose rows do not depend on how many rows
run with them, checked at load (`engine.layers.batch_invariant`; measured on
an AMD EPYC: oneDNN gives a row the same numbers in every batch of two rows or
more, at any offset and thread count, but one row alone goes another way for
the 1536-wide down projection, so those are padded), and a cached and an
uncached prefill of the same prompt compute the same numbers. The runners say
which rows decode (`engine.step_rows`; the scheduler puts them first).

The crossover is measured at load on one decoder layer's projections (a
second or two), and remembered per CPU, thread count and layer shapes in
``~/.cache/agentgate/crossover.json`` (``AGENTGATE_CACHE_DIR`` moves it), so
later starts skip the measurement. Where the dense form never wins up to
`CROSSOVER_ROWS`' largest size, no copy is kept. The copy costs 2 bytes per
weight (the default model: about 270 MB beside its 85 MB of int4).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from agentgate.engine.layers.batch_invariant import MAX_CHECKED_ROWS, Mode, RowInvariantLinear, is_row_invariant
from agentgate.engine.layers.cpu_linear import PackedLinear, can_pack
from agentgate.engine.layers.quant_linear import KERNEL_DTYPE, QuantLinear
from agentgate.engine.step_rows import decode_row_count

log = logging.getLogger("agentgate.engine")

# Row counts the measurement tries: decode batches, then prefill-chunk sizes.
CROSSOVER_ROWS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
# Modes prompt rows may run in (the others cost a call per tile or per row), in the order tried.
PROMPT_MODES: tuple[Mode, ...] = ("as is", "padded")


class RowChosenLinear(nn.Module):
    """Prompt rows through ``prompt`` (the dense form, in a mode whose rows do not depend on their
    count; ``dense`` itself when not given); decode rows through ``quantized`` when fewer than
    ``crossover`` of them, else ``dense`` (see the module docstring). Rows nobody described
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
        return self.quantized(x) if x.shape[0] < self.crossover else self.dense(x)

    def extra_repr(self) -> str:
        return f"crossover={self.crossover}"


@dataclass(frozen=True)
class RowChoice:
    """What `choose_by_rows` did: the crossover (None: quantized at every size), the bytes of the
    dense copies it keeps, how it knows (measured, cached, or why it could not try), and how
    prompt rows run (form and mode: how many projections each)."""

    crossover: int | None
    dense_bytes: int
    how: str
    prompt_forms: str = ""

    def describe(self) -> str:
        if self.crossover is None:
            return f"quantized matmuls at every batch size ({self.how})"
        return (
            f"decode rows quantized below {self.crossover}, dense bf16 from {self.crossover} ({self.how}; "
            f"{self.dense_bytes / 2**20:.0f} MiB of dense copies); prompt rows {self.prompt_forms}"
        )


def choose_by_rows(model: nn.Module, dtype: torch.dtype, cache_dir: Path | None = None) -> RowChoice | None:
    """Give every quantized linear of ``model`` (activations in ``dtype``) a dense bf16 copy for
    batches from the crossover (measured here, or remembered), or none where dense never wins or
    cannot run here. None when the model has no quantized linear."""
    # Linears already given their copy (a model loaded once and handed to a second runner) stay as they are.
    chosen = {id(m.quantized) for m in model.modules() if isinstance(m, RowChosenLinear)}
    targets = [(name, m) for name, m in model.named_modules() if isinstance(m, QuantLinear) and id(m) not in chosen]
    if not targets:
        return None
    why_not = None if dtype == KERNEL_DTYPE else f"{dtype} activations"
    if why_not is None and not can_pack(KERNEL_DTYPE):
        why_not = "no packed bf16 matmul on this CPU"
    if why_not is not None:
        release_quantized_weights(model)
        return RowChoice(None, 0, why_not)
    layer = _first_layer_projections(targets)
    key = _cache_key(layer)
    cache = (cache_dir or _default_cache_dir()) / "crossover.json"
    remembered = _read(cache).get(key, "missing")
    if not (remembered is None or (isinstance(remembered, int) and remembered >= 1)):  # missing, or not ours
        crossover, how = _measure(layer), "measured"
        _write(cache, key, crossover)
    else:
        crossover, how = remembered, "remembered"
    dense_bytes = 0
    modes: dict[tuple[int, int], tuple[str, Mode | None]] = {}  # by shape: prompt form and mode
    for name, module in targets:
        if crossover is not None:
            dense = PackedLinear(module.dense_weight(KERNEL_DTYPE), module.bias)
            dense_bytes += 2 * module.in_features * module.out_features
            prompt = None
            if name.startswith("layers."):  # the LM head reads sampled rows only, never a prompt's
                shape = (module.in_features, module.out_features)
                if shape not in modes:
                    modes[shape] = _prompt_mode(module, dense)
                form, mode = modes[shape]
                if mode is not None:
                    prompt = RowInvariantLinear(dense if form == "dense" else module, mode, MAX_CHECKED_ROWS)
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, RowChosenLinear(module, dense, crossover, prompt))
        module.release_weight()
    if crossover is None:
        how += f": dense bf16 never faster up to {CROSSOVER_ROWS[-1]} rows"
    counts: dict[str, int] = {}
    for form, mode in modes.values():
        label = f"{form} {mode}" if mode is not None else "dense as is (NOT row-invariant here)"
        counts[label] = counts.get(label, 0) + 1
    forms = ", ".join(f"{label} x {count} shapes" for label, count in sorted(counts.items()))
    return RowChoice(crossover, dense_bytes, how, forms)


def _prompt_mode(quantized: QuantLinear, dense: PackedLinear) -> tuple[str, Mode | None]:
    """How prompt rows of a linear run: the dense form in the first of `PROMPT_MODES` whose rows do
    not depend on how many run with them here, else the quantized form so, else dense as it is
    (mode None: then a retried request may compute its cached prompt's last tokens differently)."""
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


def _measure(layer: list[QuantLinear]) -> int | None:
    """The smallest row count from which the dense form is faster at every larger size tried."""
    dense = [PackedLinear(m.dense_weight(KERNEL_DTYPE), m.bias) for m in layer]
    start = time.perf_counter()
    dense_wins = []
    for rows in CROSSOVER_ROWS:
        inputs = [torch.randn(rows, m.in_features).to(KERNEL_DTYPE) for m in layer]
        quantized_s = fastest_seconds(lambda xs=inputs: [m(x) for m, x in zip(layer, xs, strict=True)])
        dense_s = fastest_seconds(lambda xs=inputs: [m(x) for m, x in zip(dense, xs, strict=True)])
        dense_wins.append(dense_s < quantized_s)
    crossover = None
    for rows, wins in zip(reversed(CROSSOVER_ROWS), reversed(dense_wins), strict=True):
        if not wins:
            break
        crossover = rows
    log.info("batched matmul: crossover measured in %.1f s: %s", time.perf_counter() - start, crossover)
    return crossover


def fastest_seconds(run: Callable[[], object], repeat: int = 5) -> float:
    """The fastest of ``repeat`` calls of ``run`` after one untimed call."""
    best = float("inf")
    with torch.inference_mode():
        run()
        for _ in range(repeat):
            start = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - start)
    return best


def _cache_key(layer: list[QuantLinear]) -> str:
    shapes = ",".join(f"{type(m).__name__}:{m.in_features}x{m.out_features}" for m in layer)
    return f"{_cpu_name()}|threads={torch.get_num_threads()}|torch={torch.__version__}|{shapes}"


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown cpu"


def _default_cache_dir() -> Path:
    return Path(os.environ.get("AGENTGATE_CACHE_DIR") or Path.home() / ".cache" / "agentgate")


def _read(path: Path) -> dict[str, int | None]:
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return entries if isinstance(entries, dict) else {}


def _write(path: Path, key: str, crossover: int | None) -> None:
    """Best effort: a read-only home only means measuring again next time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        entries = _read(path) | {key: crossover}
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps(entries, indent=1))
        temporary.replace(path)
    except OSError as exc:
        log.info("batched matmul: crossover not remembered (%s)", exc)
