"""The input-preparation Triton kernels equal their torch references.

On CPU the kernels run under ``TRITON_INTERPRET=1`` (set by conftest), called
directly; on CUDA (``gpu`` marker) they run through the dispatcher, which
must pick them. A step is written as rows ``(slot, num_computed, query_len,
samples)``; slots, block ids and sampling rows are shuffled.
"""

from __future__ import annotations

import random

import pytest
import torch

from agentgate.engine.kernels import input_prep as input_prep_triton
from agentgate.engine.runner import input_prep, input_prep_torch
from agentgate.engine.runner.slot_state import SlotState
from agentgate.engine.runner.step_batch import StepBatch, StepInputs

BLOCK_SIZE = 16
NUM_SLOTS = 80
MAX_LEN = 160  # tokens per slot: 10 blocks
VOCAB = 97
SENTINEL = -7

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def kernels(device: str):
    """The Triton implementation: direct on CPU (interpreter), dispatched on CUDA."""
    return input_prep_triton if device == "cpu" else input_prep


def _random_rows(rng: random.Random, num_rows: int) -> list[tuple[int, int, int, bool]]:
    rows = []
    for slot in rng.sample(range(NUM_SLOTS), num_rows):
        if rng.random() < 0.6:  # decode
            start = rng.randrange(1, MAX_LEN - 1)
            rows.append((slot, start, 1, True))
        else:  # prefill chunk, finishing its prompt (samples) or not
            query_len = rng.randrange(2, 70)
            start = rng.randrange(0, MAX_LEN - query_len)
            rows.append((slot, start, query_len, rng.random() < 0.5))
    return rows


def _cases() -> dict[str, list[tuple[int, int, int, bool]]]:
    rng = random.Random(1234)
    return {
        "empty": [],
        "one_decode": [(5, 37, 1, True)],
        "one_prefill": [(0, 0, 50, True)],
        "prefill_no_sampling": [(9, 0, 33, False), (2, 16, 16, False)],
        # contexts ending on a block boundary (seq_len 32, 16, 48) and just past it (33, 17, 49)
        "block_boundaries": [
            (11, 31, 1, True),
            (12, 32, 1, True),
            (13, 0, 16, True),
            (14, 0, 17, False),
            (15, 16, 32, True),
            (16, 16, 33, True),
            (17, 47, 1, True),
            (18, 48, 1, True),
        ],
        "prefill_decode_mixed": _random_rows(rng, 12),
        "full_batch": _random_rows(rng, 64),
    }


CASES = _cases()


STATE = ("token_ids", "num_tokens", "num_computed", "block_table", "output_counts")


def _state(device: str, seed: int, with_counts: bool = False) -> SlotState:
    g = torch.Generator().manual_seed(seed)
    max_blocks = MAX_LEN // BLOCK_SIZE
    slots = SlotState(NUM_SLOTS, MAX_LEN, max_blocks, VOCAB, torch.device(device))
    slots.token_ids.copy_(torch.randint(0, VOCAB, (NUM_SLOTS, MAX_LEN + 1), generator=g, dtype=torch.int32))
    slots.num_tokens.copy_(torch.randint(0, MAX_LEN, (NUM_SLOTS,), generator=g, dtype=torch.int32))
    slots.num_computed.copy_(torch.randint(0, MAX_LEN, (NUM_SLOTS,), generator=g, dtype=torch.int32))
    # shuffled block ids: no two slots share a block, no row is in order
    slots.block_table.copy_(torch.randperm(NUM_SLOTS * max_blocks, generator=g).to(torch.int32).view(NUM_SLOTS, -1))
    if with_counts:
        slots.ensure_penalty_tables()
        slots.output_counts.copy_(torch.randint(0, 3, (NUM_SLOTS, VOCAB), generator=g, dtype=torch.int32))
    return slots


def _step(rows, device: str, seed: int, index_dtype=torch.int32, with_counts: bool = False):
    """(StepBatch, slot state), the state holding each row's
    ``num_computed``; sample rows in shuffled order."""
    slots = _state(device, seed, with_counts)
    for slot, start, query_len, _ in rows:
        slots.num_computed[slot] = start
        slots.num_tokens[slot] = start + query_len
    sample_rows = [r for r, row in enumerate(rows) if row[3]]
    random.Random(seed).shuffle(sample_rows)

    def t(values):
        return torch.tensor(values, dtype=index_dtype, device=device)

    num_tokens = sum(r[2] for r in rows)
    return StepBatch(t([r[0] for r in rows]), t([r[2] for r in rows]), t(sample_rows), num_tokens), slots


def _prepare(impl, rows, device, seed, index_dtype=torch.int32, spare=5):
    step, slots = _step(rows, device, seed, index_dtype)

    def out(n, dtype):  # oversized, as the CUDA-graph buffers are: only the head is written
        return torch.full((n + spare,), SENTINEL, dtype=dtype, device=device)

    num_tokens, num_rows = step.num_tokens, step.num_rows
    outs = StepInputs(
        input_ids=out(num_tokens, torch.long),
        positions=out(num_tokens, torch.long),
        slot_mapping=out(num_tokens, torch.long),
        query_start_loc=out(num_rows + 1, torch.int32),
        seq_lens=out(num_rows, torch.int32),
        logits_indices=out(step.num_sampling, torch.long),
    )
    impl.prepare_inputs(step, slots, BLOCK_SIZE, outs)
    return vars(outs)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(CASES))
def test_prepare_inputs_matches_reference(case, device):
    rows = CASES[case]
    expected = _prepare(input_prep_torch, rows, device, seed=7)
    got = _prepare(kernels(device), rows, device, seed=7)
    for name in expected:
        assert got[name].dtype == expected[name].dtype, name
        torch.testing.assert_close(got[name], expected[name], rtol=0, atol=0, msg=name)
    assert int(got["query_start_loc"][0]) == 0


@pytest.mark.parametrize("device", DEVICES)
def test_prepare_inputs_int64_indices(device):
    rows = CASES["prefill_decode_mixed"]
    expected = _prepare(input_prep_torch, rows, device, seed=3, index_dtype=torch.long)
    got = _prepare(kernels(device), rows, device, seed=3, index_dtype=torch.long)
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=0, atol=0, msg=name)


def _post_update(impl, rows, device, seed, with_counts):
    step, slots = _step(rows, device, seed, with_counts=with_counts)
    g = torch.Generator().manual_seed(seed + 1)
    sampled = torch.randint(0, VOCAB, (step.num_sampling,), generator=g, dtype=torch.long).to(device)
    impl.post_update(step, sampled, slots)
    return {name: getattr(slots, name) for name in STATE}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("with_counts", [False, True], ids=["no_counts", "counts"])
@pytest.mark.parametrize("case", list(CASES))
def test_post_update_matches_reference(case, with_counts, device):
    rows = CASES[case]
    expected = _post_update(input_prep_torch, rows, device, seed=11, with_counts=with_counts)
    got = _post_update(kernels(device), rows, device, seed=11, with_counts=with_counts)
    for name in expected:
        if expected[name] is None:
            assert got[name] is None
        else:
            torch.testing.assert_close(got[name], expected[name], rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_writes", [0, 1, 7, 300])
def test_block_table_writes_match_reference(num_writes, device):
    rng = random.Random(num_writes)
    table = _state(device, seed=5).block_table
    max_blocks = table.shape[1]
    cells = rng.sample([(r, c) for r in range(NUM_SLOTS) for c in range(max_blocks)], num_writes)

    def t(values):
        return torch.tensor(values, dtype=torch.int32, device=device)

    rows, cols = t([c[0] for c in cells]), t([c[1] for c in cells])
    values = t([rng.randrange(10_000) for _ in cells])
    expected, got = table.clone(), table.clone()
    input_prep_torch.apply_block_table_writes(expected, rows, cols, values)
    kernels(device).apply_block_table_writes(got, rows, cols, values)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_dispatcher_uses_references_on_cpu():
    assert input_prep._impl(torch.zeros(1)) is input_prep_torch


@pytest.mark.gpu
def test_dispatcher_uses_kernels_on_cuda_without_syncing():
    assert input_prep._impl(torch.zeros(1, device="cuda")) is input_prep_triton
    rows = CASES["full_batch"]
    _prepare(input_prep, rows, "cuda", seed=1)  # compile outside the checked region
    _post_update(input_prep, rows, "cuda", seed=1, with_counts=True)
    step, slots = _step(rows, "cuda", seed=2, with_counts=True)
    outs = StepInputs.empty(step.num_tokens, step.num_rows, step.num_sampling, torch.device("cuda"))
    sampled = torch.zeros(step.num_sampling, dtype=torch.long, device="cuda")
    first_col = torch.zeros_like(step.idx_mapping)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        input_prep.apply_block_table_writes(slots.block_table, step.idx_mapping, first_col, step.idx_mapping)
        input_prep.prepare_inputs(step, slots, BLOCK_SIZE, outs)
        input_prep.post_update(step, sampled, slots)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
