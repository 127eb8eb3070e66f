"""KV-cache sizing against a fake device memory: what a CUDA engine plans
from free memory, why a second engine in the same process cannot, and the
explicit, equal sizing the runner benchmark gives every core instead."""

from types import SimpleNamespace

import pytest
import torch

from agentgate.engine.config import EngineConfig
from agentgate.engine.runner.base import GRAPH_AND_SAMPLER_MARGIN, TorchModelRunner, kv_blocks_from_free_memory
from agentgate.loadtests.runner_bench import BLOCK_SIZE, kv_blocks

GIB = 1 << 30
BLOCK = 2 * 30 * 16 * 3 * 64 * 2  # bytes per block of the default model in bf16


def test_blocks_from_an_empty_device():
    blocks = kv_blocks_from_free_memory(140 * GIB, 141 * GIB, 0.85, 2 * GIB, BLOCK)
    expected = (140 * GIB - 0.15 * 141 * GIB - 1.2 * 2 * GIB - GRAPH_AND_SAMPLER_MARGIN) // BLOCK
    assert blocks == int(expected) and blocks > 100_000


def test_a_second_engine_in_the_process_gets_a_negative_budget():
    total, weights = 141 * GIB, GIB
    first = kv_blocks_from_free_memory(total - weights, total, 0.85, GIB, BLOCK)
    free_after_first = total - 2 * weights - first * BLOCK
    assert kv_blocks_from_free_memory(free_after_first, total, 0.85, GIB, BLOCK) < 0


def _planner(monkeypatch, free, total, **config):
    """A runner's KV planning on a fake CUDA device with ``free`` of ``total`` bytes free."""
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, total))
    fake = SimpleNamespace(
        config=EngineConfig(block_size=16, **config),
        device=torch.device("cuda"),
        model_config=SimpleNamespace(max_position_embeddings=8192),
        _profile_activation_bytes=lambda: GIB,
        _bytes_per_block=lambda: BLOCK,
    )
    return lambda: TorchModelRunner._plan_kv_cache(fake)


def test_the_runner_plans_from_free_memory_and_says_what_to_do_when_it_cannot(monkeypatch):
    spec = _planner(monkeypatch, 100 * GIB, 141 * GIB)()
    assert spec.num_blocks == kv_blocks_from_free_memory(100 * GIB, 141 * GIB, 0.85, GIB, BLOCK)
    with pytest.raises(RuntimeError, match="set num_kv_blocks, or raise gpu_memory_utilization") as err:
        _planner(monkeypatch, 20 * GIB, 141 * GIB)()
    assert "20.0 of 141.0 GiB are free" in str(err.value)
    # An explicit size is taken as it is, whatever the device holds.
    assert _planner(monkeypatch, 0, 141 * GIB, num_kv_blocks=500)().num_blocks == 500


def test_the_benchmark_gives_every_core_room_for_a_full_batch_and_the_probe():
    blocks = kv_blocks(64, 32, 64)
    per_request = -(-(32 + 64 + 1) // BLOCK_SIZE)
    assert blocks >= 64 * per_request + 1
    assert blocks * BLOCK < GIB  # four cores of the default model fit beside each other many times over
