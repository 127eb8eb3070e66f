"""Which rows of a forward pass decode, as the runner says for each pass.

A decode row computes one token past its prompt (with its drafts, when speculating); every other
row is a prompt row (a prompt's tokens, a chunk of it, a recomputation). A prompt row's numbers
must not depend on how many rows run with it, or on how much of its prompt the prefix cache held,
so a retried greedy request repeats itself (issue 35): the linears run prompt rows in a
row-invariant form (`engine.layers.row_choice`) and the CPU attention runs them in aligned tiles
(`engine.attention.torch`). Decode rows may take whatever is fastest for their count.

The runner puts a step's decode rows first (the scheduler orders them so) and says how many
tokens they hold with `decode_rows`; rows nobody described (outside it) all count as decode
rows, each going by its count as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_DECODE_ROWS: ContextVar[int | None] = ContextVar("agentgate_decode_rows", default=None)


@contextmanager
def decode_rows(count: int) -> Iterator[None]:
    """Within: the model's input rows are ``count`` decode rows, then prompt rows."""
    token = _DECODE_ROWS.set(count)
    try:
        yield
    finally:
        _DECODE_ROWS.reset(token)


def decode_row_count(rows: int) -> int:
    """How many of a pass's first ``rows`` input rows decode: as described, else all of them."""
    described = _DECODE_ROWS.get()
    return rows if described is None else min(described, rows)
