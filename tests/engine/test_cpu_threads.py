"""The thread governor: one thread fewer per core other processes keep busy."""

import pytest
import torch

from agentgate.engine.cpu_threads import ThreadGovernor, machine_busy_seconds, threads_for


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_threads_for_leaves_the_cores_others_keep_busy():
    assert threads_for(2, 0.0) == 2
    assert threads_for(2, 0.5) == 2  # a light front end beside us
    assert threads_for(2, 1.0) == 1  # one busy program
    assert threads_for(2, 3.0) == 1  # never fewer than one
    assert threads_for(8, 2.9) == 5


class FakeMachine:
    """A clock, the machine's busy seconds and ours, moved by hand."""

    def __init__(self):
        self.now, self.machine, self.own = 0.0, 100.0, 10.0

    def advance(self, seconds, ours, others):
        self.now += seconds
        self.own += ours * seconds
        self.machine += (ours + others) * seconds


def test_governor_follows_a_competing_process_and_back(restore_threads):
    fake = FakeMachine()
    governor = ThreadGovernor(
        cores=2, interval=2.0, machine=lambda: fake.machine, own=lambda: fake.own, clock=lambda: fake.now
    )
    torch.set_num_threads(2)
    governor.threads = 2
    fake.advance(2.5, ours=2.0, others=0.1)
    governor.tick()
    assert torch.get_num_threads() == 2
    fake.advance(1.0, ours=1.0, others=1.0)
    governor.tick()  # within the interval: nothing measured yet
    assert torch.get_num_threads() == 2
    fake.advance(1.5, ours=1.0, others=1.0)
    governor.tick()
    assert governor.threads == torch.get_num_threads() == 1
    fake.advance(2.0, ours=1.0, others=0.0)
    governor.tick()
    assert governor.threads == torch.get_num_threads() == 2


def test_machine_busy_seconds_reads_proc_stat():
    first = machine_busy_seconds()
    assert first is not None and first > 0
    sum(i * i for i in range(200_000))
    assert machine_busy_seconds() >= first
