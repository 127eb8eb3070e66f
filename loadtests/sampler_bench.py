"""CPU top-k/top-p: each row's largest values first against the whole sorted row, side by side.

    python -m agentgate.loadtests.sampler_bench [--rows 50] [--vocab 49152] [--flat-share 0.1] [--iters 20]

The sampler's truncation on a decode batch of ``rows`` with the default model's vocabulary:
logits drawn half peaked (a confident or constrained row), half moderate, and ``--flat-share``
of the rows flat (a nucleus that runs past the candidates, so those rows take the whole sort
too), temperature 0.7, top-p 0.9 and top-k 0 / 40 in turn. Gaussian logits are flatter than a
trained model's (a moderate row's nucleus often runs past 256 tokens): the count of rows that
took the whole sort is printed. It alternates the whole-row sort (the accelerators' path) and
the candidates' path (the CPU's), five rounds of ``iters`` calls each, prints both medians per
call, their ratio, and whether both masked the same tokens.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from agentgate.engine.runner.sampling import sampler


def _logits(rows: int, vocab: int, flat_share: float) -> torch.Tensor:
    torch.manual_seed(0)
    flat = round(rows * flat_share)
    spreads = torch.tensor([6.0, 2.0]).repeat(rows)[: rows - flat]
    return torch.randn(rows, vocab) * torch.cat([spreads, torch.full((flat,), 0.05)])[:, None] / 0.7


def _time(fn, logits: torch.Tensor, iters: int) -> float:
    start = time.perf_counter()
    for _ in range(iters):
        fn(logits.clone())
    return (time.perf_counter() - start) / iters


def run(rows: int, vocab: int, flat_share: float, iters: int, top_k: int) -> None:
    logits = _logits(rows, vocab, flat_share)
    tables = sampler._vocab_tables(vocab, logits.device)
    k = torch.full((rows,), top_k) if top_k else None
    p = torch.full((rows,), 0.9)
    whole = lambda x: sampler._apply_top_k_top_p_sorted_(x, k, p, tables)  # noqa: E731
    candidates = lambda x: sampler._apply_top_k_top_p_candidates_(x, k, p, tables)  # noqa: E731
    a, b = logits.clone(), logits.clone()
    whole(a)
    candidates(b)
    same = torch.equal(a.isinf(), b.isinf())
    past = int(((~a.isinf()).sum(-1) > sampler.TOP_CANDIDATES).sum())
    times: dict[str, list[float]] = {"whole sort": [], "candidates": []}
    for _ in range(5):  # alternate, so both see the same machine
        times["whole sort"].append(_time(whole, logits, iters))
        times["candidates"].append(_time(candidates, logits, iters))
    t_whole, t_candidates = (statistics.median(v) * 1e3 for v in times.values())
    print(
        f"{rows} rows x {vocab} tokens ({flat_share:.0%} flat), top_p 0.9, top_k {top_k}, {past} rows past "
        f"the candidates: whole sort {t_whole:6.1f} ms, candidates {t_candidates:6.1f} ms a call; "
        f"whole/candidates = {t_whole / t_candidates:.1f}x; "
        f"same tokens kept: {same}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=50)
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument(
        "--flat-share", type=float, default=0.1, help="share of rows whose nucleus is past the candidates"
    )
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    for top_k in (0, 40):
        run(args.rows, args.vocab, args.flat_share, args.iters, top_k)


if __name__ == "__main__":
    main()
