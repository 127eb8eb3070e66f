"""Plain-torch attention of prompt rows over the paged cache (`prompt_attention`), in tiles aligned to
positions, and the gather of a sequence's cached context (`gather_context`); the torch backend
(`engine.attention.torch`) calls them."""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["PROMPT_TILE_ROWS", "gather_context", "prompt_attention"]


def gather_context(cache: torch.Tensor, block_table: torch.Tensor, length: int) -> torch.Tensor:
    """The first ``length`` cached positions of the sequences of ``block_table``
    ([..., num_blocks]) as [..., length, num_kv_heads, head_dim]."""
    block_size = cache.shape[1]
    num_blocks = -(-length // block_size)
    blocks = cache[block_table[..., :num_blocks].long()]
    lead = blocks.shape[:-4]
    return blocks.reshape(*lead, num_blocks * block_size, *cache.shape[2:])[..., :length, :, :]


# Prompt rows attend in tiles of this many query rows, aligned to positions (see `prompt_attention`).
PROMPT_TILE_ROWS = 32


def prompt_attention(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_len: int,
    scale: float,
    group: int,
) -> torch.Tensor:
    """Causal attention of one sequence's prompt rows ``query`` [rows, heads, dim], the last of its
    ``seq_len`` positions, computed so that a row's numbers depend on its position and context
    alone, not on how many rows run with it: a retried request that finds its prompt in the prefix
    cache computes its last tokens exactly as the first sending did (issue 35).

    CPU SDPA is not so by itself: its fused kernel blocks the work by the number of query rows
    and of keys, and a bf16 row moves by an ulp when either changes. So the rows go in tiles of
    `PROMPT_TILE_ROWS` aligned to positions (row p in the tile of positions
    [T*floor(p/T), T*floor(p/T) + T)), each tile padded to T rows and run over exactly the keys
    up to its end: every row meets one shape, whatever else is computed. Keys past ``seq_len``
    are zeros and masked, like those past a row's own position; the work stays causal."""
    tile = PROMPT_TILE_ROWS
    rows = query.shape[0]
    first = seq_len - rows  # the position of the first row
    lead = first % tile
    span = lead + rows + (-(lead + rows) % tile)  # the tiles' rows, padded at both ends
    kv_len = first - lead + span  # the last tile's end
    # [1, heads, positions, dim], KV heads repeated for the query groups: CPU SDPA's fused kernel
    # wants 4-D inputs without GQA (about 2x faster).
    k = gather_context(k_cache, block_table, seq_len)
    v = gather_context(v_cache, block_table, seq_len)
    k = F.pad(k, (0, 0, 0, 0, 0, kv_len - seq_len)).transpose(0, 1).repeat_interleave(group, 0)[None]
    v = F.pad(v, (0, 0, 0, 0, 0, kv_len - seq_len)).transpose(0, 1).repeat_interleave(group, 0)[None]
    q = F.pad(query.to(k.dtype), (0, 0, 0, 0, lead, span - lead - rows)).transpose(0, 1)[None]
    # An additive float mask (CPU SDPA is much slower with a boolean one); a tile ending at e
    # takes the last e columns: row i sees keys up to e - tile + i.
    k_pos = torch.arange(kv_len, device=query.device)
    q_pos = torch.arange(kv_len - tile, kv_len, device=query.device)
    mask = torch.zeros(tile, kv_len, dtype=k.dtype, device=query.device)
    mask.masked_fill_(k_pos[None, :] > q_pos[:, None], float("-inf"))
    tiles = []
    for start in range(0, span, tile):
        tile_end = first - lead + start + tile
        tiles.append(
            F.scaled_dot_product_attention(
                q[:, :, start : start + tile],
                k[:, :, :tile_end],
                v[:, :, :tile_end],
                attn_mask=mask[:, kv_len - tile_end :],
                scale=scale,
            )
        )
    return torch.cat(tiles, 2)[0, :, lead : lead + rows].transpose(0, 1)
