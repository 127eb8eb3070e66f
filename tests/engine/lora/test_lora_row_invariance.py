"""``--deterministic`` with LoRA adapters: an adapter row's output depends on that row alone, as the
base linears' rows do (`engine.lora.layer` `_low_rank`), at the layer and through the engine."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from agentgate.engine import LLM, SamplingParams
from agentgate.engine.layers.batch_invariant import RowInvariantLinear
from agentgate.engine.lora.adapter import LoraAdapter
from agentgate.engine.lora.layer import LoraLinear, LoraStep
from tests.support.lora_adapters import write_adapter

IN, OUT, RANK = 576, 1536, 16  # the default model's gate/up input and a projection's width


def _layer(row_invariant: bool, dtype: torch.dtype) -> tuple[LoraLinear, LoraStep, LoraAdapter]:
    torch.manual_seed(0)
    # the base linear as --deterministic runs it (row-invariant in its safest mode),
    # so the check is of the adapter's part
    base = RowInvariantLinear(nn.Linear(IN, OUT, bias=False).to(dtype), "per row")
    a, b = torch.randn(RANK, IN, dtype=dtype) / 8, torch.randn(OUT, RANK, dtype=dtype) / 8
    adapter = LoraAdapter("rand", "rand", RANK, 2.0, {"layers.0.mlp": (a, b)})
    step = LoraStep(row_invariant)
    return LoraLinear(base, "layers.0.mlp", step), step, adapter


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_row_invariant_adapter_row_is_the_same_alone_and_in_any_batch(dtype):
    layer, step, adapter = _layer(True, dtype)
    x = torch.randn(37, IN, dtype=dtype)
    with torch.no_grad():
        with step.rows([(adapter, 37)], x.device):
            batched = layer(x)
        for size in (1, 3, 9):  # the first rows of the batch, run as a batch of their own
            with step.rows([(adapter, size)], x.device):
                assert torch.equal(layer(x[:size]), batched[:size]), size
        # rows of the adapter scattered among base rows (the indexed path): the same bits again
        with step.rows([(None, 2), (adapter, 5), (None, 1), (adapter, 4)], x.device):
            mixed = layer(x[:12])
        assert torch.equal(mixed[2:7], batched[2:7]) and torch.equal(mixed[8:12], batched[8:12])
        # and the product is the adapter's: equal to the plain product within rounding
        plain, plain_step, _ = _layer(False, dtype)
        with plain_step.rows([(adapter, 37)], x.device):
            assert torch.allclose(plain(x).float(), batched.float(), rtol=2e-2, atol=2e-2)


def test_deterministic_greedy_through_an_adapter_is_bit_identical_alone_and_batched(tmp_path):
    adapter = write_adapter(tmp_path / "rand", seed=1)
    llm = LLM(deterministic=True, lora_modules=(f"rand={adapter}",), num_kv_blocks=128, runner="sync")
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, logprobs=2)
    prompts = ["The capital of France is", "List three colours:", "def fibonacci(n):", "Write a haiku."]
    loras = ["rand", "", "rand", "rand"]
    [alone] = llm.generate(prompts[:1], params, lora="rand")
    batched = llm.generate(prompts, params, lora=loras)[0]
    assert batched.token_ids == alone.token_ids
    assert [e.logprob for e in batched.logprobs] == [e.logprob for e in alone.logprobs]
