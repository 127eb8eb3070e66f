"""``--deterministic``: a token's result depends on its own sequence alone.

Linears are checked row by row against batches of other sizes and offsets,
attention token by token against the reference, and the whole engine
generates, for 16 mixed requests run together (with chunked prefill and
decodes mixed in one step), bit for bit what each generates alone: the same
tokens and the same logprobs, in float32 and bfloat16, dense and int4."""

from __future__ import annotations

import json
import logging
import random
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from agentgate.engine.attention.base import AttentionMetadata
from agentgate.engine.attention.batch_invariant import batch_invariant_attention
from agentgate.engine.attention.torch import paged_attention
from agentgate.engine.config import EngineConfig
from agentgate.engine.core import EngineCore
from agentgate.engine.errors import InvalidRequestError
from agentgate.engine.kernel_choice import row_invariance as row_check
from agentgate.engine.kernel_choice.row_choice_cache import MeasurementCache
from agentgate.engine.kernel_choice.row_invariance import (
    NoInvariantMode,
    make_rows_invariant,
    probe_sizes,
    row_invariance,
)
from agentgate.engine.layers.batch_invariant import MODES, RowInvariantLinear
from agentgate.engine.layers.cpu_linear import PackedLinear, can_pack
from agentgate.engine.sampling_params import SamplingParams

# SmolLM2's widths (the M-dependence of a float32 GEMM shows at K = 576),
# two layers and a small vocabulary so that 16 solo runs stay quick.
TINY_SMOLLM = {
    "vocab_size": 512,
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 2,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5,
    "rope_theta": 100000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
    "architectures": ["LlamaForCausalLM"],
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_mode_is_the_same_linear_map(mode, dtype):
    generator = torch.Generator().manual_seed(1)
    inner = nn.Linear(576, 320, bias=True).to(dtype)
    x = torch.randn(40, 576, generator=generator).to(dtype)
    linear = RowInvariantLinear(inner, mode, max_rows=16)  # 40 rows: three chunks
    with torch.inference_mode():
        # The padding rows are dropped, the chunks put back in order, the leading dims kept.
        torch.testing.assert_close(linear(x), F.linear(x, inner.weight, inner.bias), rtol=2e-2, atol=2e-2)
        assert linear(x.view(4, 10, 576)).shape == (4, 10, 320)


@pytest.mark.parametrize(("in_features", "out_features"), [(576, 320), (1536, 576)])
@pytest.mark.parametrize(
    ("dtype", "packed"),
    [(torch.float32, False), (torch.bfloat16, False), (torch.bfloat16, True)],
    ids=["float32", "bfloat16", "bfloat16-packed"],
)
def test_the_mode_the_check_chooses_here_gives_each_row_what_it_gives_that_row_alone(
    dtype, in_features, out_features, packed
):
    """Whatever this CPU's BLAS does (the check may choose any mode), the
    chosen mode holds for batches the check never tried: other rows, other
    sizes, other offsets, and batches past ``max_rows`` (run in chunks)."""
    if packed and not can_pack(dtype):
        pytest.skip("this CPU's oneDNN has no native bf16: the engine packs no linears here")
    torch.manual_seed(11)  # the same weights whatever ran before
    inner = nn.Linear(in_features, out_features, bias=True).to(dtype)
    if packed:
        inner = PackedLinear(inner.weight, inner.bias)
    mode = row_invariance(inner, dtype, max_rows=64)
    linear = RowInvariantLinear(inner, mode, max_rows=64)
    x = torch.randn(100, in_features, generator=torch.Generator().manual_seed(7)).to(dtype)
    with torch.inference_mode():
        alone = torch.cat([linear(x[i : i + 1]) for i in range(100)])
        for start, rows in ((0, 2), (3, 5), (1, 8), (7, 13), (2, 22), (0, 40), (11, 29), (5, 57), (1, 64), (0, 100)):
            assert torch.equal(linear(x[start : start + rows]), alone[start : start + rows]), (mode, start, rows)


class _RowByRow(nn.Module):
    """Invariant by construction: one row per call."""

    in_features, out_features = 64, 32

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.randn(32, 64, generator=torch.Generator().manual_seed(5))

    def forward(self, x):
        return torch.cat([row @ self.weight.T for row in x.split(1)])


class _OffTileDependent(_RowByRow):
    """A row's result moves with the batch's size unless the batch is whole
    tiles (as MKL's fp32 GEMV/GEMM paths on an AVX2 CPU): padding helps."""

    def forward(self, x):
        return super().forward(x) + (x.shape[0] % 8) * 1e-3


class _BlockingAtLargeBatches(_RowByRow):
    """Invariant below 16 rows, different from 16 rows on, multiples of 8
    included (as an AMX kernel's blocking): padding does not help, a fixed
    tile does."""

    def forward(self, x):
        return super().forward(x) + (1e-3 if x.shape[0] >= 16 else 0.0)


class _PositionDependent(_RowByRow):
    """A row's result depends on where in the call it sits: only a row alone
    at the top of its own call is invariant."""

    def forward(self, x):
        return super().forward(x) + torch.arange(x.shape[0])[:, None] * 1e-3


class _Noisy(_RowByRow):
    """Not even the same call twice gives the same result."""

    def forward(self, x):
        return super().forward(x) + torch.rand(x.shape[0], 1) * 1e-3


@pytest.mark.parametrize(
    ("linear", "mode"),
    [
        (_RowByRow, "as is"),
        (_OffTileDependent, "padded"),
        (_BlockingAtLargeBatches, "tiles"),
        (_PositionDependent, "per row"),
    ],
)
def test_the_check_picks_the_cheapest_mode_that_is_invariant(linear, mode):
    assert row_invariance(linear(), torch.float32, max_rows=64) == mode


def test_the_check_finds_a_difference_that_shows_only_in_large_batches():
    # _BlockingAtLargeBatches passes every probe below 16 rows: a check that
    # stopped at small batches (as it once did, at 19) would keep it as is.
    assert row_invariance(_BlockingAtLargeBatches(), torch.float32, max_rows=15) == "as is"
    assert row_invariance(_BlockingAtLargeBatches(), torch.float32, max_rows=16) == "tiles"


def test_a_verdict_is_remembered_between_starts_per_row_limit_and_checked_again_on_remeasure(tmp_path):
    calls = []

    class Counted(_BlockingAtLargeBatches):
        def forward(self, x):
            calls.append(x.shape[0])
            return super().forward(x)

    def start(max_rows: int = 32, remeasure: bool = False) -> tuple[dict, int]:
        calls.clear()
        cache = MeasurementCache(tmp_path, remeasure=remeasure)
        return dict(make_rows_invariant(nn.Sequential(Counted()), torch.float32, max_rows, cache)), len(calls)

    first, checked = start()
    again, remembered = start()
    assert first == again == {"tiles": 1}
    assert remembered * 10 < checked  # only the cost's two timings, not the check's hundreds of calls
    assert start(max_rows=15) == ({"as is": 1}, start(max_rows=15, remeasure=True)[1])  # its own verdict, checked
    assert start(remeasure=True) == ({"tiles": 1}, checked)


def test_probe_sizes_cover_small_batches_and_each_power_of_two_up_to_the_limit():
    sizes = set(probe_sizes(256))
    assert set(range(1, 34)) <= sizes and max(sizes) == 256
    assert {63, 64, 65, 127, 128, 129, 255, 256} <= sizes
    assert set(probe_sizes(5)) == {1, 2, 3, 4, 5}


def test_no_invariant_mode_is_an_error_and_deterministic_refuses_to_start(tmp_path, monkeypatch):
    with pytest.raises(NoInvariantMode, match="every mode"):
        row_invariance(_Noisy(), torch.float32)
    # The engine refuses --deterministic with a clear error rather than serving output that moves with the batch.
    monkeypatch.setattr(row_check, "MODES", ())
    (tmp_path / "config.json").write_text(json.dumps(TINY_SMOLLM))
    config = EngineConfig(
        model=str(tmp_path),
        load_format="dummy",
        dtype="float32",
        quantization="none",
        deterministic=True,
        num_kv_blocks=16,
        runner="sync",
    )
    with pytest.raises(InvalidRequestError, match="--deterministic cannot be honoured on this CPU"):
        EngineCore(config)


def test_each_choice_is_logged_with_its_cost(caplog):
    model = nn.Sequential(nn.Linear(64, 32), nn.Linear(32, 64), nn.Linear(64, 32))
    with caplog.at_level(logging.INFO, logger="agentgate.engine"):
        counts = make_rows_invariant(model, torch.float32, max_rows=32)
    assert sum(counts.values()) == 3 and all(isinstance(m, RowInvariantLinear) for m in model)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("deterministic: ")]
    assert len(lines) == 2  # one per distinct kind of linear, with its mode and cost
    assert {re.match(r"deterministic: (\w+ \d+x\d+): ", line).group(1) for line in lines} == {
        "Linear 64x32",
        "Linear 32x64",
    }
    assert all(
        re.search(r": (as is|padded|tiles|per row) \(16 rows [0-9.]+ ms, x[0-9.]+ the plain", line) for line in lines
    )


def _paged(seqs: list[tuple[int, int]], kv_heads: int = 2, head_dim: int = 16, block_size: int = 4):
    """A random paged cache holding ``seqs`` ((context length, query tokens)
    each) and the metadata of one step over them."""
    generator = torch.Generator().manual_seed(2)
    num_blocks = sum(-(-ctx // block_size) for ctx, _ in seqs) + 1
    k_cache = torch.randn(num_blocks, block_size, kv_heads, head_dim, generator=generator)
    v_cache = torch.randn(num_blocks, block_size, kv_heads, head_dim, generator=generator)
    width = max(-(-ctx // block_size) for ctx, _ in seqs)
    tables, next_block = torch.zeros(len(seqs), width, dtype=torch.int32), 1
    for i, (ctx, _) in enumerate(seqs):
        count = -(-ctx // block_size)
        tables[i, :count] = torch.arange(next_block, next_block + count)
        next_block += count
    starts = torch.tensor([0] + [q for _, q in seqs], dtype=torch.int32).cumsum(0).to(torch.int32)
    lens = torch.tensor([ctx for ctx, _ in seqs], dtype=torch.int32)
    meta = AttentionMetadata(
        slot_mapping=torch.full((int(starts[-1]),), -1),
        query_start_loc=starts,
        seq_lens=lens,
        block_tables=tables,
        max_query_len=max(q for _, q in seqs),
        max_seq_len=int(lens.max()),
        query_start_loc_cpu=starts,
        seq_lens_cpu=lens,
    )
    return k_cache, v_cache, meta


def test_batch_invariant_attention_is_the_reference_attention_and_depends_on_each_token_alone():
    heads, head_dim = 6, 16
    seqs = [(23, 23), (9, 1), (30, 7), (1, 1), (17, 1)]  # a prefill, decodes, an extend, a lone token
    k_cache, v_cache, meta = _paged(seqs)
    query = torch.randn(int(meta.query_start_loc[-1]), heads, head_dim, generator=torch.Generator().manual_seed(3))
    together = batch_invariant_attention(query, k_cache, v_cache, meta, 0.25)
    torch.testing.assert_close(together, paged_attention(query, k_cache, v_cache, meta, 0.25), rtol=1e-5, atol=1e-5)
    # The last token of the extend (sequence 2, position 29) asked for as a decode on its own.
    token = int(meta.query_start_loc[3]) - 1
    alone_meta = AttentionMetadata(
        slot_mapping=torch.full((1,), -1),
        query_start_loc=torch.tensor([0, 1], dtype=torch.int32),
        seq_lens=torch.tensor([30], dtype=torch.int32),
        block_tables=meta.block_tables[2:3],
        max_query_len=1,
        max_seq_len=30,
        query_start_loc_cpu=torch.tensor([0, 1], dtype=torch.int32),
        seq_lens_cpu=torch.tensor([30], dtype=torch.int32),
    )
    alone = batch_invariant_attention(query[token : token + 1], k_cache, v_cache, alone_meta, 0.25)
    assert torch.equal(alone[0], together[token])


def _requests() -> list[tuple[list[int], SamplingParams]]:
    """16 mixed requests: lengths 3-90 (some chunked), a shared prefix, greedy
    and seeded sampling, logprobs on."""
    rng = random.Random(4)
    shared = [rng.randrange(512) for _ in range(24)]
    requests = []
    for i in range(16):
        prompt = [rng.randrange(512) for _ in range(rng.choice([3, 11, 40, 90]))]
        if i % 4 == 0:
            prompt = shared + prompt
        temperature = 0.0 if i % 3 else 0.8
        params = SamplingParams(
            temperature=temperature, seed=i, max_tokens=rng.randint(6, 20), ignore_eos=True, logprobs=1
        )
        requests.append((prompt, params))
    return requests


def _run(core: EngineCore, requests, ids) -> dict[str, tuple[list[int], list[float]]]:
    for rid in ids:
        core.add_request(rid, *requests[int(rid)])
    out: dict[str, tuple[list[int], list[float]]] = {rid: ([], []) for rid in ids}
    while core.has_work:
        for step in core.step():
            tokens, logprobs = out[step.request_id]
            tokens.extend(step.new_token_ids)
            logprobs.extend(entry.logprob for entry in step.logprobs or [])
    return out


@pytest.mark.slow
@pytest.mark.parametrize(("dtype", "quantization"), [("float32", "none"), ("bfloat16", "none"), ("bfloat16", "int4")])
def test_deterministic_mode_generates_the_same_alone_as_in_a_batch(tmp_path, dtype, quantization):
    (tmp_path / "config.json").write_text(json.dumps(TINY_SMOLLM))
    config = EngineConfig(
        model=str(tmp_path),
        load_format="dummy",
        dtype=dtype,
        quantization=quantization,
        deterministic=True,
        max_num_batched_tokens=64,
        num_kv_blocks=256,
        enable_prefix_caching=False,
        runner="sync",
    )
    core = EngineCore(config)
    assert "deterministic" in core.runner.weights
    requests = _requests()
    batched = _run(core, requests, [str(i) for i in range(16)])
    for rid, expected in batched.items():
        assert _run(core, requests, [rid]) == {rid: expected}, f"request {rid} differs alone"


def test_deterministic_mode_is_refused_off_the_cpu():
    with pytest.raises(InvalidRequestError, match="CPU only"):
        EngineCore(EngineConfig(device="meta", deterministic=True))
