"""Verification of a sampled row keeps the target distribution exactly.

With a draft-model-free proposer the draft is a point mass on one token d;
rejection sampling then accepts d with probability p(d) and otherwise emits
a token from p without d. The runner's rule (accept d when the sampler's
seeded race at that position picks d; see engine.speculative.verify) must
give the same law. Checked here with the real sampler over 6000 seeds (fixed,
so the test is deterministic) by chi-square tests at a 0.1% level (critical
values for 7 and 6 degrees of freedom) and a 4-sigma bound on the acceptance
rate."""

import math

import torch

from agentgate.engine.runner.sampling.host import SamplingRow, build_sampling_batch
from agentgate.engine.runner.sampling.sampler import sample
from agentgate.engine.sampling_params import SamplingParams
from agentgate.engine.speculative.verify import emitted_tokens

LOGITS = torch.tensor([2.0, 1.0, 0.5, 1.5, -1.0, 0.0, 0.8, 1.2])
TEMPERATURE = 0.9
DRAFT = 3
SEEDS = range(6000)
CHI2_7_999 = 24.32
CHI2_6_999 = 22.46


def chi_square(counts: list[int], probs: list[float]) -> float:
    total = sum(counts)
    return sum((c - total * p) ** 2 / (total * p) for c, p in zip(counts, probs))


def test_emitted_token_follows_the_target_distribution():
    rows = [
        SamplingRow(SamplingParams(temperature=TEMPERATURE, seed=s), s, frozenset(), [1, 2, 3, 4], 4) for s in SEEDS
    ]
    batch = build_sampling_batch(rows, len(LOGITS), torch.device("cpu"))
    targets = sample(LOGITS.repeat(len(rows), 1), batch).token_ids.tolist()
    # One draft per row: the first emitted token is the accepted draft or the target.
    firsts = [emitted_tokens([DRAFT], [t, 0])[0] for t in targets]
    accepted = [t == DRAFT for t in targets]
    p = torch.softmax(LOGITS / TEMPERATURE, -1).tolist()

    counts = [firsts.count(v) for v in range(len(LOGITS))]
    assert chi_square(counts, p) < CHI2_7_999

    rate, n = sum(accepted) / len(rows), len(rows)
    assert abs(rate - p[DRAFT]) < 4 * math.sqrt(p[DRAFT] * (1 - p[DRAFT]) / n)

    # After a rejection: p without the draft, renormalized.
    rejected = [f for f, a in zip(firsts, accepted) if not a]
    others = [v for v in range(len(LOGITS)) if v != DRAFT]
    rest = [p[v] / (1 - p[DRAFT]) for v in others]
    assert chi_square([rejected.count(v) for v in others], rest) < CHI2_6_999
    # And the same seeds give the same tokens again: reproducible.
    assert sample(LOGITS.repeat(len(rows), 1), batch).token_ids.tolist() == targets
