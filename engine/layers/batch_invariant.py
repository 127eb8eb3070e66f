"""Linears whose rows do not depend on the rest of the batch (``--deterministic``).

A BLAS picks its kernel by the matrix's shape: on an AVX2 CPU, MKL computes
a float32 row differently when it is alone (1-3 rows take a GEMV-like path)
than inside a larger GEMM; on an AVX-512 CPU oneDNN's bfloat16 kernel splits
the reduction differently from about 12 rows on; on a CPU with AMX tiles the
blocking changes again with the row count, even at multiples of 8. A few
ulps are enough to flip a greedy argmax a dozen tokens later, so greedy
output would change with what else the engine is running. `RowInvariantLinear`
runs a linear in one of these modes:

- ``as is`` where the kernel already computes every row alike (PyTorch's
  int4/int8 weight-only CPU kernels, some bf16 shapes);
- ``padded``: rows padded with zeros to a multiple of `TILE_ROWS`;
- ``tiles``: rows cut into tiles of exactly `TILE_ROWS` (the last one
  zero-padded), one call per tile, so the BLAS only ever sees one shape;
- ``per row``: each row alone in its own zero-padded tile, one call each:
  the same call on the same shape for every row, and slow.

Every mode also cuts a batch into chunks of at most ``max_rows`` rows, the
largest batch the check tried, so no batch runs a shape it did not check.
Which mode a linear needs on this CPU is measured at load
(`engine.kernel_choice.row_invariance`).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

TILE_ROWS = 8
# The largest batch a linear is checked at: larger batches run in chunks of
# this many rows (the check's cost grows with it; 256 rows keep every
# projection's matmul efficient).
MAX_CHECKED_ROWS = 256
Mode = Literal["as is", "padded", "tiles", "per row"]
MODES: tuple[Mode, ...] = ("as is", "padded", "tiles", "per row")


class RowInvariantLinear(nn.Module):
    """Runs ``inner`` (any module mapping [rows, in] → [rows, out]) so that a
    row's result depends on that row alone (see the module docstring)."""

    def __init__(self, inner: nn.Module, mode: Mode, max_rows: int = MAX_CHECKED_ROWS) -> None:
        super().__init__()
        self.inner = inner
        self.mode = mode
        self.max_rows = max_rows
        self.in_features: int = inner.in_features
        self.out_features: int = inner.out_features

    def forward(self, x: Tensor) -> Tensor:
        lead = x.shape[:-1]
        rows = x.reshape(-1, self.in_features)
        if rows.shape[0] <= self.max_rows:
            out = self._run(rows)
        else:
            out = torch.cat([self._run(chunk) for chunk in rows.split(self.max_rows)])
        return out.view(*lead, self.out_features)

    def _run(self, rows: Tensor) -> Tensor:
        if self.mode == "as is":
            return self.inner(rows)
        if self.mode == "padded":
            return self.inner(_pad_rows(rows))[: rows.shape[0]]
        if self.mode == "tiles":
            return torch.cat([self.inner(_pad_rows(tile))[: tile.shape[0]] for tile in rows.split(TILE_ROWS)])
        return torch.cat([self.inner(_pad_rows(row))[:1] for row in rows.split(1)])  # per row

    def extra_repr(self) -> str:
        return f"mode={self.mode!r}, max_rows={self.max_rows}"


def _pad_rows(rows: Tensor) -> Tensor:
    missing = -rows.shape[0] % TILE_ROWS
    return F.pad(rows, (0, 0, 0, missing)) if missing else rows
