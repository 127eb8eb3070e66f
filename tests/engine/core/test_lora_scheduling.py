"""At most ``--max-loras`` distinct LoRA adapters in a step (engine.scheduling.adapter_slots), on the
null runner with adapters that are names alone (the scheduler reads only their uid): the oldest
requests' adapters run, the others wait (running ones held, not preempted), base-model requests are
never held, the engine always drains, and held steps are counted."""

from __future__ import annotations

import pytest

from agentgate.engine.core import EngineCore
from agentgate.engine.lora.adapter import LoraAdapter
from agentgate.engine.sampling_params import SamplingParams
from tests.engine.core.test_scheduler import alone, assert_clean, make_core, run_all

PARAMS = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)


def lora_core(max_loras: int, **options) -> EngineCore:
    """A null-runner core whose requests name adapters ``a``, ``b``, ... (stand-ins: no weights)."""
    core = make_core(**options)
    adapters = {name: LoraAdapter(name, "", 1, 1.0, {}, uid=f"{name}#1") for name in "abcdef"}
    core.lora_adapter = lambda name: adapters[name] if name else None
    core.scheduler.adapters.max_loras = max_loras
    return core


def record_steps(core: EngineCore) -> list[list[str]]:
    """The request ids of every step the scheduler makes from now on."""
    steps: list[list[str]] = []
    schedule = core.scheduler.schedule

    def recording():
        out = schedule()
        if out.scheduled:
            steps.append([row.request_id for row in out.scheduled])
        return out

    core.scheduler.schedule = recording
    return steps


def adapter_of(request_id: str) -> str:
    """Request ids in these tests are ``<adapter><n>``, ``x<n>`` for the base model."""
    return "" if request_id.startswith("x") else request_id[0]


@pytest.mark.parametrize("max_loras", [1, 2])
def test_a_step_holds_at_most_max_loras_adapters_oldest_first_and_drains(max_loras):
    core = lora_core(max_loras)
    steps = record_steps(core)
    order = ["a1", "b1", "c1", "x1", "a2", "d1", "b2", "x2", "c2"]
    for i, request_id in enumerate(order):
        core.add_request(request_id, [5 + i, 6, 7], PARAMS, arrival_time=float(i), lora=adapter_of(request_id))
    results = run_all(core)
    assert set(results) == set(order)
    for request_id in order:
        assert results[request_id] == alone([5 + order.index(request_id), 6, 7], PARAMS)
    for step in steps:
        assert len({adapter_of(r) for r in step} - {""}) <= max_loras, step
    # The oldest requests' adapters run first: a (and b with two), then the next by arrival.
    assert {adapter_of(r) for r in steps[0]} - {""} == set("ab"[:max_loras])
    started = {r: next(i for i, step in enumerate(steps) if r in step) for r in order}
    assert started["a2"] == 0 and started["c1"] > 0 and started["d1"] >= started["c1"]
    # Base-model requests are never held: admitted at once past the held ones, in every step to their end.
    for base in ("x1", "x2"):
        assert started[base] == 0
        assert all(base in step for step in steps[: PARAMS.max_tokens])
    assert core.stats().num_lora_held_steps > 0 and core.scheduler.num_preemptions == 0
    assert_clean(core)


def test_a_running_request_is_held_not_preempted_while_an_older_adapter_runs():
    core = lora_core(1)
    steps = record_steps(core)
    longer = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    core.add_request("b1", [5, 6, 7], longer, arrival_time=10.0, lora="b")
    [first] = core.step()
    core.add_request("a1", [8, 9], PARAMS, arrival_time=5.0, lora="a")  # older, as a preempted turn is
    results = run_all(core)
    results["b1"] = (first.new_token_ids + results["b1"][0], results["b1"][1])
    with_a = [step for step in steps if "a1" in step]
    assert len(with_a) == PARAMS.max_tokens and all("b1" not in step for step in with_a)  # b1 waits a1's steps
    assert steps[0] == ["b1"] and steps[-1] == ["b1"] and core.scheduler.num_preemptions == 0
    assert results["b1"] == alone([5, 6, 7], longer)
    assert core.stats().num_lora_held_steps == len(with_a)
    assert_clean(core)


def test_a_step_that_holding_would_leave_empty_runs_what_runs():
    """The oldest request (a1) waits for memory that the held b1 keeps: the step would be empty,
    so b1 runs; once it ends, a1 is admitted."""
    core = lora_core(1, num_blocks=14)
    steps = record_steps(core)
    core.add_request("b1", list(range(3, 43)), SamplingParams(temperature=0, max_tokens=8, ignore_eos=True), lora="b")
    core.step()  # b1 runs, holding 10 of the 14 blocks
    core.add_request("a1", list(range(50, 74)), PARAMS, arrival_time=0.0, lora="a")  # 6 blocks, the oldest
    results = run_all(core, max_steps=200)
    assert set(results) == {"a1", "b1"}
    assert [step for step in steps if "a1" in step] == steps[-PARAMS.max_tokens :]
    assert_clean(core)


def test_an_overdue_head_whose_adapter_waits_is_admitted_when_nothing_runs():
    """c1 heads the queue and is overdue; the older d1 behind it wins the plan (oldest first) but
    may not pass an overdue head: the empty step is planned again from the head."""
    core = lora_core(1)
    core.add_request("c1", [5, 6, 7], PARAMS, arrival_time=10.0, lora="c")
    core.add_request("d1", [8, 9], PARAMS, arrival_time=5.0, lora="d")
    core.scheduler.requests["c1"].passed_since = core.scheduler.waiting.clock() - 1e6
    steps = record_steps(core)
    results = run_all(core, max_steps=200)
    assert set(results) == {"c1", "d1"} and steps[0] == ["c1"]
    assert_clean(core)


def test_an_overdue_head_whose_adapter_is_not_kept_waits_for_the_older_requests_alone():
    """The bound of docs/lora.md: c1 is overdue and heads the queue, but the older a1 (running) keeps
    the one adapter slot. Nothing is admitted past c1 meanwhile, the base-model x1 neither (the wait
    bound: nothing passes an overdue head); c1 starts in the step after a1's last one, x1 beside it."""
    core = lora_core(1)
    steps = record_steps(core)
    longer = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    core.add_request("a1", [5, 6, 7], longer, arrival_time=0.0, lora="a")
    core.step()
    core.add_request("c1", [8, 9], PARAMS, arrival_time=5.0, lora="c")
    core.add_request("x1", [10, 11], PARAMS, arrival_time=6.0)
    core.scheduler.requests["c1"].passed_since = core.scheduler.waiting.clock() - 1e6
    results = run_all(core, max_steps=200)
    assert set(results) == {"a1", "c1", "x1"}
    last_a1 = max(i for i, step in enumerate(steps) if "a1" in step)
    assert all(step == ["a1"] for step in steps[: last_a1 + 1])  # c1 held by the older a1, x1 behind c1
    assert set(steps[last_a1 + 1]) == {"c1", "x1"}
    assert_clean(core)
