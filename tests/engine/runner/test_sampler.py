"""The sync-free sampler: processing order, seeded reproducibility, statistics."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

import pytest
import torch

from agentgate.engine.runner.sampling import noise, sampler
from agentgate.engine.runner.sampling.batch import SamplingFlags
from agentgate.engine.runner.sampling.sampler import SamplingBatch, sample
from agentgate.engine.sampling_params import SamplingParams

_M64 = (1 << 64) - 1


# ---------------------------------------------------------------- batch building


def make_batch(
    params: list[SamplingParams],
    vocab_size: int,
    *,
    positions: list[int] | None = None,
    prompts: list[list[int]] | None = None,
    outputs: list[list[int]] | None = None,
    suppressed: list[list[int]] | None = None,
    allowed: list[set[int] | None] | None = None,
    bitmask_vocab: int | None = None,
    flags_all_on: bool = False,
) -> SamplingBatch:
    """A SamplingBatch from per-row params, as an engine would build it
    (host flags derived from the params, never from tensors)."""
    n = len(params)
    positions = positions if positions is not None else [0] * n
    prompts = prompts or [[] for _ in range(n)]
    outputs = outputs or [[] for _ in range(n)]
    f32, i64 = torch.float32, torch.int64

    any_penalties = flags_all_on or any(
        p.presence_penalty != 0 or p.frequency_penalty != 0 or p.repetition_penalty != 1 for p in params
    )
    counts = prompt_mask = None
    if any_penalties:
        counts = torch.zeros(n, vocab_size, dtype=torch.int32)
        prompt_mask = torch.zeros(n, vocab_size, dtype=torch.bool)
        for i in range(n):
            for t in outputs[i]:
                counts[i, t] += 1
            for t in prompts[i]:
                prompt_mask[i, t] = True

    bias_ids = bias_values = None
    if any(p.logit_bias for p in params):
        width = max(len(p.logit_bias or {}) for p in params)
        bias_ids = torch.full((n, width), -1, dtype=i64)
        bias_values = torch.zeros(n, width, dtype=f32)
        for i, p in enumerate(params):
            for j, (t, b) in enumerate((p.logit_bias or {}).items()):
                bias_ids[i, j], bias_values[i, j] = t, b

    suppressed_ids = None
    if suppressed is not None:
        width = max(1, max(len(s) for s in suppressed))
        suppressed_ids = torch.full((n, width), -1, dtype=i64)
        for i, s in enumerate(suppressed):
            suppressed_ids[i, : len(s)] = torch.tensor(s, dtype=i64)

    bitmask = None
    if allowed is not None:
        covered = bitmask_vocab or vocab_size
        bitmask = torch.full((n, (covered + 31) // 32), -1, dtype=torch.int32)
        for i, a in enumerate(allowed):
            if a is not None:
                bitmask[i] = pack_bitmask(a, covered)

    wanted = [p.logprobs for p in params if p.logprobs is not None]
    flags = SamplingFlags(
        all_greedy=not flags_all_on and all(p.temperature == 0 for p in params),
        any_top_k=flags_all_on or any(p.top_k > 0 for p in params),
        any_top_p=flags_all_on or any(p.top_p < 1 for p in params),
        any_min_p=flags_all_on or any(p.min_p > 0 for p in params),
        any_penalties=any_penalties,
        any_logit_bias=bias_ids is not None,
        any_min_tokens=suppressed_ids is not None,
        max_num_logprobs=max(wanted) if wanted else -1,
    )
    return SamplingBatch(
        flags=flags,
        temperature=torch.tensor([p.temperature for p in params], dtype=f32),
        top_k=torch.tensor([p.top_k for p in params], dtype=torch.int32),
        top_p=torch.tensor([p.top_p for p in params], dtype=f32),
        min_p=torch.tensor([p.min_p for p in params], dtype=f32),
        seed=torch.tensor([p.seed if p.seed is not None else 0 for p in params], dtype=i64),
        position=torch.tensor(positions, dtype=i64),
        presence_penalty=torch.tensor([p.presence_penalty for p in params], dtype=f32),
        frequency_penalty=torch.tensor([p.frequency_penalty for p in params], dtype=f32),
        repetition_penalty=torch.tensor([p.repetition_penalty for p in params], dtype=f32),
        output_counts=counts,
        prompt_mask=prompt_mask,
        logit_bias_ids=bias_ids,
        logit_bias_values=bias_values,
        suppressed_ids=suppressed_ids,
        allowed_bitmask=bitmask,
    )


def pack_bitmask(allowed: set[int], vocab_size: int) -> torch.Tensor:
    words = [0] * ((vocab_size + 31) // 32)
    for t in allowed:
        words[t // 32] |= 1 << (t % 32)
    return torch.tensor([w - (1 << 32) if w >= 1 << 31 else w for w in words], dtype=torch.int32)


# ---------------------------------------------------------------- references


def ref_mix64(z: int) -> int:
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & _M64
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def ref_bits(seed: int, position: int, token: int) -> int:
    """The noise hash on unsigned Python ints (the definition)."""
    gamma = 0x9E3779B97F4A7C15
    key = ref_mix64((seed + ref_mix64(((position + 1) * gamma) & _M64)) & _M64)
    return ref_mix64((key + (token + 1) * gamma) & _M64)


def ref_exponential(seed: int, position: int, token: int) -> float:
    k = ref_bits(seed, position, token) >> (64 - 23)
    return -math.log((k + 0.5) / 2**23)


def ref_process(
    logits: list[float],
    p: SamplingParams,
    prompt: list[int] = (),
    output: list[int] = (),
    suppressed: list[int] = (),
    allowed: set[int] | None = None,
) -> list[float]:
    """Steps 2-6 of the sampler, token by token."""
    out = list(logits)
    for t, b in (p.logit_bias or {}).items():
        out[t] += b
    for t in range(len(out)):
        if allowed is not None and t not in allowed:
            out[t] = -math.inf
    for t in suppressed:
        out[t] = -math.inf
    counts = Counter(output)
    seen = set(prompt) | set(output)
    for t in range(len(out)):
        if t in seen:
            out[t] = out[t] / p.repetition_penalty if out[t] > 0 else out[t] * p.repetition_penalty
        out[t] -= p.frequency_penalty * counts[t] + p.presence_penalty * (counts[t] > 0)
    return out


def ref_support(logits: list[float], p: SamplingParams) -> list[float]:
    """Temperature, min-p, top-k, top-p on processed logits -> final probabilities."""
    z = [x / p.temperature for x in logits]
    m = max(z)
    probs = [math.exp(x - m) for x in z]
    total = sum(probs)
    probs = [q / total for q in probs]
    if p.min_p > 0:
        top = max(probs)
        probs = [q if q >= p.min_p * top else 0.0 for q in probs]
    order = sorted(range(len(probs)), key=lambda t: -probs[t])
    keep = [t for t in order if probs[t] > 0]
    if p.top_k > 0:
        keep = keep[: p.top_k]
    if p.top_p < 1:
        mass = sum(probs[t] for t in keep)
        nucleus, acc = [], 0.0
        for t in keep:
            if acc >= p.top_p * mass:
                break
            nucleus.append(t)
            acc += probs[t]
        keep = nucleus
    kept = set(keep)
    probs = [q if t in kept else 0.0 for t, q in enumerate(probs)]
    total = sum(probs)
    return [q / total for q in probs]


def ref_sample(logits: list[float], p: SamplingParams, position: int, **kw) -> int:
    processed = ref_process(logits, p, **kw)
    if p.temperature == 0:
        return max(range(len(processed)), key=lambda t: processed[t])
    probs = ref_support(processed, p)
    seed = (p.seed or 0) & _M64
    scores = [q / ref_exponential(seed, position, t) for t, q in enumerate(probs)]
    return max(range(len(scores)), key=lambda t: scores[t])


def run(logits: torch.Tensor, batch: SamplingBatch):
    return sample(logits.clone(), batch)


def draws(logits_row: torch.Tensor, p: SamplingParams, n: int, **kw) -> list[int]:
    """n draws of one distribution: the row repeated with seeds 0..n-1 at
    various positions (``kw`` holds make_batch's one-row extras)."""
    one = make_batch([p], logits_row.shape[0], **kw)
    index = torch.zeros(n, dtype=torch.int64)
    fields = {
        f.name: getattr(one, f.name)[index] if isinstance(getattr(one, f.name), torch.Tensor) else getattr(one, f.name)
        for f in dataclasses.fields(one)
    }
    fields["seed"] = torch.arange(n, dtype=torch.int64)
    fields["position"] = (7 * torch.arange(n, dtype=torch.int64)) % 1000
    batch = SamplingBatch(**fields)
    return run(logits_row.expand(n, -1).contiguous(), batch).token_ids.tolist()


def chi_square(observed: Counter, probs: list[float], n: int) -> float:
    return sum((observed[t] - n * q) ** 2 / (n * q) for t, q in enumerate(probs) if q > 0)


# chi-square quantiles with P(X > q) = 1e-6, by degrees of freedom
CHI2_1E6 = {2: 28, 3: 31, 4: 34, 5: 36, 7: 41}


# ---------------------------------------------------------------- the noise


def test_noise_matches_plain_python_definition():
    seeds = [0, 1, 12345, -1, -(2**63), 2**63 - 1, 0x5DEECE66D]
    positions = [0, 1, 17, 4095, 2**40, 3, 99]
    keys = noise.row_keys(torch.tensor(seeds), torch.tensor(positions))
    bits = noise.random_bits(keys, noise.token_offsets(40, "cpu"))
    expo = noise.exponential(keys, noise.token_offsets(40, "cpu"))
    for i, (s, pos) in enumerate(zip(seeds, positions)):
        for t in range(40):
            want = ref_bits(s & _M64, pos, t)
            assert bits[i, t].item() & _M64 == want
            assert expo[i, t].item() == pytest.approx(ref_exponential(s & _M64, pos, t), rel=1e-6)
    assert bool((expo > 0).all()) and bool(torch.isfinite(expo).all())


@pytest.mark.parametrize("kept", [0.001, 0.05, 0.2, 0.6, 1.0])
def test_the_race_over_the_tokens_left_picks_what_the_whole_vocabularys_race_picks(kept):
    """`sampler._race` draws noise only for tokens of nonzero probability when they are few; its
    noise has the bits of the whole [N, V] noise at those tokens, and every row the same winner,
    whatever share of the vocabulary is left (both paths: under and over a quarter)."""
    generator = torch.Generator().manual_seed(int(kept * 1000))
    rows, vocab = 40, 49152
    logits = torch.randn(rows, vocab, generator=generator) * 3
    logits[torch.rand(rows, vocab, generator=generator) > kept] = float("-inf")
    logits[torch.arange(rows), torch.randint(0, vocab, (rows,), generator=generator)] = 0.0  # one left, at least
    keys = noise.row_keys(torch.randint(-(2**62), 2**62, (rows,), generator=generator), torch.arange(rows) * 7)
    tables = sampler._vocab_tables(vocab, torch.device("cpu"))
    probs = torch.softmax(logits, dim=-1)
    whole_noise = noise.exponential(keys, tables.offsets)
    expected = (probs / whole_noise).argmax(dim=-1)
    assert torch.equal(sampler._race(probs.clone(), keys, tables), expected)
    left_rows, left_tokens = probs.nonzero(as_tuple=True)
    at = noise.exponential_at(keys, tables.offsets, left_rows, left_tokens)
    assert torch.equal(at, whole_noise[left_rows, left_tokens])


# ---------------------------------------------------------------- greedy


def test_greedy_is_argmax():
    torch.manual_seed(0)
    logits = torch.randn(16, 300)
    batch = make_batch([SamplingParams(temperature=0.0)] * 16, 300)
    out = run(logits, batch)
    assert out.token_ids.dtype == torch.int64
    assert torch.equal(out.token_ids, logits.argmax(-1))
    assert out.logprobs is None and out.top_token_ids is None and out.top_logprobs is None


def test_greedy_with_penalties_bias_and_constraints_matches_reference():
    gen = torch.Generator().manual_seed(1)
    n, v = 64, 40
    logits = torch.randn(n, v, generator=gen) * 3
    rng = torch.Generator().manual_seed(2)

    def pick(k, hi=v):
        return torch.randint(0, hi, (k,), generator=rng).tolist()

    params, prompts, outputs, suppressed, allowed = [], [], [], [], []
    for i in range(n):
        u = torch.rand(4, generator=rng).tolist()
        params.append(
            SamplingParams(
                temperature=0.0,
                repetition_penalty=[1.0, 1.3, 0.7, 2.0][i % 4],
                frequency_penalty=round(4 * u[0] - 2, 3),
                presence_penalty=round(4 * u[1] - 2, 3),
                logit_bias={t: round(20 * u[2] - 10, 2) for t in pick(i % 3)} or None,
            )
        )
        prompts.append(pick(5))
        outputs.append(pick(i % 9))
        suppressed.append(pick(i % 3))
        allowed.append(set(pick(25)) if i % 5 == 0 else None)
    batch = make_batch(params, v, prompts=prompts, outputs=outputs, suppressed=suppressed, allowed=allowed)
    got = run(logits, batch).token_ids.tolist()
    changed = 0
    for i in range(n):
        row = ref_process(logits[i].tolist(), params[i], prompts[i], outputs[i], suppressed[i], allowed[i])
        assert got[i] == max(range(v), key=lambda t: row[t]), i
        changed += got[i] != int(logits[i].argmax())
    assert changed > n // 4  # the processing really mattered


def test_a_redirected_row_emits_its_target_for_the_tokens_it_names():
    """An end-of-turn inside a thinking block becomes the block's end (engine.structured.thinking): only
    in the rows that ask, only for the tokens they name; every other row keeps what it sampled."""
    torch.manual_seed(1)
    logits = torch.randn(4, 300)
    best = logits.argmax(-1)
    batch = make_batch([SamplingParams(temperature=0.0)] * 4, 300)
    batch.redirect_from = torch.tensor([[best[0].item(), -1], [7, -1], [-1, -1], [best[3].item(), 5]])
    batch.redirect_to = torch.tensor([42, 43, -1, -1])  # row 1 names another token; rows 2 and 3 redirect nothing
    out = run(logits, batch)
    assert out.token_ids.tolist() == [42, *best[1:].tolist()]


def test_a_budget_narrowed_row_says_whether_the_narrowing_removed_its_best_token(monkeypatch):
    """Issue 48: a forced-call budget narrows a grammar's mask near its end. The sampler takes the
    same tokens as under the narrowed mask alone, and says per row whether the best token under the
    grammar's own mask is one the narrowing removed: only then did the budget change the reply."""
    v = 96
    torch.manual_seed(11)
    logits = torch.randn(6, v)
    best = logits.argmax(-1).tolist()
    others = [sorted(set(range(v)) - {b})[:5] for b in best]
    own = [set(range(v))] * 6
    narrowed = [
        set(others[0]),  # the best removed
        {best[1], *others[1]},  # the best kept: the narrowing changed nothing
        set(range(v)),  # not narrowed
        set(others[3]),  # sampled rows: the best removed, and kept
        {best[4], *others[4]},
        {best[5]},  # only the best left
    ]
    params = [SamplingParams(temperature=0.0)] * 3 + [SamplingParams(temperature=1.0, seed=s) for s in range(3)]
    batch = make_batch(params, v, allowed=narrowed, positions=list(range(6)))
    plain = run(logits, batch)
    assert plain.overridden is None  # no unnarrowed mask: nothing to say
    batch.unnarrowed_bitmask = make_batch(params, v, allowed=own).allowed_bitmask
    out = run(logits, batch)
    assert out.overridden.tolist() == [True, False, False, True, False, False]
    assert torch.equal(out.token_ids, plain.token_ids)  # the same tokens as under the narrowed mask alone
    assert all(token in narrowed[row] for row, token in enumerate(out.token_ids.tolist()))
    monkeypatch.setattr(sampler, "MAX_CHUNK_ELEMENTS", 2 * v)  # several chunks
    chunked = run(logits, batch)
    assert torch.equal(chunked.overridden, out.overridden) and torch.equal(chunked.token_ids, out.token_ids)


def test_repetition_penalty_semantics():
    # seen tokens: positive logits divided, negative multiplied; unseen untouched
    logits = torch.tensor([[2.0, 1.5, -0.5, -0.9, 0.0]])
    p = SamplingParams(temperature=0.0, repetition_penalty=2.0)
    batch = make_batch([p], 5, prompts=[[0]], outputs=[[2]])
    assert run(logits, batch).token_ids.tolist() == [1]  # 2.0 -> 1.0 < 1.5
    logits = torch.tensor([[-0.6, -1.0, -0.5, -0.9]])
    batch = make_batch([p], 4, outputs=[[2]])
    assert run(logits, batch).token_ids.tolist() == [0]  # -0.5 -> -1.0


def test_frequency_and_presence_penalties_semantics():
    logits = torch.tensor([[3.0, 2.5, 2.0]])
    # token 0 generated 3 times: frequency 0.2 -> 2.4 < 2.5
    batch = make_batch([SamplingParams(temperature=0.0, frequency_penalty=0.2)], 3, outputs=[[0, 0, 0]])
    assert run(logits, batch).token_ids.tolist() == [1]
    # presence counts once: 3.0 - 0.4 = 2.6 > 2.5
    batch = make_batch([SamplingParams(temperature=0.0, presence_penalty=0.4)], 3, outputs=[[0, 0, 0]])
    assert run(logits, batch).token_ids.tolist() == [0]
    # negative penalties encourage repetition
    batch = make_batch([SamplingParams(temperature=0.0, presence_penalty=-1.5)], 3, outputs=[[2]])
    assert run(logits, batch).token_ids.tolist() == [2]
    # prompt tokens do not count for frequency/presence
    batch = make_batch([SamplingParams(temperature=0.0, presence_penalty=2.0)], 3, prompts=[[0]], outputs=[[1]])
    assert run(logits, batch).token_ids.tolist() == [0]


# ---------------------------------------------------------------- seeded sampling


def _feature_rows(v: int):
    """Rows exercising every feature, with their batch extras."""
    params = [
        SamplingParams(temperature=0.8, seed=11),
        SamplingParams(temperature=1.3, top_k=7, seed=-3, logprobs=3),
        SamplingParams(temperature=0.0, repetition_penalty=1.5),
        SamplingParams(temperature=1.0, top_p=0.6, min_p=0.05, seed=2**62 + 5),
        SamplingParams(
            temperature=0.7, presence_penalty=0.5, frequency_penalty=0.3, seed=99, logit_bias={3: 5.0, 4: -100.0}
        ),
        SamplingParams(temperature=1.0, repetition_penalty=1.2, top_k=20, top_p=0.9, seed=7, logprobs=0),
        SamplingParams(temperature=1.0, seed=123456789),
    ]
    extras = dict(
        positions=[5, 900, 13, 1, 77, 4000, 2],
        prompts=[[1, 2], [3], [4, 5, 6], [], [7], [8, 9], [1]],
        outputs=[[], [1, 1], [2], [3, 3, 3], [4, 10], [0], []],
        suppressed=[[0, 1], [], [2], [], [5, 6, 7], [], [9]],
        allowed=[None, None, set(range(0, v, 3)), None, None, set(range(10, 60)), None],
    )
    return params, extras


def _subset(params, extras, idx):
    return [params[i] for i in idx], {k: [val[i] for i in idx] for k, val in extras.items()}


def test_seeded_rows_do_not_depend_on_batch_or_row_index(monkeypatch):
    v = 64
    torch.manual_seed(3)
    logits = torch.randn(7, v) * 2
    params, extras = _feature_rows(v)
    full = run(logits, make_batch(params, v, **extras))
    alone = []
    for i in range(7):
        p, e = _subset(params, extras, [i])
        alone.append(run(logits[i : i + 1], make_batch(p, v, **e)).token_ids.item())
    assert full.token_ids.tolist() == alone
    # reversed order, everything flagged on, and one row per chunk
    order = list(reversed(range(7)))
    p, e = _subset(params, extras, order)
    monkeypatch.setattr(sampler, "MAX_CHUNK_ELEMENTS", v)
    rev = run(logits[order], make_batch(p, v, flags_all_on=True, **e))
    assert rev.token_ids.tolist() == [alone[i] for i in order]
    for i in (1, 5):
        j = order.index(i)
        assert rev.logprobs[j].item() == full.logprobs[i].item()
    assert torch.equal(rev.top_token_ids[order.index(1)], full.top_token_ids[1])


def test_seeded_rows_match_reference_sampler():
    v = 48
    gen = torch.Generator().manual_seed(4)
    params, extras = _feature_rows(v)
    logits = torch.randn(7, v, generator=gen) * 2
    got = run(logits, make_batch(params, v, **extras)).token_ids.tolist()
    for i, p in enumerate(params):
        kw = {k: extras[k][i] for k in ("prompts", "outputs", "suppressed", "allowed")}
        want = ref_sample(
            logits[i].tolist(),
            p,
            extras["positions"][i],
            prompt=kw["prompts"],
            output=kw["outputs"],
            suppressed=kw["suppressed"],
            allowed=kw["allowed"],
        )
        assert got[i] == want, i


def test_different_seeds_or_positions_give_different_draws():
    v = 1000
    logits = torch.zeros(1, v)
    by_seed = draws(logits[0], SamplingParams(temperature=1.0), 200)
    assert len(set(by_seed)) > 150
    params = [SamplingParams(temperature=1.0, seed=42)] * 200
    out = run(logits.expand(200, -1), make_batch(params, v, positions=list(range(200))))
    assert len(set(out.token_ids.tolist())) > 150
    # and the same (seed, position) again gives the same token
    again = run(logits.expand(200, -1), make_batch(params, v, positions=list(range(200))))
    assert torch.equal(out.token_ids, again.token_ids)


def test_empirical_frequencies_match_softmax():
    logits = torch.tensor([1.0, 0.5, 0.0, -0.5, 2.0, -1.0, 0.25, -2.0])
    probs = torch.softmax(logits.double(), -1).tolist()
    n = 40000
    got = Counter(draws(logits, SamplingParams(temperature=1.0), n))
    assert chi_square(got, probs, n) < CHI2_1E6[7]
    # temperature 2 flattens it
    probs2 = torch.softmax(logits.double() / 2, -1).tolist()
    got2 = Counter(draws(logits, SamplingParams(temperature=2.0), n))
    assert chi_square(got2, probs2, n) < CHI2_1E6[7]


PROBS8 = [0.35, 0.25, 0.15, 0.10, 0.08, 0.04, 0.02, 0.01]


@pytest.mark.parametrize(
    "kwargs, support",
    [
        (dict(top_k=3), {0, 1, 2}),
        (dict(top_p=0.7), {0, 1, 2}),
        (dict(top_p=0.3), {0}),
        (dict(min_p=0.25), {0, 1, 2, 3}),
        (dict(top_k=5, top_p=0.8), {0, 1, 2}),
        (dict(min_p=0.1, top_k=6, top_p=0.95), {0, 1, 2, 3, 4}),
        (dict(top_k=-1, top_p=1.0), set(range(8))),
    ],
)
def test_truncation_keeps_exactly_the_right_support(kwargs, support):
    logits = torch.tensor(PROBS8).log()
    p = SamplingParams(temperature=1.0, **kwargs)
    want = ref_support(logits.tolist(), p)
    assert {t for t, q in enumerate(want) if q > 0} == support
    n = 20000
    got = Counter(draws(logits, p, n))
    assert set(got) == support
    if len(support) > 1:
        assert chi_square(got, want, n) < CHI2_1E6.get(len(support) - 1, 41)


def test_truncation_keeps_at_least_one_token_and_ties():
    # the strictest settings keep the top token; values tied at the cut are all
    # kept, so the result cannot depend on how the sort ordered the ties
    logits = torch.tensor([[1.0, 3.0, 3.0, 0.0], [0.5, 0.5, 0.5, 0.5]])
    seen = [set(), set()]
    for s in range(60):
        params = [SamplingParams(temperature=1.0, top_k=1, top_p=0.01, min_p=1.0, seed=s)] * 2
        out = run(logits, make_batch(params, 4, positions=[s, s])).token_ids.tolist()
        seen[0].add(out[0])
        seen[1].add(out[1])
    assert seen == [{1, 2}, {0, 1, 2, 3}]


def test_cpu_top_candidates_keep_what_the_whole_sort_keeps(monkeypatch):
    # Rows peaked (nucleus within the 256 candidates) and flat (nucleus far past them), top-k
    # below, above and outside the vocabulary, top-p off and on: the candidates' shortcut masks
    # exactly what sorting every row whole masks, and the flat rows took the whole sort.
    v = 4096
    torch.manual_seed(11)
    scales = [8.0, 3.0, 1.0, 0.05, 0.01]
    logits = torch.cat([torch.randn(12, v) * scale for scale in scales])
    rows = logits.shape[0]
    top_k = torch.tensor([[0, 5, 256, 300, 5000, -1][i % 6] for i in range(rows)])
    top_p = torch.tensor([[1.0, 0.5, 0.9, 0.99][i % 4] for i in range(rows)])
    tables = sampler._vocab_tables(v, logits.device)
    sorted_rows = []
    whole_sort = sampler._apply_top_k_top_p_sorted_

    def counting(rows_logits, *args):
        sorted_rows.append(rows_logits.shape[0])
        whole_sort(rows_logits, *args)

    for k, p in ((top_k, top_p), (None, top_p), (top_k, None)):
        expected = logits.clone()
        whole_sort(expected, k, p, tables)
        monkeypatch.setattr(sampler, "_apply_top_k_top_p_sorted_", counting)
        got = logits.clone()
        sampler._apply_top_k_top_p_(got, k, p, tables)
        monkeypatch.undo()
        assert torch.equal(got.isinf(), expected.isinf()), (k is None, p is None)
    assert 0 < sum(sorted_rows) < 3 * rows  # some rows went past their candidates, most did not


# ---------------------------------------------------------------- bias, suppression, bitmask


def test_logit_bias_bans_and_forces():
    logits = torch.tensor([4.0, 3.0, 2.0, 1.0, 0.0, -1.0])
    banned = draws(logits, SamplingParams(temperature=1.0, logit_bias={0: -100.0}), 3000)
    assert 0 not in banned and len(set(banned)) >= 4
    forced = draws(logits, SamplingParams(temperature=1.0, logit_bias={5: 100.0}, top_k=3), 3000)
    assert set(forced) == {5}
    greedy = run(logits[None], make_batch([SamplingParams(temperature=0.0, logit_bias={2: 2.5})], 6))
    assert greedy.token_ids.tolist() == [2]


def test_suppressed_ids_never_sampled_and_padding_is_inert():
    logits = torch.tensor([5.0, 4.0, 3.0, 0.0])
    got = draws(logits, SamplingParams(temperature=1.0), 2000, suppressed=[[0, 1]])
    assert set(got) == {2, 3}
    # row 0 pads with -1 (which clamps onto token 0); row 1 really suppresses 0
    params = [SamplingParams(temperature=0.0)] * 2
    batch = make_batch(params, 4, suppressed=[[2], [2, 0]])
    assert run(torch.stack([logits, logits]), batch).token_ids.tolist() == [0, 1]


def test_bitmask_only_allowed_ids_and_unconstrained_rows_unaffected():
    v = 100
    allowed = {3, 31, 32, 63, 64, 99}  # word edges, incl. bit 31 (the sign bit)
    torch.manual_seed(5)
    logits = torch.randn(v)
    got = draws(logits, SamplingParams(temperature=1.0), 3000, allowed=[allowed])
    assert set(got) == allowed
    # mixed batch: constrained rows obey, unconstrained rows match the no-mask run
    n = 50
    params = [SamplingParams(temperature=1.0, seed=s) for s in range(n)]
    masks = [allowed if s % 2 else None for s in range(n)]
    rows = logits.expand(n, -1)
    with_mask = run(rows, make_batch(params, v, allowed=masks)).token_ids.tolist()
    without = run(rows, make_batch(params, v)).token_ids.tolist()
    for s in range(n):
        if s % 2:
            assert with_mask[s] in allowed
        else:
            assert with_mask[s] == without[s]
    # greedy under a mask
    batch = make_batch([SamplingParams(temperature=0.0)], v, allowed=[{7}])
    assert run(logits[None], batch).token_ids.tolist() == [7]


def test_bitmask_narrower_than_padded_vocab():
    # tokenizer vocab 64, model logits 70: tokens 64..69 only in unconstrained rows
    v = 70
    logits = torch.zeros(2, v)
    logits[:, 64:] = 10.0
    params = [SamplingParams(temperature=0.0)] * 2
    batch = make_batch(params, v, allowed=[{5, 40}, None], bitmask_vocab=64)
    assert batch.allowed_bitmask.shape == (2, 2)
    out = run(logits, batch).token_ids.tolist()
    assert out[0] in (5, 40) and out[1] >= 64


# ---------------------------------------------------------------- logprobs


def test_logprobs_are_raw_and_sorted():
    torch.manual_seed(6)
    v = 50
    logits = torch.randn(4, v)
    params = [
        SamplingParams(temperature=1.0, seed=1, logprobs=5, logit_bias={0: 50.0}),
        SamplingParams(temperature=0.0, logprobs=0, repetition_penalty=2.0),
        SamplingParams(temperature=0.5, seed=2, top_k=3),
        SamplingParams(temperature=1.0, seed=3, logprobs=2),
    ]
    batch = make_batch(params, v, outputs=[[], [1, 2], [], []])
    assert batch.flags.max_num_logprobs == 5
    out = run(logits, batch)
    raw = torch.log_softmax(logits, -1)
    assert out.token_ids[0].item() == 0  # the bias acted on sampling...
    assert torch.allclose(out.logprobs, raw.gather(1, out.token_ids[:, None]).squeeze(1))  # ...not on logprobs
    assert out.top_token_ids.shape == (4, 5) and out.top_token_ids.dtype == torch.int64
    assert out.top_logprobs.dtype == torch.float32 and out.logprobs.dtype == torch.float32
    assert torch.equal(out.top_token_ids, raw.argsort(-1, descending=True)[:, :5])
    assert torch.allclose(out.top_logprobs, raw.gather(1, out.top_token_ids))
    assert bool((out.top_logprobs[:, :-1] >= out.top_logprobs[:, 1:]).all())


def test_logprobs_only_sampled_token():
    logits = torch.randn(3, 20)
    batch = make_batch([SamplingParams(temperature=1.0, seed=s, logprobs=0) for s in range(3)], 20)
    out = run(logits, batch)
    assert out.logprobs.shape == (3,) and out.top_token_ids is None and out.top_logprobs is None


# ---------------------------------------------------------------- sync-freedom


def test_no_host_sync_with_every_feature_on(monkeypatch):
    v = 64
    torch.manual_seed(7)
    logits = torch.randn(7, v)
    params, extras = _feature_rows(v)
    batch = make_batch(params, v, flags_all_on=True, bitmask_vocab=40, **extras)
    expected = run(logits, batch)

    def forbidden(*args, **kwargs):
        raise AssertionError("host sync in the sampler")

    for name in ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__"):
        monkeypatch.setattr(torch.Tensor, name, forbidden)
    monkeypatch.setattr(sampler, "MAX_CHUNK_ELEMENTS", 3 * v)  # several chunks too
    out = sample(logits.clone(), batch)
    monkeypatch.undo()
    assert torch.equal(out.token_ids, expected.token_ids)
    assert torch.equal(out.top_token_ids, expected.top_token_ids)


def test_chunking_does_not_change_results(monkeypatch):
    v = 200
    torch.manual_seed(8)
    logits = torch.randn(30, v)
    params = [
        SamplingParams(temperature=[0.0, 0.7, 1.0][s % 3], top_k=s % 7, top_p=[1.0, 0.8][s % 2], seed=s, logprobs=2)
        for s in range(30)
    ]
    batch = make_batch(params, v, positions=list(range(30)))
    whole = run(logits, batch)
    monkeypatch.setattr(sampler, "MAX_CHUNK_ELEMENTS", 4 * v)
    chunked = run(logits, batch)
    assert torch.equal(whole.token_ids, chunked.token_ids)
    assert torch.equal(whole.logprobs, chunked.logprobs)
    assert torch.equal(whole.top_token_ids, chunked.top_token_ids)
