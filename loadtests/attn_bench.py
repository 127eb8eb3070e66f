"""Paged-attention kernels against dense SDPA on the same shapes, side by side.

    python -m agentgate.loadtests.attn_bench [--iters 50]

On CUDA, in bf16 with 16-token blocks and shuffled block tables: RoPE with
the KV write (against the reference's rotations and scatter), decode attention at
batch 32 and 1 with a 4096-token context (achieved K/V read bandwidth), and
causal prefill at a few lengths (TFLOP/s), each for a SmolLM2-135M-like
shape (9 q / 3 kv heads, dim 64) and a Qwen3-0.6B-like one (16 q / 8 kv,
dim 128). Each figure is one line with both times and triton/sdpa (below 1
means the Triton kernel is faster), plus the largest difference between the
two outputs, printed as a FIGURE line (`gpu_check.sh` gathers them). Timing:
CUDA events around ``iters`` calls after a warm-up.

Without CUDA it says so and runs a tiny smoke of the same code under the
Triton interpreter, whose times mean nothing.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before any @triton.jit runs

from agentgate.engine.attention import torch_rotary as reference  # noqa: E402
from agentgate.engine.attention.base import AttentionMetadata  # noqa: E402
from agentgate.engine.attention.triton import TritonAttentionBackend  # noqa: E402

BLOCK_SIZE = 16


@dataclass(frozen=True)
class Shape:
    name: str
    num_heads: int
    num_kv_heads: int
    head_dim: int


@dataclass(frozen=True)
class Plan:
    """What to measure on this machine."""

    device: torch.device
    dtype: torch.dtype
    shapes: tuple[Shape, ...]
    decode_batches: tuple[int, ...]
    decode_context: int
    prefill_lengths: tuple[int, ...]
    iters: int


def gpu_plan(iters: int) -> Plan:
    return Plan(
        device=torch.device("cuda"),
        dtype=torch.bfloat16,
        shapes=(Shape("SmolLM2-135M", 9, 3, 64), Shape("Qwen3-0.6B", 16, 8, 128)),
        decode_batches=(32, 1),
        decode_context=4096,
        prefill_lengths=(512, 1024, 2048, 4096),
        iters=iters,
    )


def smoke_plan() -> Plan:
    return Plan(
        device=torch.device("cpu"),
        dtype=torch.float16,
        shapes=(Shape("tiny", 3, 1, 16),),
        decode_batches=(2,),
        decode_context=64,
        prefill_lengths=(32,),
        iters=1,
    )


def time_ms(fn: Callable[[], object], iters: int, device: torch.device) -> float:
    """Mean milliseconds per call after two warm-up calls."""
    fn()
    fn()
    if device.type != "cuda":
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - start) * 1e3 / iters
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    begin.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return begin.elapsed_time(end) / iters


def paged_cache(batch: int, context: int, shape: Shape, plan: Plan) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random K/V caches holding ``batch`` contexts of ``context`` tokens in
    shuffled blocks, and their block tables."""
    blocks_per_seq = -(-context // BLOCK_SIZE)
    num_blocks = batch * blocks_per_seq
    cache_shape = (num_blocks, BLOCK_SIZE, shape.num_kv_heads, shape.head_dim)
    k_cache = torch.randn(cache_shape, device=plan.device, dtype=plan.dtype)
    v_cache = torch.randn(cache_shape, device=plan.device, dtype=plan.dtype)
    tables = torch.randperm(num_blocks, device=plan.device).to(torch.int32).view(batch, blocks_per_seq)
    return k_cache, v_cache, tables


def dense(cache: torch.Tensor, tables: torch.Tensor, context: int) -> torch.Tensor:
    """The paged contexts as SDPA's [batch, kv_heads, context, head_dim]."""
    blocks = cache[tables.long()]  # [batch, blocks, block_size, kv_heads, dim]
    batch = tables.shape[0]
    return blocks.reshape(batch, -1, *cache.shape[2:])[:, :context].transpose(1, 2).contiguous()


def metadata(
    q_lens: list[int], seq_lens: list[int], tables: torch.Tensor, slots: torch.Tensor | None = None
) -> AttentionMetadata:
    """The step's layout; ``slots``: where its keys and values are written (default: nowhere, -1)."""
    device = tables.device
    qsl = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    return AttentionMetadata(
        slot_mapping=torch.full((sum(q_lens),), -1, device=device) if slots is None else slots,
        query_start_loc=qsl.to(device),
        seq_lens=lens.to(device),
        block_tables=tables,
        max_query_len=max(q_lens),
        max_seq_len=max(seq_lens),
        query_start_loc_cpu=qsl,
        seq_lens_cpu=lens,
    )


def report(label: str, triton_ms: float, sdpa_ms: float, extra: str, max_diff: float) -> None:
    print(
        f"FIGURE {label}: triton {triton_ms:.4f} ms, sdpa {sdpa_ms:.4f} ms, "
        f"triton/sdpa {triton_ms / sdpa_ms:.2f}x{extra}, max |diff| {max_diff:.3g}",
        flush=True,
    )


def bench_rotary_kv(backend: TritonAttentionBackend, shape: Shape, plan: Plan) -> None:
    """RoPE on a decode step's and a long prefill's queries and keys, with
    the keys and values stored in the cache: the fused kernel against the
    reference's rotations and scatter."""
    for num_tokens in (plan.decode_batches[0], plan.prefill_lengths[-1]):
        k_cache, v_cache, tables = paged_cache(1, 2 * num_tokens, shape, plan)
        num_slots = k_cache.shape[0] * BLOCK_SIZE
        slots = torch.randperm(num_slots, device=plan.device)[:num_tokens]
        meta = metadata([num_tokens], [num_tokens], tables, slots)
        new = dict(device=plan.device, dtype=plan.dtype)
        query = torch.randn(num_tokens, shape.num_heads, shape.head_dim, **new)
        key = torch.randn(num_tokens, shape.num_kv_heads, shape.head_dim, **new)
        value = torch.randn_like(key)
        angles = torch.rand(num_tokens, shape.head_dim // 2, device=plan.device) * 6.3
        cos, sin = angles.cos(), angles.sin()
        ref_k, ref_v = k_cache.clone(), v_cache.clone()

        def run_triton() -> None:
            backend.rotary_write_kv(query, key, value, cos, sin, k_cache, v_cache, meta)

        def run_torch() -> None:
            reference.rotary_write_kv(query, key, value, cos, sin, ref_k, ref_v, slots)

        triton_ms = time_ms(run_triton, plan.iters, plan.device)
        torch_ms = time_ms(run_torch, plan.iters, plan.device)
        diff = (k_cache.float() - ref_k.float()).abs().max().item()
        moved = 2 * (query.numel() + 2 * key.numel()) * key.element_size()  # read and write q, k, v
        print(
            f"FIGURE rotary+kv_write {shape.name} tokens={num_tokens}: triton {triton_ms:.4f} ms "
            f"({moved / triton_ms / 1e6:.0f} GB/s), torch {torch_ms:.4f} ms, "
            f"triton/torch {triton_ms / torch_ms:.2f}x, max |diff| {diff:.3g}",
            flush=True,
        )


def bench_decode(backend: TritonAttentionBackend, shape: Shape, batch: int, plan: Plan) -> None:
    context = plan.decode_context
    k_cache, v_cache, tables = paged_cache(batch, context, shape, plan)
    query = torch.randn(batch, shape.num_heads, shape.head_dim, device=plan.device, dtype=plan.dtype)
    meta = metadata([1] * batch, [context] * batch, tables)
    scale = shape.head_dim**-0.5
    k, v = dense(k_cache, tables, context), dense(v_cache, tables, context)
    q = query.unsqueeze(2)  # [batch, heads, 1, dim]

    def run_triton() -> torch.Tensor:
        return backend.paged_attention(query, k_cache, v_cache, meta, scale)

    def run_sdpa() -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=True)

    diff = (run_triton().float() - run_sdpa().squeeze(2).float()).abs().max().item()
    triton_ms = time_ms(run_triton, plan.iters, plan.device)
    sdpa_ms = time_ms(run_sdpa, plan.iters, plan.device)
    kv_bytes = 2 * k.numel() * k.element_size()
    bandwidth = (
        f"; K/V read {kv_bytes / 1e6:.0f} MB at {kv_bytes / triton_ms / 1e6:.0f} GB/s"
        f" (sdpa {kv_bytes / sdpa_ms / 1e6:.0f} GB/s)"
    )
    label = (
        f"decode {shape.name} ({shape.num_heads}q/{shape.num_kv_heads}kv, d{shape.head_dim}) "
        f"batch={batch} ctx={context} {str(plan.dtype).removeprefix('torch.')}"
    )
    report(label, triton_ms, sdpa_ms, bandwidth, diff)


def bench_prefill(backend: TritonAttentionBackend, shape: Shape, length: int, plan: Plan) -> None:
    k_cache, v_cache, tables = paged_cache(1, length, shape, plan)
    query = torch.randn(length, shape.num_heads, shape.head_dim, device=plan.device, dtype=plan.dtype)
    meta = metadata([length], [length], tables)
    scale = shape.head_dim**-0.5
    k, v = dense(k_cache, tables, length), dense(v_cache, tables, length)
    q = query.transpose(0, 1).unsqueeze(0)  # [1, heads, length, dim]

    def run_triton() -> torch.Tensor:
        return backend.paged_attention(query, k_cache, v_cache, meta, scale)

    def run_sdpa() -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=True)

    expect = run_sdpa().squeeze(0).transpose(0, 1)
    diff = (run_triton().float() - expect.float()).abs().max().item()
    triton_ms = time_ms(run_triton, plan.iters, plan.device)
    sdpa_ms = time_ms(run_sdpa, plan.iters, plan.device)
    flops = 2 * 2 * shape.num_heads * shape.head_dim * length * length / 2  # causal half
    rate = f"; {flops / triton_ms / 1e9:.1f} TFLOP/s (sdpa {flops / sdpa_ms / 1e9:.1f})"
    label = (
        f"prefill {shape.name} ({shape.num_heads}q/{shape.num_kv_heads}kv, d{shape.head_dim}) "
        f"causal len={length} {str(plan.dtype).removeprefix('torch.')}"
    )
    report(label, triton_ms, sdpa_ms, rate, diff)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=50, help="timed calls per figure")
    args = parser.parse_args(argv)
    if torch.cuda.is_available():
        plan = gpu_plan(args.iters)
        print(f"attn_bench on {torch.cuda.get_device_name()}, torch {torch.__version__}")
    else:
        print("attn_bench needs a CUDA GPU for real figures; tiny interpreter smoke, times meaningless")
        plan = smoke_plan()
    torch.manual_seed(0)
    backend = TritonAttentionBackend()
    for shape in plan.shapes:
        bench_rotary_kv(backend, shape, plan)
        for batch in plan.decode_batches:
            bench_decode(backend, shape, batch, plan)
        for length in plan.prefill_lengths:
            bench_prefill(backend, shape, length, plan)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
