"""Verifying drafts against the target's tokens.

The runner samples a target token at each of a drafted request's k+1
positions, position i conditioned on the known tokens plus drafts[:i], with
the very sampler and noise of a step without drafts: greedy rows take the
argmax, sampled rows the exponential race keyed by (seed, position, token)
(see `engine.runner.sampling.sampler`). Draft i is accepted when it equals target i,
so every emitted token is the one decoding token by token would have sampled
at that position: output is identical with and without speculation, greedy
or seeded.

For sampled rows this is rejection sampling with a point-mass draft (a
draft-model-free proposer proposes one token, q = 1 on it): rejection
sampling accepts d with probability min(1, p(d)/q(d)) = p(d) and otherwise
samples from norm(max(0, p - q)), p without d; the coupled race accepts d
exactly when d wins the race, probability p(d), and otherwise emits the
winner among the other tokens, distributed as p without d. Same law, and
reproducible under a seed.
"""

from __future__ import annotations

from collections.abc import Sequence


def accepted_prefix(drafts: Sequence[int], targets: Sequence[int]) -> int:
    """How many leading drafts equal the target tokens (``targets`` has one
    more entry than ``drafts``: the token after the last draft)."""
    accepted = 0
    for draft, target in zip(drafts, targets):
        if draft != target:
            break
        accepted += 1
    return accepted


def emitted_tokens(drafts: Sequence[int], targets: Sequence[int]) -> list[int]:
    """The tokens a verification emits: the accepted drafts (which equal
    their targets) and the target after them."""
    return list(targets[: accepted_prefix(drafts, targets) + 1])
