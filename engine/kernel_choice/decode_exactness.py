"""Whether a model's decode linears give a row the same bits whatever rows run with it, on this CPU.

``--speculative auto`` (the CPU's default) promises that drafts change no greedy token: in a small
step every decode token, each draft's included, is computed as a lone request's
(`engine.step_rows`). The attention keeps that by construction; the linears keep it only where
their kernel computes a row alike in batches of any size. PyTorch's int4/int8 weight-only CPU
kernels do on the CPUs this project has measured, a dense BLAS matmul does not (MKL and oneDNN
change their blocking with the row count). So the engine checks each decode linear's shape here,
bitwise, at load (`engine.kernel_choice.row_invariance.is_row_invariant`, up to the rows a small step
carries), remembers the verdict per shape, CPU, thread count and torch under ``--cache-dir``
(`engine.kernel_choice.row_choice_cache`), and ``auto`` drafts only where every shape passes. On the
default model (five int4 shapes, the LM head's the costly one, up to 28 rows) the check took 1.3 s
of a first start on 2 quiet cores; a later start reads the verdicts.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn

from agentgate.engine.kernel_choice.row_choice import RowChosenLinear
from agentgate.engine.kernel_choice.row_choice_cache import MeasurementCache, cache_key
from agentgate.engine.kernel_choice.row_invariance import is_row_invariant


def decode_linears(module: nn.Module) -> Iterator[nn.Module]:
    """The modules that compute a decode row's linears in a small step: a row-chosen linear's
    quantized form (`RowChosenLinear` gives a small step's rows to it), else each module with
    ``in_features`` and ``out_features`` (a linear, quantized, packed or wrapped), not looking
    inside it."""
    if isinstance(module, RowChosenLinear):
        yield module.quantized
        return
    if hasattr(module, "in_features") and hasattr(module, "out_features"):
        yield module
        return
    for child in module.children():
        yield from decode_linears(child)


def batch_dependent_decode_linears(
    model: nn.Module, dtype: torch.dtype, rows: int, cache_dir: Path | None = None, *, remeasure: bool = False
) -> list[str]:
    """The shapes (``"QuantLinear 576x1536"``) of ``model``'s decode linears (activations in
    ``dtype``) whose rows, in batches of up to ``rows``, differ from the same rows alone here; empty
    when none does. Verdicts are remembered in ``cache_dir`` unless ``remeasure``."""
    cache = MeasurementCache(cache_dir, remeasure=remeasure)
    verdicts: dict[str, bool] = {}
    for linear in decode_linears(model):
        label = f"{type(linear).__name__} {linear.in_features}x{linear.out_features}"
        if label in verdicts:
            continue
        key = cache_key(f"decode rows<={rows}", f"{label} {dtype}")
        remembered = cache.recall(key)
        if remembered is not None and isinstance(remembered.value, bool):
            verdicts[label] = remembered.value
        else:
            verdicts[label] = is_row_invariant(linear, linear.in_features, dtype, rows)
            cache.remember(key, verdicts[label])
    return [label for label, invariant in verdicts.items() if not invariant]
