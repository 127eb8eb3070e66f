"""Whether a drafted verify step computes every token as plain decoding does, on this machine.

``--speculative auto`` (the CPU's default) promises that drafts change no greedy token (issue 52).
The linears' part of that promise is checked shape by shape (`engine.kernel_choice.decode_exactness`);
this check covers the whole forward pass a verify row takes: the real model, its attention over the
drafted rows (each a decode row over its own context, `engine.step_rows`), the KV writes, the norms
and the LM head. It runs a short sequence of tokens twice from the same prompt: one token a step, as
a lone request decodes, and all of them in one step, a request's last token and its drafts, as a
verify step computes them; then it compares every token's logits bit for bit. The drafts are placed
to cross a KV block boundary and not to, and beside a second request decoding one token. A bf16
kernel that blocks its work by the number of rows or keys (oneDNN on a CPU with AMX, for one)
moves a logit by an ulp, and an ulp can change a greedy token; where any logit moves, ``auto``
drafts nothing and the start-up log says why. The verdict is remembered under ``--cache-dir`` per
CPU, thread count, torch and model shapes (`engine.kernel_choice.row_choice_cache`).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import torch
from torch import nn

from agentgate.engine.attention.base import AttentionMetadata
from agentgate.engine.kernel_choice.row_choice_cache import MeasurementCache, cache_key
from agentgate.engine.step_rows import decode_rows

log = logging.getLogger("agentgate.engine")

# The prompt ends this many tokens before a KV block's end: the drafts cross it, so the rows before
# the boundary attend beside rows of one block more (the case a BLAS blocks by key count).
_BEFORE_BOUNDARY = 3
# Random contexts the attention alone is checked on (`drafted_attention_differs`).
_ATTENTION_SEEDS = 40


class _Sequences:
    """A few sequences in a private paged KV cache, one block table each, run through ``model``."""

    def __init__(self, model: nn.Module, block_size: int, blocks_per_seq: int, seqs: int, dtype: torch.dtype) -> None:
        config = model.config
        shape = (seqs * blocks_per_seq, block_size, config.num_kv_heads, config.head_dim)
        device = model.embed_tokens.weight.device
        self.model, self.block_size, self.device = model, block_size, device
        self.caches = [
            (torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))
            for _ in range(config.num_layers)
        ]
        # Each sequence's blocks in reverse order: a table that is not the identity.
        self.tables = [list(range((s + 1) * blocks_per_seq - 1, s * blocks_per_seq - 1, -1)) for s in range(seqs)]

    def step(
        self, rows: list[tuple[int, int, list[int]]], decode_tokens: int, requests: int, *, logits: bool = True
    ) -> torch.Tensor | None:
        """One step of ``(sequence, first position, token ids)`` rows, the first ``decode_tokens`` of
        them decode rows of ``requests`` requests; the logits of every token, [tokens, vocab] (None
        unless ``logits``)."""
        ids, positions, slots, query_lens, seq_lens = [], [], [], [], []
        for seq, start, tokens in rows:
            table = self.tables[seq]
            ids += tokens
            span = range(start, start + len(tokens))
            positions += span
            slots += [table[p // self.block_size] * self.block_size + p % self.block_size for p in span]
            query_lens.append(len(tokens))
            seq_lens.append(start + len(tokens))
        query_start = torch.tensor([0, *torch.tensor(query_lens).cumsum(0).tolist()], dtype=torch.int32)
        lens = torch.tensor(seq_lens, dtype=torch.int32)
        meta = AttentionMetadata(
            slot_mapping=torch.tensor(slots, device=self.device),
            query_start_loc=query_start.to(self.device),
            seq_lens=lens.to(self.device),
            block_tables=torch.tensor([self.tables[seq] for seq, _, _ in rows], dtype=torch.int32, device=self.device),
            max_query_len=max(query_lens),
            max_seq_len=max(seq_lens),
            query_start_loc_cpu=query_start,
            seq_lens_cpu=lens,
        )
        with torch.inference_mode():
            with decode_rows(decode_tokens, requests):
                hidden = self.model(
                    torch.tensor(ids, device=self.device),
                    torch.tensor(positions, device=self.device),
                    meta,
                    self.caches,
                )
            if not logits:
                return None
            with decode_rows(len(ids), requests):  # every token samples, as a verify step's rows do
                return self.model.compute_logits(hidden)


def drafted_rows_differ(model: nn.Module, block_size: int, dtype: torch.dtype, drafts: int) -> str | None:
    """Where a verify step of ``drafts`` drafts gives a token other logits than decoding it alone
    (see the module docstring), or the model's attention other numbers (`drafted_attention_differs`),
    in words; None when every logit is the same, bit for bit."""
    return _drafted_logits_differ(model, block_size, dtype, drafts) or drafted_attention_differs(
        model, block_size, dtype, drafts
    )


def drafted_attention_differs(
    model: nn.Module, block_size: int, dtype: torch.dtype, drafts: int, seeds: int = _ATTENTION_SEEDS
) -> str | None:
    """Where the model's attention gives a verify step's rows other numbers than their tokens
    decoded alone, in words; None when none does. The model check above runs a few random tokens,
    whose sums seldom sit near a bf16 rounding boundary: it passed where a draft at position 43,
    run over its request's 64 keys instead of its own 48, changed a greedy reply (issue 52). This
    runs the attention alone on the model's head shapes over ``seeds`` random contexts of large
    magnitudes (where a sum often sits near a boundary), drafts crossing the end of the 2nd KV
    block, and compares every row bit for bit (before the fix it found the difference on an AMX
    Xeon; 12 contexts did not)."""
    config = model.config
    heads, kv_heads, dim = config.num_heads, config.num_kv_heads, config.head_dim
    device = model.embed_tokens.weight.device
    attention = model.attention
    first = 2 * block_size - min(_BEFORE_BOUNDARY, drafts)
    length = first + drafts + 1
    table = torch.arange(-(-length // block_size) + 1, dtype=torch.int32, device=device)
    for seed in range(seeds):
        generator = torch.Generator().manual_seed(seed)
        k = (torch.randn(length, kv_heads, dim, generator=generator) * 3).to(dtype=dtype, device=device)
        v = torch.randn(length, kv_heads, dim, generator=generator).to(dtype=dtype, device=device)
        q = (torch.randn(length, heads, dim, generator=generator) * 3).to(dtype=dtype, device=device)
        k_cache = torch.zeros(len(table), block_size, kv_heads, dim, dtype=dtype, device=device)
        v_cache = torch.zeros_like(k_cache)
        k_cache.view(-1, kv_heads, dim)[:length] = k
        v_cache.view(-1, kv_heads, dim)[:length] = v
        verified = _decode_attention_rows(attention, q, k_cache, v_cache, table, first, length, dim**-0.5)
        for row, position in enumerate(range(first, length)):
            alone = _decode_attention_rows(attention, q, k_cache, v_cache, table, position, position + 1, dim**-0.5)
            if not torch.equal(verified[row], alone[0]):
                return (
                    f"the attention of a verify step of {drafts} drafts (from position {first}) gave the row "
                    f"at position {position} other numbers than its token decoded alone"
                )
    return None


def _decode_attention_rows(
    attention, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, table, first: int, end: int, scale
) -> torch.Tensor:
    """``attention``'s output for the decode rows of positions [first, end) of one request (its
    keys already in the cache), as one small step's."""
    device = q.device
    count = end - first
    query_start = torch.tensor([0, count], dtype=torch.int32)
    lens = torch.tensor([end], dtype=torch.int32)
    meta = AttentionMetadata(
        slot_mapping=torch.arange(first, end, device=device),
        query_start_loc=query_start.to(device),
        seq_lens=lens.to(device),
        block_tables=table[None],
        max_query_len=count,
        max_seq_len=end,
        query_start_loc_cpu=query_start,
        seq_lens_cpu=lens,
    )
    with torch.inference_mode(), decode_rows(count, 1):
        return attention.paged_attention(q[first:end], k_cache, v_cache, meta, scale)


def _drafted_logits_differ(model: nn.Module, block_size: int, dtype: torch.dtype, drafts: int) -> str | None:
    """`drafted_rows_differ`'s check of the whole model's logits."""
    prompt = 2 * block_size - min(_BEFORE_BOUNDARY, drafts)
    generator = torch.Generator().manual_seed(52)
    tokens = torch.randint(model.config.vocab_size, (2, prompt + drafts + 1), generator=generator).tolist()
    mine, neighbour = tokens[0], tokens[1][: prompt + 1]
    seqs = _Sequences(model, block_size, -(-len(mine) // block_size), 2, dtype)
    seqs.step([(0, 0, mine[:prompt]), (1, 0, neighbour[:prompt])], 0, 0, logits=False)
    plain = torch.cat([seqs.step([(0, prompt + i, [mine[prompt + i]])], 1, 1) for i in range(drafts + 1)])
    for with_neighbour in (False, True):
        rows = [(0, prompt, mine[prompt:])] + ([(1, prompt, neighbour[prompt:])] if with_neighbour else [])
        verified = seqs.step(rows, drafts + 1 + with_neighbour, 1 + with_neighbour)[: drafts + 1]
        differing = (verified != plain).any(dim=-1).nonzero().flatten().tolist()
        if differing:
            where = "beside a second request" if with_neighbour else "alone"
            return (
                f"a verify step of {drafts} drafts ({where}, from position {prompt}) gave its tokens "
                f"{differing} other logits than decoding them one by one"
            )
    return None


def drafted_rows_verdict(
    model: nn.Module,
    block_size: int,
    dtype: torch.dtype,
    drafts: int,
    cache_dir: Path | None = None,
    *,
    remeasure: bool = False,
) -> str | None:
    """`drafted_rows_differ`, remembered in ``cache_dir`` (unless ``remeasure``) per model shapes."""
    config = model.config
    shapes = (
        f"{config.architecture} layers={config.num_layers} hidden={config.hidden_size} vocab={config.vocab_size} "
        f"{','.join(sorted({type(m).__name__ for m in model.modules()}))} {dtype} block={block_size} drafts={drafts}"
        " attention-rows"  # verdicts from before the attention check (issue 52) are not reused
    )
    cache = MeasurementCache(cache_dir, remeasure=remeasure)
    key = cache_key("drafted rows", shapes)
    remembered = cache.recall(key)
    if remembered is not None and (remembered.value is None or isinstance(remembered.value, str)):
        return remembered.value
    start = time.perf_counter()
    verdict = drafted_rows_differ(model, block_size, dtype, drafts)
    log.info(
        "speculative auto: a verify step checked against plain decoding in %.1f s: %s",
        time.perf_counter() - start,
        verdict or "the same logits, bit for bit",
    )
    cache.remember(key, verdict)
    return verdict
