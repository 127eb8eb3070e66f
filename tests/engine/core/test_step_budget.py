"""The step budget in time (``--max-step-ms``, engine.step_budget): its cost model, fitted to
steps of known costs, and the scheduler's prompt chunks beside decoding rows, with the null runner
(no model)."""

import random

import pytest

from agentgate.engine.config import EngineConfig
from agentgate.engine.core import EngineCore
from agentgate.engine.errors import InvalidRequestError
from agentgate.engine.runner.null import NullRunner
from agentgate.engine.sampling_params import SamplingParams
from agentgate.engine.scheduling.step_budget import OUTLIER_FACTOR, StepBudget, resolve_max_step_ms
from tests.engine.core.test_scheduler import VOCAB, assert_clean, prompt, run_all

COSTS = (10.0, 1.5, 0.4, 8.0)  # fixed, per decode row, per prompt token, with prompt rows


def step_ms(decode_rows: int, prompt_tokens: int, costs=COSTS) -> float:
    fixed, per_row, per_token, prompt_fixed = costs
    return fixed + per_row * decode_rows + per_token * prompt_tokens + (prompt_fixed if prompt_tokens else 0.0)


def shapes(rng: random.Random, n: int) -> list[tuple[int, int]]:
    """Steps as an engine runs them: decodes alone, prompts alone, and both."""
    out = []
    for _ in range(n):
        kind = rng.randrange(3)
        rows = 0 if kind == 1 else rng.randrange(1, 33)
        tokens = 0 if kind == 0 else 16 * rng.randrange(1, 65)
        out.append((rows, tokens))
    return out


def fitted(costs=COSTS, n=200, seed=0) -> StepBudget:
    budget = StepBudget(60.0, 16)
    for rows, tokens in shapes(random.Random(seed), n):
        budget.observe(rows, tokens, step_ms(rows, tokens, costs))
    return budget


def test_auto_is_a_cpu_budget_for_a_model_and_off_elsewhere():
    assert resolve_max_step_ms("auto", "cpu", runs_model=True) == 60.0
    assert resolve_max_step_ms("auto", "cuda", runs_model=True) is None
    assert resolve_max_step_ms("auto", "cpu", runs_model=False) is None  # the null runner
    assert resolve_max_step_ms("off", "cpu", runs_model=True) is None
    assert resolve_max_step_ms("0", "cpu", runs_model=True) is None
    assert resolve_max_step_ms("45", "cuda", runs_model=False) == 45.0  # a number is taken anywhere
    for bad in ("fast", "-1", "inf", "nan"):
        with pytest.raises(InvalidRequestError, match="max_step_ms"):
            EngineConfig(max_step_ms=bad)


def test_the_fit_recovers_the_costs_of_the_steps_it_saw():
    budget = fitted()
    assert budget.costs == pytest.approx(COSTS, rel=0.02)
    assert budget.predict_ms(12, 48) == pytest.approx(step_ms(12, 48), rel=0.01)
    assert budget.num_observed == 200


def test_the_fit_follows_a_change_and_one_slow_step_moves_it_a_bounded_amount():
    budget = fitted()
    slower = tuple(2 * c for c in COSTS)  # half the threads
    for rows, tokens in shapes(random.Random(1), 150):
        budget.observe(rows, tokens, step_ms(rows, tokens, slower))
    assert budget.predict_ms(12, 48) == pytest.approx(step_ms(12, 48, slower), rel=0.05)
    before = budget.predict_ms(12, 48)
    budget.observe(12, 48, 100 * before)  # a first-time kernel set-up, a neighbour's burst
    assert budget.predict_ms(12, 48) < OUTLIER_FACTOR * before


def test_prompt_tokens_fill_the_budget_in_whole_blocks_and_at_least_one():
    budget = fitted()
    # 60 - (10 + 1.5 * 10 + 8) = 27 ms spare: 67 tokens at 0.4 ms, 64 in blocks of 16.
    assert budget.prompt_tokens(10) == 64
    assert step_ms(10, budget.prompt_tokens(10)) <= 60.0
    assert budget.prompt_tokens(40) == 16  # 70 ms of decodes alone: one block, so the prompt advances
    # Before any step, the prior (20 ms + 2 ms a row + 1 ms a token) bounds the first chunk.
    assert StepBudget(60.0, 16).prompt_tokens(10) == 16
    assert StepBudget(200.0, 16).prompt_tokens(10) == 160


def make_core(max_step_ms: str, *, block_size=4, max_num_batched_tokens=64, **runner) -> EngineCore:
    config = EngineConfig(block_size=block_size, max_num_batched_tokens=max_num_batched_tokens, max_step_ms=max_step_ms)
    return EngineCore(config, NullRunner(num_blocks=2048, block_size=block_size, vocab_size=VOCAB, **runner))


def decoding_core(max_step_ms: str, decoders: int) -> EngineCore:
    """A core whose ``decoders`` requests all decode, and a 200-token prompt waiting."""
    rng = random.Random(0)
    core = make_core(max_step_ms)
    for i in range(decoders):
        core.add_request(f"d{i}", prompt(rng, 3), SamplingParams(max_tokens=50, ignore_eos=True))
    while any(r.num_computed_tokens < r.num_prompt_tokens for r in core.scheduler.requests.values()):
        core.step()
    core.add_request("long", prompt(rng, 200), SamplingParams(max_tokens=4, ignore_eos=True))
    return core


def chunk_of_long(core: EngineCore, budget: StepBudget | None) -> int:
    """The long prompt's chunk in the next step, under ``budget`` (a fresh one: its prior is its costs)."""
    core.scheduler.step_budget = budget
    step = core.scheduler.schedule()
    return next(row.num_tokens for row in step.scheduled if row.request_id == "long")


def test_a_step_that_decodes_takes_what_fits_beside_its_decodes_and_one_that_does_not_takes_all():
    costs = (20.0, 2.0, 1.0, 0.0)
    # 10 decodes: 60 - (20 + 2 * 10) = 20 ms spare, 20 tokens at 1 ms; without a budget, 64 - 10.
    assert chunk_of_long(decoding_core("60", 10), StepBudget(60.0, 4, prior=costs)) == 20
    assert chunk_of_long(decoding_core("off", 10), None) == 54
    # 25 decodes: nothing fits; one block, so the prompt advances.
    assert chunk_of_long(decoding_core("60", 25), StepBudget(60.0, 4, prior=costs)) == 4
    # Nothing decodes: the whole token budget.
    assert chunk_of_long(decoding_core("60", 0), StepBudget(60.0, 4, prior=costs)) == 64


def test_slices_change_no_token_and_every_prompt_completes():
    rng = random.Random(5)
    specs = [
        (prompt(rng, rng.randrange(1, 150)), SamplingParams(temperature=0, max_tokens=rng.randrange(1, 30)))
        for _ in range(24)
    ]
    results, steps = {}, {}
    for max_step_ms in ("off", "0.001"):  # 0.001 ms: every step with decodes takes one block of prompt
        core = make_core(max_step_ms)
        for i, (p, params) in enumerate(specs):
            core.add_request(f"r{i}", p, params)
        results[max_step_ms] = run_all(core)
        steps[max_step_ms] = core.runner.num_steps
        assert_clean(core)
    assert results["0.001"] == results["off"] and len(results["off"]) == len(specs)
    assert steps["0.001"] > steps["off"]  # the prompts went in slices


@pytest.mark.parametrize("in_flight", [1, 2])
def test_the_core_times_each_step_and_the_budget_learns_it(in_flight):
    core = make_core("60", max_steps_in_flight=in_flight, step_seconds=0.01)
    rng = random.Random(6)
    for i in range(4):
        core.add_request(f"r{i}", prompt(rng, 10), SamplingParams(max_tokens=12, ignore_eos=True))
    steps = 0
    while core.has_work:
        core.step()
        steps += 1
    budget = core.scheduler.step_budget
    assert budget.num_observed >= steps - 1
    # Each step sleeps 10 ms: the fit comes down from its prior (28 ms for 4 decode rows).
    assert 9.0 < budget.predict_ms(4, 0) < 20.0
