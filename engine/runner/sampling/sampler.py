"""Sync-free token sampling: logits [N, V] + SamplingBatch -> token ids.

Order of processing, per row:

1. **Logprobs** (only when ``max_num_logprobs >= 0``) are taken from the raw
   logits, ``log_softmax`` before any processing (vLLM's default "raw"
   logprobs): the sampled token's logprob and, for ``k > 0``, the top-k ids
   and logprobs sorted descending.
2. **Logit bias** is added (``logit_bias_ids`` / ``logit_bias_values``,
   -1 padded). A bias of -100 makes a token all but impossible, +100 all but
   certain, as in OpenAI's API; both are plain additions.
3. **Allowed bitmask** (xgrammar layout): disallowed tokens -> -inf. A row of
   all -1 is unconstrained. When the mask covers fewer than V tokens (a
   tokenizer vocabulary smaller than the model's padded one), the uncovered
   tokens are allowed only in unconstrained rows.
4. **Suppressed ids** -> -inf (EOS and stop ids while ``min_tokens`` is unmet).
5. **Repetition penalty** (HF semantics) on tokens seen in the prompt or the
   output: positive logits divided by it, negative ones multiplied.
6. **Frequency and presence penalties** (OpenAI semantics) on output counts:
   ``logit -= frequency * count + presence * (count > 0)``.
7. Greedy rows (temperature 0) take the argmax here.
8. Sampled rows: divide by temperature, then **min-p** (drop tokens whose
   probability is below ``min_p`` times the largest), **top-k**, **top-p**
   (keep the smallest prefix of the sorted distribution, already restricted by
   top-k, whose mass reaches ``top_p``), each masking to -inf and always
   keeping the most likely token. Tokens tied with the last kept one are kept.
9. Pick by the **exponential race** (equivalent to Gumbel-max):
   ``argmax(probs / E)`` with ``E = -log(u)`` and ``u`` from the counter-based
   hash of (seed, position, token id) in ``engine.runner.sampling.noise``.
10. **Redirect**: a row that sampled one of its ``redirect_from`` ids emits
   its ``redirect_to`` id instead (an end-of-turn inside a thinking block
   becomes the block's end). Logprobs stay those of the token sampled.

With an ``unnarrowed_bitmask`` (a forced-call budget narrowed some rows' grammar masks), step 3
applies it instead, and after step 6 the row's best token is noted (``overridden``: the narrowed
mask removed it) before the narrowed mask is applied: the same tokens are sampled, and the engine
learns whether the budget changed what the model would have written (issue 48).

Every step is row-wise, so a row's token depends only on its own logits and
parameters, never on the batch around it or its row index. The noise is exact
integer arithmetic, identical on CPU and CUDA; the float steps (softmax, log)
may differ between devices in the last bit, which can only matter for
candidates tied to within one rounding error.

Sync-freedom: nothing here reads a device value on the host (no ``.item()``,
``.tolist()``, ``.cpu()``, ``.nonzero()``, boolean-mask indexing, or Python
branches on tensors); only ``SamplingBatch``'s host flags and tensor shapes
steer Python, so the same calls also capture into CUDA graphs. Two exceptions,
on the CPU only, where there are no graphs and a read costs nothing: top-k and
top-p first look at each row's largest values and sort a whole row only when
its kept prefix runs past them (`_apply_top_k_top_p_candidates_`), and the race
draws noise only for the tokens left when few are (`_race`).

Memory: rows are processed in chunks of at most ``MAX_CHUNK_ELEMENTS``
logits, which bounds the [rows, V] temporaries (int64 hashes, sort values,
probabilities) whatever N is.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from agentgate.engine.runner.sampling import noise
from agentgate.engine.runner.sampling.batch import SamplerOutput, SamplingBatch

__all__ = ["MAX_CHUNK_ELEMENTS", "SamplerOutput", "SamplingBatch", "sample"]

MAX_CHUNK_ELEMENTS = 1 << 23  # logits per row chunk: 8M (~55 rows at V=152k)
TOP_CANDIDATES = 256  # values per row top-k/top-p look at first on the CPU (`_apply_top_k_top_p_candidates_`)

_NEG_INF = float("-inf")


class _VocabTables:
    """[V] helper tensors, built on first use and kept (`_vocab_tables`): a
    step that rebuilt them would launch their kernels every time."""

    def __init__(self, vocab_size: int, device: torch.device) -> None:
        self.vocab_size = vocab_size
        self.device = device
        self._offsets: Tensor | None = None
        self._positions: Tensor | None = None
        self._bit_words: Tensor | None = None
        self._bit_shifts: Tensor | None = None

    @property
    def offsets(self) -> Tensor:
        if self._offsets is None:
            self._offsets = noise.token_offsets(self.vocab_size, self.device)
        return self._offsets

    @property
    def positions(self) -> Tensor:
        if self._positions is None:
            self._positions = torch.arange(self.vocab_size, dtype=torch.int64, device=self.device)
        return self._positions

    @property
    def bit_words(self) -> Tensor:
        if self._bit_words is None:
            self._bit_words = torch.bitwise_right_shift(self.positions, 5)
        return self._bit_words

    @property
    def bit_shifts(self) -> Tensor:
        if self._bit_shifts is None:
            self._bit_shifts = torch.bitwise_and(self.positions, 31).to(torch.int32)
        return self._bit_shifts


@functools.lru_cache(maxsize=8)
def _vocab_tables(vocab_size: int, device: torch.device) -> _VocabTables:
    return _VocabTables(vocab_size, device)


def sample(logits: Tensor, batch: SamplingBatch) -> SamplerOutput:
    """Sample one token per row of ``logits`` [N, V] float32 (modified in place)."""
    if logits.dtype != torch.float32:
        logits = logits.to(torch.float32)
    num_rows, vocab_size = logits.shape
    tables = _vocab_tables(vocab_size, logits.device)
    bitmask = batch.allowed_bitmask
    if bitmask is not None:
        bitmask = _fit_bitmask(bitmask, vocab_size)
    unnarrowed = batch.unnarrowed_bitmask
    if unnarrowed is not None and bitmask is not None:
        unnarrowed = _fit_bitmask(unnarrowed, vocab_size)
    else:
        unnarrowed = None
    num_top = min(batch.flags.max_num_logprobs, vocab_size)
    rows_per_chunk = max(1, MAX_CHUNK_ELEMENTS // max(1, vocab_size))

    parts: list[tuple[Tensor | None, ...]] = []
    for start in range(0, num_rows, rows_per_chunk):
        rows = slice(start, min(start + rows_per_chunk, num_rows))
        parts.append(_sample_chunk(logits[rows], batch, rows, bitmask, unnarrowed, num_top, tables))
    if len(parts) == 1:
        token_ids, logprobs, top_ids, top_logprobs, overridden = parts[0]
    else:
        token_ids, logprobs, top_ids, top_logprobs, overridden = (
            torch.cat([p[i] for p in parts]) if parts[0][i] is not None else None for i in range(5)
        )
    if batch.redirect_to is not None and batch.redirect_from is not None:
        hit = (batch.redirect_from == token_ids[:, None]).any(dim=1) & (batch.redirect_to >= 0)
        token_ids = torch.where(hit, batch.redirect_to, token_ids)
    return SamplerOutput(token_ids, logprobs, top_ids, top_logprobs, overridden)


def _sample_chunk(
    logits: Tensor,
    batch: SamplingBatch,
    rows: slice,
    bitmask: Tensor | None,
    unnarrowed: Tensor | None,
    num_top: int,
    tables: _VocabTables,
) -> tuple[Tensor | None, ...]:
    raw_logprobs = top_ids = top_logprobs = overridden = None
    if num_top >= 0:
        raw_logprobs = torch.log_softmax(logits, dim=-1)
        if num_top > 0:
            top_logprobs, top_ids = torch.topk(raw_logprobs, num_top, dim=-1)

    _apply_constraints_(logits, batch, rows, bitmask if unnarrowed is None else unnarrowed, tables)
    if batch.flags.any_penalties:
        _apply_penalties_(logits, batch, rows)
    if unnarrowed is not None:  # the best token the grammar alone allows, then the budget's narrowing
        allowed = _allowed(bitmask[rows], tables)
        overridden = ~allowed.gather(1, logits.argmax(dim=-1)[:, None]).squeeze(1)
        logits.masked_fill_(~allowed, _NEG_INF)

    if batch.flags.all_greedy:
        token_ids = logits.argmax(dim=-1)
    else:
        temperature = batch.temperature[rows]
        greedy = temperature == 0
        greedy_ids = logits.argmax(dim=-1)
        logits.div_(torch.where(greedy, 1.0, temperature)[:, None])
        if batch.flags.any_min_p:
            _apply_min_p_(logits, batch.min_p[rows])
        if batch.flags.any_top_k or batch.flags.any_top_p:
            _apply_top_k_top_p_(
                logits,
                batch.top_k[rows] if batch.flags.any_top_k else None,
                batch.top_p[rows] if batch.flags.any_top_p else None,
                tables,
            )
        probs = torch.softmax(logits, dim=-1)
        keys = noise.row_keys(batch.seed[rows], batch.position[rows])
        token_ids = torch.where(greedy, greedy_ids, _race(probs, keys, tables))

    token_logprobs = None
    if raw_logprobs is not None:
        token_logprobs = raw_logprobs.gather(1, token_ids[:, None]).squeeze(1)
    return token_ids, token_logprobs, top_ids, top_logprobs, overridden


def _race(probs: Tensor, keys: Tensor, tables: _VocabTables) -> Tensor:
    """Each row's winner of the exponential race, ``argmax(probs / E)`` (``probs`` consumed).

    A token of probability 0 (masked by the grammar, top-k, top-p, min-p) scores 0 whatever its
    noise, so on the CPU, where a host read costs nothing, the noise is drawn only for the tokens
    left when they are under a quarter of the rows' vocabulary (`noise.exponential_at`: the same
    bits). A nucleus of a few tokens then costs a few hashes instead of the whole vocabulary's.
    Elsewhere the whole [N, V] noise, without a host read."""
    if probs.device.type == "cpu":
        rows, tokens = probs.nonzero(as_tuple=True)
        if rows.numel() * 4 < probs.numel():
            scores = torch.zeros_like(probs)
            scores[rows, tokens] = probs[rows, tokens] / noise.exponential_at(keys, tables.offsets, rows, tokens)
            return scores.argmax(dim=-1)
    return probs.div_(noise.exponential(keys, tables.offsets)).argmax(dim=-1)


def _fit_bitmask(bitmask: Tensor, vocab_size: int) -> Tensor:
    """The mask with exactly ceil(V/32) words; missing words allow all tokens
    in unconstrained rows (all -1) and none in constrained ones."""
    words = (vocab_size + 31) // 32
    have = bitmask.shape[1]
    if have >= words:
        return bitmask[:, :words]
    unconstrained = (bitmask == -1).all(dim=1, keepdim=True)
    fill = torch.where(unconstrained, -1, 0).to(bitmask.dtype)
    return torch.cat([bitmask, fill.expand(-1, words - have)], dim=1)


def _apply_constraints_(
    logits: Tensor, batch: SamplingBatch, rows: slice, bitmask: Tensor | None, tables: _VocabTables
) -> None:
    """Logit bias, allowed bitmask and suppressed ids, in place."""
    if batch.logit_bias_ids is not None and batch.logit_bias_values is not None:
        ids = batch.logit_bias_ids[rows]
        values = batch.logit_bias_values[rows].to(logits.dtype)
        # Padding (-1) adds 0.0 to token 0: exact, and order-independent.
        logits.scatter_add_(1, ids.clamp(min=0), torch.where(ids >= 0, values, 0.0))
    if bitmask is not None:
        logits.masked_fill_(~_allowed(bitmask[rows], tables), _NEG_INF)
    if batch.suppressed_ids is not None:
        ids = batch.suppressed_ids[rows]
        # amin with +inf leaves padded slots alone whatever else hits token 0.
        src = torch.where(ids >= 0, _NEG_INF, float("inf")).to(logits.dtype)
        logits.scatter_reduce_(1, ids.clamp(min=0), src, reduce="amin", include_self=True)


def _allowed(bitmask: Tensor, tables: _VocabTables) -> Tensor:
    """[n, V] bool: the tokens a bitmask's rows allow."""
    words = bitmask.index_select(1, tables.bit_words)  # [n, V] int32
    return words.bitwise_right_shift_(tables.bit_shifts[None, :]).bitwise_and_(1) != 0


def _apply_penalties_(logits: Tensor, batch: SamplingBatch, rows: slice) -> None:
    """Repetition, then frequency and presence penalties, in place. Rows with
    neutral values (1, 0, 0) come out bit-identical."""
    counts = batch.output_counts[rows] if batch.output_counts is not None else None
    prompt_mask = batch.prompt_mask[rows] if batch.prompt_mask is not None else None
    in_output = counts > 0 if counts is not None else None

    if in_output is not None or prompt_mask is not None:
        if in_output is None:
            seen = prompt_mask
        elif prompt_mask is None:
            seen = in_output
        else:
            seen = in_output | prompt_mask
        penalty = batch.repetition_penalty[rows][:, None]
        penalized = torch.where(logits > 0, logits / penalty, logits * penalty)
        logits.copy_(torch.where(seen, penalized, logits))
        del penalized

    if counts is not None:
        frequency = batch.frequency_penalty[rows][:, None]
        presence = batch.presence_penalty[rows][:, None]
        logits.sub_(counts.to(logits.dtype) * frequency)
        logits.sub_(in_output.to(logits.dtype) * presence)


def _apply_min_p_(logits: Tensor, min_p: Tensor) -> None:
    """Mask tokens with probability below min_p * max probability (in log space:
    logit < max logit + log(min_p)); min_p 0 gives -inf, masking nothing."""
    threshold = logits.amax(dim=-1, keepdim=True) + torch.log(min_p)[:, None]
    logits.masked_fill_(logits < threshold, _NEG_INF)


def _apply_top_k_top_p_(logits: Tensor, top_k: Tensor | None, top_p: Tensor | None, tables: _VocabTables) -> None:
    """Mask everything below the value of the last kept token of the sorted row.

    The kept set is a prefix of the descending sort: the first k (top-k), then
    the shortest prefix of that whose probability mass reaches p (top-p). The
    threshold is that prefix's smallest value, so the result depends on values
    only, never on how the sort ordered ties.

    On the CPU the rows are first tried on their `TOP_CANDIDATES` largest values
    (`_apply_top_k_top_p_candidates_`): sorting a whole 49k vocabulary costs
    ~15x a top-256 (measured 50 rows: 220-250 ms against 16 ms a step).
    """
    if logits.device.type == "cpu" and logits.shape[1] > TOP_CANDIDATES:
        _apply_top_k_top_p_candidates_(logits, top_k, top_p, tables)
    else:
        _apply_top_k_top_p_sorted_(logits, top_k, top_p, tables)


def _apply_top_k_top_p_sorted_(
    logits: Tensor, top_k: Tensor | None, top_p: Tensor | None, tables: _VocabTables
) -> None:
    """`_apply_top_k_top_p_` on the whole sorted rows, without a host read."""
    vocab_size = logits.shape[1]
    sorted_logits = torch.sort(logits, dim=-1, descending=True).values
    keep = _top_k_counts(top_k, sorted_logits.shape[0], vocab_size, logits.device)
    if top_p is not None:
        if top_k is not None:
            restricted = sorted_logits.masked_fill(tables.positions[None, :] >= keep[:, None], _NEG_INF)
        else:
            restricted = sorted_logits
        probs = torch.softmax(restricted, dim=-1)
        del restricted
        in_nucleus = _nucleus_counts(probs, top_p)
        in_nucleus = torch.where(top_p >= 1.0, vocab_size, in_nucleus)
        keep = torch.minimum(keep, in_nucleus)
    keep = keep.clamp(min=1)
    threshold = sorted_logits.gather(1, (keep - 1)[:, None])
    logits.masked_fill_(logits < threshold, _NEG_INF)


def _top_k_counts(top_k: Tensor | None, num_rows: int, vocab_size: int, device: torch.device) -> Tensor:
    """Tokens each row's top-k keeps (the whole vocabulary for k <= 0, k > V, or no top-k)."""
    if top_k is None:
        return torch.full((num_rows,), vocab_size, dtype=torch.int64, device=device)
    k = top_k.to(torch.int64)
    return torch.where((k <= 0) | (k > vocab_size), vocab_size, k)


def _nucleus_counts(probs: Tensor, top_p: Tensor) -> Tensor:
    """Of ``probs`` sorted descending, how many the mass before each reaches ``top_p`` after."""
    mass_before = torch.cumsum(probs, dim=-1).sub_(probs)
    return (mass_before < top_p[:, None]).sum(dim=-1)


def _apply_top_k_top_p_candidates_(
    logits: Tensor, top_k: Tensor | None, top_p: Tensor | None, tables: _VocabTables
) -> None:
    """`_apply_top_k_top_p_` on each row's `TOP_CANDIDATES` largest values, the same set kept.

    A row's kept prefix is found among its candidates when top-k keeps at most that many, or the
    nucleus closes within them (their probabilities are the whole row's: divided by the row's
    sum, or the top-k's when it holds fewer); a row that keeps everything masks nothing. The
    rare row whose kept prefix runs past the candidates (a flat distribution under a large
    top-p, a top-k above them) goes through the whole sort. This reads values on the host, which is free on the CPU
    only: accelerators keep the sync-free sort."""
    num_rows, vocab_size = logits.shape
    candidates = torch.topk(logits, TOP_CANDIDATES, dim=-1).values  # sorted descending
    keep_k = _top_k_counts(top_k, num_rows, vocab_size, logits.device)
    keep = keep_k
    if top_p is not None:
        within = keep_k <= TOP_CANDIDATES
        restricted = candidates.masked_fill(tables.positions[None, :TOP_CANDIDATES] >= keep_k[:, None], _NEG_INF)
        row_sum = torch.where(within, torch.logsumexp(restricted, -1), torch.logsumexp(logits, -1))
        in_nucleus = _nucleus_counts(torch.exp(restricted - row_sum[:, None]), top_p)
        # Past the candidates, or not known from them: a top-k above them but below the whole row
        # divides by a sum the candidates do not hold.
        beyond = (in_nucleus >= TOP_CANDIDATES) | (~within & (keep_k < vocab_size))
        in_nucleus = torch.where(top_p >= 1.0, vocab_size, torch.where(beyond, vocab_size + 1, in_nucleus))
        keep = torch.minimum(keep, in_nucleus)
    masks_nothing = keep >= vocab_size
    if top_p is not None:
        masks_nothing &= top_p >= 1.0
    past_candidates = (keep > TOP_CANDIDATES) & ~masks_nothing
    settled = keep.clamp(1, TOP_CANDIDATES)
    threshold = candidates.gather(1, (settled - 1)[:, None]).squeeze(1)
    threshold.masked_fill_(masks_nothing | past_candidates, _NEG_INF)
    logits.masked_fill_(logits < threshold[:, None], _NEG_INF)
    past = past_candidates.nonzero().flatten()
    if len(past):
        rows = logits[past]
        _apply_top_k_top_p_sorted_(
            rows, None if top_k is None else top_k[past], None if top_p is None else top_p[past], tables
        )
        logits[past] = rows
