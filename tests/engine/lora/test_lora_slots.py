"""Resident LoRA slots (`engine.lora.slots`): which slot a step's adapters take (free, else the
least recently used one the step does not use), what a slot holds (the adapter zero-padded to the
module's ``max_k``, zeros for a module it does not adapt), and `LoraLinear`'s kernel form: the Triton
kernel under TRITON_INTERPRET=1 (fp32) over the slots gives the segmented form's result, and the
base model's rows come back bit-identical."""

from __future__ import annotations

import pytest
import torch

from agentgate.engine.errors import LoraError
from agentgate.engine.lora.adapter import LoraAdapter
from agentgate.engine.lora.layer import LoraLinear, LoraStep
from agentgate.engine.lora.slots import LoraSlots

CPU = torch.device("cpu")
# Two modules as a layer has them: a fused one of 2 parts (max_k = 2 x rank 4) and a plain one.
SHAPES = {"layers.0.mlp.gate_up_proj": (8, 12, 8), "layers.0.mlp.down_proj": (6, 8, 4)}


def adapter(name: str, rank: int = 2, seed: int = 0, modules: tuple[str, ...] = tuple(SHAPES)) -> LoraAdapter:
    gen = torch.Generator().manual_seed(seed)
    weights = {}
    for key in modules:
        size_in, size_out, max_k = SHAPES[key]
        k = rank * max_k // 4  # as many parts as the module's max_k has
        weights[key] = (torch.randn(k, size_in, generator=gen), torch.randn(size_out, k, generator=gen))
    return LoraAdapter(name, "", rank, 1.0, weights, uid=f"{name}#{seed}")


def no_kernel(*_: torch.Tensor) -> None:
    raise AssertionError("the slots' tests of residency run no kernel")


def test_adapters_take_free_slots_then_the_least_recently_used_one_the_step_does_not_use():
    slots = LoraSlots(SHAPES, 2, no_kernel, dtype=torch.float32, device=CPU)
    a, b, c = adapter("a", seed=1), adapter("b", seed=2), adapter("c", seed=3)
    assert slots.assign([a, a, b]) == {a.uid: 0, b.uid: 1} and slots.num_copies == 2
    assert slots.assign([b]) == {b.uid: 1} and slots.num_copies == 2  # resident: no copy
    assert slots.assign([c]) == {c.uid: 0}  # a is the least recently used
    assert slots.resident() == {b.uid: 1, c.uid: 0} and slots.num_copies == 3
    assert slots.assign([a, c]) == {a.uid: 1, c.uid: 0}  # b goes: c is this step's, never evicted for a
    with pytest.raises(LoraError, match="a step holds 3 LoRA adapters, --max-loras is 2"):
        slots.assign([a, b, c])


def test_a_slot_holds_the_adapter_zero_padded_and_zeros_for_a_module_it_does_not_adapt():
    slots = LoraSlots(SHAPES, 1, no_kernel, dtype=torch.float32, device=CPU)
    full, partial = adapter("full", rank=4, seed=1), adapter("partial", rank=1, seed=2, modules=(next(iter(SHAPES)),))
    slots.assign([full])
    for key, (a_stack, b_stack) in slots.stacks.items():
        assert torch.equal(a_stack[0], full.weights[key][0]) and torch.equal(b_stack[0], full.weights[key][1])
    slots.assign([partial])  # into the same slot: what `full` left there must not survive
    gate_up, down = SHAPES
    a, b = partial.weights[gate_up]
    a_stack, b_stack = slots.stacks[gate_up]
    assert torch.equal(a_stack[0, :2], a) and not a_stack[0, 2:].any()
    assert torch.equal(b_stack[0, :, :2], b) and not b_stack[0, :, 2:].any()
    assert not slots.stacks[down][0][0].any() and not slots.stacks[down][1][0].any()
    assert slots.nbytes_per_slot == 4 * sum(k * size_in + size_out * k for size_in, size_out, k in SHAPES.values())


def test_the_kernel_form_over_the_slots_equals_the_segmented_form_and_leaves_base_rows_alone():
    from agentgate.engine.kernels.lora import add_lora  # under TRITON_INTERPRET=1 (tests/conftest.py)

    torch.manual_seed(0)
    key = "layers.0.mlp.gate_up_proj"
    size_in, size_out, _ = SHAPES[key]
    base = torch.nn.Linear(size_in, size_out)
    adapters = [adapter("a", seed=1), adapter("b", rank=4, seed=2), adapter("c", rank=1, seed=3)]
    # Rows: a, base, b, a, c, base (a's rows not contiguous), tokens per row 1 or 2.
    rows = [(adapters[0], 2), (None, 1), (adapters[1], 1), (adapters[0], 1), (adapters[2], 2), (None, 1)]
    x = torch.randn(sum(n for _, n in rows), size_in)

    def forward(step: LoraStep) -> torch.Tensor:
        layer = LoraLinear(base, key, step)
        with torch.no_grad(), step.rows(rows, CPU) as adapted:
            assert adapted
            return layer(x)

    segmented = forward(LoraStep())
    kernel_step = LoraStep()
    kernel_step.slots = LoraSlots(SHAPES, 3, add_lora, dtype=torch.float32, device=CPU)
    kernel = forward(kernel_step)
    torch.testing.assert_close(kernel, segmented, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        plain = base(x)
    base_rows = [2, 7]
    assert torch.equal(kernel[base_rows], plain[base_rows])
    assert not torch.allclose(kernel[0], plain[0])  # the adapter rows did change
    assert kernel_step.slot_ids is None  # the step's slots are cleared after its forward pass


def test_a_steps_slot_ids_are_each_rows_slot_once_per_token():
    """`LoraStep`'s slot per token row, built from one entry per request row: base rows -1, a row
    of no tokens nothing (its adapter, in no other row, takes no slot)."""
    step = LoraStep()
    step.slots = LoraSlots(SHAPES, 2, no_kernel, dtype=torch.float32, device=CPU)
    a, b, idle = adapter("a", seed=1), adapter("b", seed=2), adapter("idle", seed=3)
    with step.rows([(None, 2), (a, 3), (idle, 0), (b, 1), (a, 2), (None, 1)], CPU) as adapted:
        assert adapted and step.slot_ids.dtype == torch.int32
        assert step.slot_ids.tolist() == [-1, -1, 0, 0, 0, 1, 0, 0, -1]
    assert idle.uid not in step.slots.resident()
    with step.rows([(None, 4), (idle, 0)], CPU) as adapted:
        assert not adapted and step.slot_ids is None
