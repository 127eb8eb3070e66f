"""`python -m agentgate.loadtests.bandwidth`: the memory read speed every step time is set against."""

from __future__ import annotations

import re

import torch

from agentgate.loadtests import bandwidth


def test_the_read_speed_is_measured_at_the_threads_asked_and_puts_the_count_back(capfd):
    before = torch.get_num_threads()
    bandwidth.main(["--threads", "1", "--megabytes", "64", "--repeat", "2"])
    line = capfd.readouterr().out.strip()
    match = re.fullmatch(r"memory: ([\d.]+) GB/s streaming read \(64 MB tensor summed at 1 threads, .*\)", line)
    assert match, line
    assert float(match.group(1)) > 0.5
    assert torch.get_num_threads() == before


def test_the_floor_is_bytes_over_speed():
    speed = bandwidth.Bandwidth(bytes_per_second=20e9, threads=2, megabytes=512)
    assert speed.gb_per_s == 20.0
    assert speed.floor_ms(100_000_000) == 5.0  # 100 MB at 20 GB/s
