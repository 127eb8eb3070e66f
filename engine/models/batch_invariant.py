"""Linears whose rows do not depend on the rest of the batch (``--deterministic``).

A BLAS picks its kernel by the matrix's shape: on an AVX2 CPU, MKL computes
a float32 row differently when it is alone (1-3 rows take a GEMV-like path)
than inside a larger GEMM, by a few ulps, and a few ulps are enough to flip
a greedy argmax a dozen tokens later. So greedy output changes with what
else the engine is running. Under ``--deterministic`` every linear is
checked once at load and, where its rows move with the batch, made invariant:

- ``as is`` where the kernel already computes every row alike (PyTorch's
  int4/int8 weight-only CPU kernels, bf16 without native bf16 here);
- ``padded``: rows padded with zeros to a multiple of `TILE_ROWS`, so the
  BLAS always runs its full-tile kernel, where that is checked invariant;
- ``per row``: each row alone in its own zero-padded tile, one call each;
  invariant by construction (the same call on the same shape), and slow.

The check (`row_invariance`) runs the linear on random rows, each alone and
inside batches of several sizes at several offsets, and compares bitwise.
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

TILE_ROWS = 8
Mode = Literal["as is", "padded", "per row"]

# Batches the check puts a row in: (first row, rows); sizes around the tile.
_PROBES = ((0, 1), (0, 2), (0, 3), (1, 5), (2, 8), (3, 13), (0, 17), (5, 19))


class RowInvariantLinear(nn.Module):
    """Runs ``inner`` (any module mapping [rows, in] → [rows, out]) so that a
    row's result depends on that row alone (see the module docstring)."""

    def __init__(self, inner: nn.Module, mode: Mode) -> None:
        super().__init__()
        self.inner = inner
        self.mode = mode
        self.in_features: int = inner.in_features
        self.out_features: int = inner.out_features

    def forward(self, x: Tensor) -> Tensor:
        lead = x.shape[:-1]
        rows = x.reshape(-1, self.in_features)
        if self.mode == "padded":
            out = self.inner(_pad_rows(rows))[: rows.shape[0]]
        else:  # per row
            out = torch.cat([self.inner(_pad_rows(row))[:1] for row in rows.split(1)])
        return out.view(*lead, self.out_features)

    def extra_repr(self) -> str:
        return f"mode={self.mode!r}"


def _pad_rows(rows: Tensor) -> Tensor:
    missing = -rows.shape[0] % TILE_ROWS
    return F.pad(rows, (0, 0, 0, missing)) if missing else rows


def row_invariance(linear: nn.Module, dtype: torch.dtype) -> Mode:
    """The cheapest way to run ``linear`` with rows independent of the batch,
    found by trying (see the module docstring)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(24, linear.in_features, generator=generator).to(dtype)
    for mode in ("as is", "padded"):
        run = linear if mode == "as is" else RowInvariantLinear(linear, "padded")
        with torch.inference_mode():
            alone = torch.cat([run(x[i : i + 1]) for i in range(x.shape[0])])
            if all(torch.equal(run(x[s : s + n]), alone[s : s + n]) for s, n in _PROBES):
                return mode
    return "per row"


def make_rows_invariant(model: nn.Module, dtype: torch.dtype) -> Counter[str]:
    """Wrap every linear of ``model`` (``nn.Linear``, packed or quantized:
    any child with ``in_features``/``out_features``, including the LM head)
    whose rows move with the batch; shapes and kernels are checked once
    each. Returns how many linears run in each mode."""
    modes: dict[tuple[type, int, int], Mode] = {}
    counts: Counter[str] = Counter()
    targets = [
        (name, module) for name, module in model.named_modules()
        if name and hasattr(module, "in_features") and hasattr(module, "out_features")
    ]
    for name, module in targets:
        key = (type(module), module.in_features, module.out_features)
        if key not in modes:
            modes[key] = row_invariance(module, dtype)
        mode = modes[key]
        counts[mode] += 1
        if mode != "as is":
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, RowInvariantLinear(module, mode))
    return counts
