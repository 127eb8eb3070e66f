"""--speculative auto drafts only where a verify step computes every token's logits as decoding it
alone does (engine.kernel_choice.draft_exactness, issue 52): the check passes on a model whose
steps are exact, finds attention or an LM head whose rows move with the step's size, and its
verdict is remembered."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from agentgate.engine.kernel_choice.draft_exactness import drafted_rows_differ, drafted_rows_verdict
from agentgate.engine.kernel_choice.row_invariance import make_rows_invariant
from agentgate.engine.loaders import load_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tiny_hf) -> nn.Module:
    """A tiny random model whose linears give a row the same bits in any batch (plain BLAS
    linears need not: that alone can make a verify row differ)."""
    path = tmp_path_factory.mktemp("tiny")
    tiny_hf(path, "llama")
    model = load_model(str(path), dtype="float32").model
    make_rows_invariant(model, torch.float32, max_rows=16)
    return model


def test_a_model_whose_verify_rows_compute_as_lone_decode_rows_passes(tiny):
    assert drafted_rows_differ(tiny, block_size=4, dtype=torch.float32, drafts=6) is None


def test_attention_that_moves_with_the_rows_of_a_step_is_found(tiny, monkeypatch):
    backend = tiny.layers[0].self_attn.attention
    exact = backend.paged_attention

    def moved(query, k_cache, v_cache, meta, scale):
        return exact(query, k_cache, v_cache, meta, scale) + 1e-3 * (query.shape[0] > 1)

    monkeypatch.setattr(backend, "paged_attention", moved)
    found = drafted_rows_differ(tiny, block_size=4, dtype=torch.float32, drafts=3)
    assert found is not None and "3 drafts (alone" in found


def test_an_lm_head_whose_rows_depend_on_their_count_is_found_and_the_verdict_is_remembered(
    tiny, tmp_path, monkeypatch
):
    assert drafted_rows_verdict(tiny, 4, torch.float32, 2, tmp_path) is None
    head = tiny.lm_head
    # Its rows move by a little when a call has more than one, as a BLAS's blocking does.
    exact = head.forward
    monkeypatch.setattr(head, "forward", lambda x: exact(x) + 1e-3 * (x.shape[0] > 1), raising=False)
    assert drafted_rows_verdict(tiny, 4, torch.float32, 2, tmp_path) is None  # remembered
    found = drafted_rows_verdict(tiny, 4, torch.float32, 2, tmp_path, remeasure=True)
    assert found is not None and "other logits" in found
