"""Which pinned KV yields first under pressure: the pin whose release is expected to cost least.

The rule. Releasing a pin loses, if its program comes back soon, the prefill of the blocks only
it holds (blocks another pin or a running request also holds stay). So

    expected loss = tokens to recompute x prefill cost per token x P(return soon)

- *tokens to recompute*: the tokens of the pin's blocks held by no other pin and no request;
- *prefill cost per token* at position ``p``: ``1 + p / ATTENTION_TOKENS`` (in units of a
  token's cost at the start of a context: the linear layers cost the same at every position,
  attention grows with the context, as much again at ``ATTENTION_TOKENS``), so the tail of a
  long conversation costs more to recompute than the head of a short one;
- *P(return soon)*: for a tool the server runs (the hosted MCP loop), 1: the gateway holds the
  pin for exactly as long as the tool runs, and the next round follows it; for a client's tool,
  its gap law's chance that the program returns within ``HORIZON_S`` given that it has been away
  so long (``engine.scheduling.tool_gaps.GapLaw.return_soon``).

Pressure releases pins least expected loss first (after pins whose next turn has not arrived:
a pin whose turn is already waiting goes last; under the program policy, within a level of
service: pins of programs served a level more go first, as they did), then the oldest turn end. Which pins a request
may release at all is the scheduling policy's (``engine.scheduling.memory_pressure``: by program,
only those of programs ranked after its own), so no client buys memory by its prompt's length.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentgate.engine.kv.block_pool import Block

# Context length at which a token's attention costs as much as its linear layers (SmolLM2-135M
# class models: hidden 576, 30 layers; a rough figure, the order is what it sets).
ATTENTION_TOKENS = 4096


def recompute_cost(blocks: Sequence[Block], block_size: int) -> float:
    """The prefill cost of the pin's ``blocks`` held by it alone (token-cost units, above)."""
    cost = 0.0
    for index, block in enumerate(blocks):
        if block.pins == 1 and block.ref_count == 1:
            first = index * block_size  # positions first .. first + block_size - 1
            cost += block_size * (1.0 + (first + (block_size - 1) / 2) / ATTENTION_TOKENS)
    return cost


def exclusive_blocks(blocks: Sequence[Block]) -> int:
    """How many of ``blocks`` the pin alone holds (what its release frees)."""
    return sum(1 for block in blocks if block.pins == 1 and block.ref_count == 1)
