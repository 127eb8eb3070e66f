"""The overlapped runner against the sync runner: the same tokens, greedy and
seeded, on a randomized mixed workload; and no host sync in steady-state
decode steps."""

import random

import pytest
import torch

from agentgate.engine.config import EngineConfig
from agentgate.engine.core import EngineCore
from agentgate.engine.sampling_params import SamplingParams

VOCAB = 512


def make_core(model_dir, runner, **overrides):
    config = EngineConfig(
        model=str(model_dir),
        load_format="dummy",
        runner=runner,
        block_size=4,
        dtype="float32",
        max_num_seqs=8,
        max_num_batched_tokens=32,
        num_kv_blocks=overrides.pop("num_kv_blocks", 36),
        # Chunks by the token budget alone: a step budget in time (engine.step_budget) would size
        # them from measured step times, so the two runners' steps, and whether the workload
        # preempts, would depend on the machine's load.
        max_step_ms="off",
        **overrides,
    )
    return EngineCore(config)


def random_params(rng, i):
    kind = rng.choice(["greedy", "seeded", "penalties", "bias", "min_tokens", "logprobs"])
    base = dict(max_tokens=rng.randrange(1, 24), temperature=0.0)
    if kind != "greedy":
        base.update(
            temperature=rng.choice([0.7, 1.0, 1.3]),
            seed=1000 + i,
            top_p=rng.choice([1.0, 0.9]),
            top_k=rng.choice([0, 20]),
        )
    if kind == "penalties":
        base.update(presence_penalty=0.5, frequency_penalty=0.3, repetition_penalty=1.2)
    if kind == "bias":
        base.update(logit_bias={rng.randrange(VOCAB): 5.0, rng.randrange(VOCAB): -100.0})
    if kind == "min_tokens":
        base.update(min_tokens=base["max_tokens"] // 2)
    if kind == "logprobs":
        base.update(logprobs=3)
    return SamplingParams(**base)


def build_script(seed):
    """Staggered arrivals (by step), aborts, and one pause keep / resume."""
    rng = random.Random(seed)
    events, arrivals = [], {}
    for i in range(14):
        prompt = [rng.randrange(3, VOCAB) for _ in range(rng.randrange(1, 70))]
        arrivals[i] = rng.randrange(0, 30)
        events.append((arrivals[i], "add", f"r{i}", prompt, random_params(rng, i)))
    for i in rng.sample(range(14), 3):
        events.append((arrivals[i] + rng.randrange(1, 6), "abort", f"r{i}"))
    pause_at = rng.randrange(10, 30)
    events += [(pause_at, "pause"), (pause_at + 4, "resume")]
    return sorted(events, key=lambda e: e[0]), {e[2] for e in events if e[1] == "abort"}


def drive(core, events, eos):
    tokens, finish, logprobs = {}, {}, {}
    step = 0
    pending = list(events)
    while pending or core.has_work:
        while pending and pending[0][0] <= step:
            event = pending.pop(0)
            if event[1] == "add":
                core.add_request(event[2], event[3], event[4], eos)
            elif event[1] == "abort":
                for out in core.abort_requests([event[2]]):
                    finish[out.request_id] = out.finish_reason
            elif event[1] == "pause":
                core.pause("keep")
            else:
                core.resume()
        for out in core.step():
            tokens.setdefault(out.request_id, []).extend(out.new_token_ids)
            if out.logprobs:
                logprobs.setdefault(out.request_id, []).extend(out.logprobs)
            if out.finish_reason:
                finish[out.request_id] = out.finish_reason
        step += 1
        assert step < 5000, "workload did not drain"
    return tokens, finish, logprobs


def test_the_default_pipeline_depth_is_one_step_on_the_cpu(tiny_model_dir):
    """One step in flight on the CPU (a second only delays tokens and
    admissions there); two, the MRv2 pipeline, when asked for (the CUDA
    default, checked by the gpu test below)."""
    assert make_core(tiny_model_dir, "overlap").runner.max_steps_in_flight == 1
    assert make_core(tiny_model_dir, "overlap", steps_in_flight=2).runner.max_steps_in_flight == 2


@pytest.mark.gpu
def test_the_default_pipeline_depth_is_two_steps_on_cuda(tiny_model_dir):
    assert make_core(tiny_model_dir, "overlap", device="cuda").runner.max_steps_in_flight == 2


# Both depths on the CPU: the CPU default and the pipeline CUDA runs.
@pytest.mark.parametrize("seed,depth", [(0, 2), (1, 2), (0, 1)])
def test_overlap_equals_sync_on_a_mixed_workload(tiny_model_dir, seed, depth):
    events, aborted = build_script(seed)
    eos = frozenset(range(2, 22))  # 20 of 512 ids: random weights hit one now and then
    results = {}
    for runner in ("sync", "overlap"):
        core = make_core(tiny_model_dir, runner, **({"steps_in_flight": depth} if runner == "overlap" else {}))
        results[runner] = drive(core, events, eos)
        kv = core.scheduler.kv
        assert kv.num_free_blocks == kv.pool.num_blocks
        results[runner + "_preemptions"] = core.scheduler.num_preemptions
    (sync_tokens, sync_finish, sync_lp), (ov_tokens, ov_finish, ov_lp) = results["sync"], results["overlap"]
    assert results["sync_preemptions"] > 0 and results["overlap_preemptions"] > 0, "the workload must force preemption"
    reference, _, _ = drive(
        make_core(tiny_model_dir, "sync", num_kv_blocks=512), [e for e in events if e[1] == "add"], eos
    )
    for rid in {e[2] for e in events if e[1] == "add"}:
        if rid in aborted:
            # Aborted at different points of the pipeline, but on the same path.
            for got in (sync_tokens.get(rid, []), ov_tokens.get(rid, [])):
                assert got == reference[rid][: len(got)]
            continue
        assert ov_tokens[rid] == sync_tokens[rid] == reference[rid], rid
        assert ov_finish[rid] == sync_finish[rid]
        if rid in sync_lp:
            for a, b in zip(sync_lp[rid], ov_lp[rid]):
                assert a.top_token_ids == b.top_token_ids
                assert a.logprob == pytest.approx(b.logprob, abs=1e-4)
    assert {"stop", "length", "abort"} <= set(sync_finish.values())


def test_a_request_finishing_at_step_n_emits_nothing_from_step_n_plus_1(tiny_model_dir):
    core = make_core(tiny_model_dir, "overlap", steps_in_flight=2)
    core.add_request("a", [5, 6, 7], SamplingParams(temperature=0, max_tokens=3))
    got = []
    while core.has_work:
        got += [t for out in core.step() for t in out.new_token_ids]
    assert len(got) == 3
    assert not core.runner._live and core.runner.slots.num_free == core.runner.slots.max_slots


class _SyncTrap:
    """Makes every host read of a tensor raise while active."""

    NAMES = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__")

    def __enter__(self):
        self.saved = {name: getattr(torch.Tensor, name) for name in self.NAMES}

        def trap(name):
            def raiser(*args, **kwargs):
                raise AssertionError(f"host sync: Tensor.{name} on the hot path")

            return raiser

        for name in self.NAMES:
            setattr(torch.Tensor, name, trap(name))

    def __exit__(self, *exc):
        for name, fn in self.saved.items():
            setattr(torch.Tensor, name, fn)


def test_steady_state_decode_steps_do_not_synchronize(tiny_model_dir):
    core = make_core(tiny_model_dir, "overlap", num_kv_blocks=256, steps_in_flight=2)
    for i in range(6):
        params = SamplingParams(
            temperature=0.8,
            seed=i,
            top_p=0.9,
            top_k=10,
            min_p=0.01,
            presence_penalty=0.2,
            repetition_penalty=1.1,
            logit_bias={9: 1.0},
            min_tokens=3,
            logprobs=2,
            max_tokens=40,
            ignore_eos=True,
        )
        core.add_request(f"r{i}", [3 + i] * (5 + i), params)
    for _ in range(4):  # admit and prefill
        core.step()
    runner = core.runner
    original = runner.execute
    trapped = 0

    def execute(step):
        nonlocal trapped
        assert all(row.num_tokens == 1 for row in step.scheduled), "expected steady-state decode"
        with _SyncTrap():
            handle = original(step)
        trapped += 1
        return handle

    runner.execute = execute
    for _ in range(20):
        core.step()
    assert trapped == 20


def every_sampling_feature(i):
    """Sampling parameters that together use every feature of the sampler."""
    kinds = [
        dict(temperature=0.8, top_k=10, top_p=0.9, min_p=0.01),
        dict(temperature=1.1, presence_penalty=0.2, frequency_penalty=0.3, repetition_penalty=1.1),
        dict(temperature=0.7, logit_bias={9: 1.0, 11: -100.0}, min_tokens=30),
        dict(temperature=0.9, logprobs=3),
        dict(temperature=0.0, logprobs=0),
        dict(temperature=0.0),
    ]
    return SamplingParams(seed=i, max_tokens=60, ignore_eos=True, **kinds[i % len(kinds)])


@pytest.mark.gpu
@pytest.mark.parametrize("graphs", [True, False], ids=["graphs", "eager"])
def test_steps_do_not_synchronize_on_cuda(tiny_model_dir, graphs):
    """Under torch.cuda.set_sync_debug_mode("error"), no step of the
    overlapped runner synchronizes: decode with every sampling feature,
    steps sampled under a grammar bitmask (execute, then complete), and steps
    that admit and prefill new requests."""
    from dataclasses import replace

    core = make_core(tiny_model_dir, "overlap", num_kv_blocks=256, device="cuda", enforce_eager=not graphs)
    for i in range(6):
        core.add_request(f"r{i}", [3 + i] * (5 + i), every_sampling_feature(i))
    for _ in range(4):  # admit and prefill outside the checked region: compile kernels
        core.step()
    runner = core.runner
    original = runner.execute
    seen = {"decode": 0, "bitmask": 0, "admit": 0}
    words = (VOCAB + 31) // 32

    def execute(step):
        constrain = seen["decode"] % 3 == 2 and any(row.samples for row in step.scheduled)
        if step.new_requests:
            seen["admit"] += 1
        if constrain:
            step = replace(step, scheduled=[replace(row, constrained=row.samples) for row in step.scheduled])
            rows = sum(row.samples for row in step.scheduled)
            bitmask = torch.full((rows, words), -1, dtype=torch.int32, pin_memory=True)
            bitmask[0, 2:] = 0  # the first sampling row may only pick tokens 0..63
        torch.cuda.set_sync_debug_mode("error")
        try:
            handle = original(step)
            if constrain:
                runner.complete(handle, bitmask)
                seen["bitmask"] += 1
        finally:
            torch.cuda.set_sync_debug_mode("default")
        seen["decode"] += 1
        return handle

    runner.execute = execute
    for step_index in range(30):
        if step_index == 10:  # new requests arrive mid-decode, one with penalties
            core.add_request("late-0", [7] * 21, every_sampling_feature(1))
            core.add_request("late-1", [8] * 3, every_sampling_feature(3))
        core.step()
    assert seen["bitmask"] >= 5 and seen["admit"] >= 1, seen


@pytest.mark.gpu
def test_overlap_equals_sync_on_cuda(tiny_model_dir):
    events, aborted = build_script(3)
    outs = [
        drive(make_core(tiny_model_dir, r, device="cuda"), [e for e in events if e[1] == "add"], frozenset({2}))[0]
        for r in ("sync", "overlap")
    ]
    assert outs[0] == outs[1]
