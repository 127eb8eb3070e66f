"""`python -m agentgate.loadtests.step_profile`: a decode step's operators and where its time goes."""

from __future__ import annotations

import re

import pytest

from agentgate.loadtests import step_profile
from tests.support.tiny_models import TINY_LLAMA, tiny_llama_dir


def test_the_profile_counts_operators_and_splits_the_step(tmp_path, capfd):
    # Formatted by hand: each flag beside its value, as on a command line.
    step_profile.main(["--model", str(tiny_llama_dir(tmp_path)), "--load-format", "dummy", "--batch", "1",
                       "--batch", "3", "--steps", "3", "--runner", "sync"])  # fmt: skip
    out = capfd.readouterr().out
    batches = re.findall(r"^batch (\d+): ([\d,]+) aten calls per decode step", out, re.M)
    assert [b for b, _ in batches] == ["1", "3"]
    assert all(int(calls.replace(",", "")) > 20 for _, calls in batches)
    for wall, linears, kernels, rest, attention, sampler, other in re.findall(
        r"wall ([\d.]+) ms per step = linears ([\d.]+) \(matmul kernels ([\d.]+), casts and reshapes ([\d.]+)\) "
        r"\+ attention ([\d.]+) \+ sampler ([\d.]+) \+ other host work ([\d.]+)",
        out,
    ):
        assert float(linears) > 0 and float(attention) > 0 and float(sampler) > 0
        assert float(kernels) + float(rest) == pytest.approx(float(linears), abs=0.02)
        parts = float(linears) + float(attention) + float(sampler) + float(other)
        assert parts == pytest.approx(float(wall), abs=0.05) or parts < float(wall)
    layers = re.findall(r"per layer ([\d.]+) ms \(x (\d+) layers", out)
    assert len(layers) == 2 and all(int(n) == TINY_LLAMA["num_hidden_layers"] for _, n in layers)
    walls = [float(w) for w in re.findall(r"wall ([\d.]+) ms per step", out)]
    floors = re.findall(
        r"memory floor ([\d.]+) ms per step \(([\d.]+) MB of weights / ([\d.]+) GB/s streaming read "
        r"at (\d+) threads\); step = ([\d.]+) x floor",
        out,
    )
    assert len(floors) == 2, out
    for wall, (floor, megabytes, gb_per_s, threads, ratio) in zip(walls, floors, strict=True):
        assert float(megabytes) > 0 and float(gb_per_s) > 0 and int(threads) >= 1
        assert float(floor) == pytest.approx(float(megabytes) / float(gb_per_s), rel=0.1)  # MB / (GB/s) is ms
        # Nothing reads the weights faster than memory streams them.
        assert 0 < float(floor) < wall
        assert float(ratio) == pytest.approx(wall / float(floor), rel=0.1) and float(ratio) > 1


def test_timers_restore_what_they_wrap():
    class Thing:
        def run(self) -> int:
            return 7

    thing, totals = Thing(), step_profile.Counter()
    with step_profile.wrapped([(thing, "run", "runs")], step_profile.timer(totals)):
        assert thing.run() == 7 and thing.run() == 7
    assert totals["runs"] > 0 and "run" not in vars(thing)
