"""Which rows of a forward pass decode, as the runner says for each pass.

A decode row computes one token past its prompt (with its drafts, when speculating); every other
row is a prompt row (a prompt's tokens, a chunk of it, a recomputation). A prompt row's numbers
must not depend on how many rows run with it, or on how much of its prompt the prefix cache held,
so a retried greedy request repeats itself (issue 35): the linears run prompt rows in a
row-invariant form (`engine.kernel_choice.row_choice`) and the CPU attention runs them in aligned tiles
(`engine.attention.torch`). Decode rows may take whatever is fastest for their count, except in
a small step.

A small step decodes for at most `EXACT_DECODE_REQUESTS` requests: there every decode token,
each of a request's drafts included, is computed exactly as a lone request's one decode token
would be (the quantized kernels, whose rows do not depend on the batch; attention row by row over
the token's own context, without the shared-prefix split), so verifying drafts changes no greedy
token, nor does a neighbour joining or leaving (issue 41). ``--speculative auto`` drafts in small
steps only (`engine.speculative.speculator`). Checked on a 2-core Intel Xeon (AVX-512 BF16, AMX;
torch 2.13): the int4 and int8 weight-only kernels give a row the same bits alone and in batches of
2 to 64 rows at any offset, and at 1 or 2 threads, for every projection shape of the default model
and its LM head; `_decode_attention` gives a row the same bits beside other rows whose contexts
span as many KV blocks, at 1 or 2 threads, but not beside a row of more blocks (its keys padded to
that row's count: a draft at position 43 beside one at 48, issue 52), so a small step runs its
decode rows apart by block count (`engine.attention.torch._parts_by_blocks`). The cost: small
steps read no shared prefix apart (each row streams its whole context), run one attention call per
block count, and a drafted step's rows stay on the quantized kernels past the crossover.

The runner puts a step's decode rows first (the scheduler orders them so) and says how many
tokens and requests they hold with `decode_rows`; rows nobody described (outside it) all count
as decode rows, each going by its count as before, and no step is small.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import NamedTuple

# The most requests a small step decodes for (see the module docstring).
EXACT_DECODE_REQUESTS = 4


class _Described(NamedTuple):
    tokens: int
    requests: int | None


_DECODE_ROWS: ContextVar[_Described | None] = ContextVar("agentgate_decode_rows", default=None)


@contextmanager
def decode_rows(count: int, requests: int | None = None) -> Iterator[None]:
    """Within: the model's input rows are ``count`` decode rows, of ``requests`` requests (None:
    not said, so the step is not small), then prompt rows."""
    token = _DECODE_ROWS.set(_Described(count, requests))
    try:
        yield
    finally:
        _DECODE_ROWS.reset(token)


def decode_row_count(rows: int) -> int:
    """How many of a pass's first ``rows`` input rows decode: as described, else all of them."""
    described = _DECODE_ROWS.get()
    return rows if described is None else min(described.tokens, rows)


def is_small_step() -> bool:
    """Whether the pass decodes for at most `EXACT_DECODE_REQUESTS` requests, as described: its
    decode tokens are then each computed as a lone request's decode token."""
    described = _DECODE_ROWS.get()
    return described is not None and described.requests is not None and described.requests <= EXACT_DECODE_REQUESTS
