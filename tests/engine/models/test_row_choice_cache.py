"""What row choice remembers between starts (`engine.kernel_choice.row_choice_cache`): where (``--cache-dir``,
XDG), for how long, what a noisy measurement buys, ``--remeasure``, and the crossover's noise from
its timings. A fake clock and fake timings: nothing here is timed."""

from __future__ import annotations

import json

import pytest

from agentgate.engine.kernel_choice import row_choice as rc
from agentgate.engine.kernel_choice import row_choice_cache as cache_module
from agentgate.engine.kernel_choice.row_choice_cache import MAX_AGE_S, NOISY_SPREAD, NOISY_TRIES, MeasurementCache

DAY = 86400.0
QUIET, NOISY = NOISY_SPREAD / 2, NOISY_SPREAD * 2


class Clock:
    def __init__(self, now: float = 1.8e9) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_default_directory_follows_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_module.default_cache_dir({"XDG_CACHE_HOME": "/var/c"}) == cache_module.Path("/var/c/agentgate")
    for unset in ({}, {"XDG_CACHE_HOME": ""}, {"XDG_CACHE_HOME": "relative/c"}):  # the XDG rule: absolute only
        assert cache_module.default_cache_dir(unset) == tmp_path / "home" / ".cache" / "agentgate"


def test_the_tests_cache_is_a_throwaway_directory():
    """tests/conftest.py points XDG_CACHE_HOME away from the user's home, for every server the tests start."""
    directory = cache_module.default_cache_dir()
    assert directory.parent.name.startswith("agentgate-tests-cache-")
    assert not directory.is_relative_to(cache_module.Path.home() / ".cache")


def test_an_entry_is_recalled_until_it_is_older_than_its_age(tmp_path):
    clock = Clock()
    cache = MeasurementCache(tmp_path / "made" / "here", clock=clock)
    assert cache.recall("k") is None
    cache.remember("k", 8, QUIET)
    assert (tmp_path / "made" / "here").stat().st_mode & 0o777 == 0o700
    clock.now += MAX_AGE_S - 1
    assert cache.recall("k").value == 8
    clock.now += 1
    assert cache.recall("k") is None


def test_a_noisy_measurement_is_measured_again_up_to_its_tries_then_kept(tmp_path):
    clock = Clock()
    cache = MeasurementCache(tmp_path, clock=clock)
    for tries in range(1, NOISY_TRIES):
        assert cache.remember("k", 8, NOISY).tries == tries
        assert cache.recall("k") is None  # the next start measures again
        clock.now += DAY
    last = cache.remember("k", 12, NOISY)
    assert last.tries == NOISY_TRIES and cache.recall("k").value == 12
    clock.now += MAX_AGE_S  # aged out: the count starts again
    assert cache.recall("k") is None and cache.remember("k", 8, NOISY).tries == 1


def test_a_quiet_measurement_after_noisy_ones_is_kept(tmp_path):
    cache = MeasurementCache(tmp_path, clock=Clock())
    cache.remember("k", 8, NOISY)
    assert cache.remember("k", 12, QUIET).tries == 1 and cache.recall("k").value == 12


def test_remeasure_recalls_nothing_and_rewrites_the_entry(tmp_path):
    clock = Clock()
    MeasurementCache(tmp_path, clock=clock).remember("k", 8, QUIET)
    MeasurementCache(tmp_path, clock=clock).remember("other", 4, QUIET)
    forced = MeasurementCache(tmp_path, remeasure=True, clock=clock)
    assert forced.recall("k") is None
    clock.now += 5
    forced.remember("k", 16, QUIET)
    entries = json.loads((tmp_path / cache_module.FILE_NAME).read_text())
    assert entries["k"]["value"] == 16 and entries["k"]["measured_at"] == clock.now
    assert entries["other"]["value"] == 4  # the others stay


@pytest.mark.parametrize(
    "stored",
    [
        "not json",
        "[1, 2]",
        '{"k": 8}',
        '{"k": {"value": 8}}',
        '{"k": {"value": 8, "measured_at": "yesterday"}}',
        '{"k": {"value": 8, "measured_at": 1.8e9, "surprise": 1}}',
    ],
)
def test_an_entry_that_does_not_parse_is_measured_again(tmp_path, stored):
    (tmp_path / cache_module.FILE_NAME).write_text(stored)
    cache = MeasurementCache(tmp_path, clock=Clock())
    assert cache.recall("k") is None
    cache.remember("k", 8)
    assert cache.recall("k").value == 8


def test_an_unwritable_directory_only_means_measuring_again(tmp_path):
    (tmp_path / "file").write_text("")
    cache = MeasurementCache(tmp_path / "file" / "below", clock=Clock())
    assert cache.remember("k", 8).value == 8 and cache.recall("k") is None


def timings(quantized: dict[int, list[float]], dense: dict[int, list[float]]):
    return {rows: (quantized[rows], dense[rows]) for rows in quantized}


def test_the_crossover_and_its_spread_come_from_the_sizes_that_decided_it():
    quantized = {1: [1.0] * 5, 4: [2.0] * 5, 8: [4.0, 4.0, 4.0, 4.4, 9.0], 16: [8.0] * 5}
    dense = {1: [3.0] * 5, 4: [3.0, 3.0, 3.3, 3.3, 3.3], 8: [3.0] * 5, 16: [4.0] * 5}
    crossover, spread = rc.decide_crossover(timings(quantized, dense))
    assert crossover == 8
    # Deciding: 4 rows (dense lost) and 8 (won). Medians: 3.3 against 3.0 at 4 rows, 4.0 against 4.0 at 8.
    assert spread == pytest.approx(0.1)


def test_dense_must_win_at_every_larger_size_and_noise_elsewhere_does_not_count():
    quantized = {1: [1.0, 9.0, 9.0], 4: [2.0] * 3, 8: [4.0] * 3, 16: [8.0] * 3}
    dense = {1: [0.5] * 3, 4: [3.0] * 3, 8: [5.0] * 3, 16: [4.0] * 3}  # wins at 1 and 16 only
    assert rc.decide_crossover(timings(quantized, dense)) == (16, 0.0)
    never = {rows: (q, [t * 2 for t in q]) for rows, (q, _) in timings(quantized, dense).items()}
    assert rc.decide_crossover(never) == (None, 0.0)  # decided at the largest size alone
