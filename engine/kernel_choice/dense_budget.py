"""Which quantized linears row choice gives a dense bf16 copy: those that fit in a share of free memory.

A dense copy costs 2 bytes per weight, about 4.5x the int4 weights (a 7B
model: some 13 GiB beside about 3.7 GiB). Copies are kept only while their sum
fits within `DENSE_SHARE` of the memory the kernel calls available
(``MemAvailable`` in /proc/meminfo) right after loading; the linears past
that stay int4 only and run the quantized kernels at every batch size.

Half, because what is available after loading is not all the engine's to
spend: the KV cache (1 GiB on the CPU by default) and a step's activations
are allocated after the copies, and the gateway, Redis and whatever else runs
on the host need room; a copy that pushes the host into swap or the OOM
killer costs far more than the quantized kernels lose on large batches.

The order in which linears get their copy: the decoder layers' projections,
layer by layer, then the LM head. Each projection gains about the same per
byte (the gain is per weight), and prompt rows (prefill chunks, a cached
prompt's recomputed tail) go through every one of them in the dense form,
where it wins most (16 prompts' prefill x0.53 on the default model); layer
order keeps whole layers together and the report simple. The LM head comes
last: it reads sampled rows only (one per decoding request and per finished
prompt), so it sees large batches only when many requests decode at once.
Where /proc/meminfo cannot be read, every copy is kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agentgate.engine.layers.quant_linear import QuantLinear

DENSE_SHARE = 0.5
Targets = list[tuple[str, QuantLinear]]


def mem_available_bytes(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """``MemAvailable`` in bytes; None where it cannot be read."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def dense_bytes(linear: QuantLinear) -> int:
    """What ``linear``'s dense bf16 copy costs."""
    return 2 * linear.in_features * linear.out_features


@dataclass(frozen=True)
class CopyPlan:
    """The linears that get a dense copy (``keep``, in the module docstring's order), those that stay
    int4 only (``leave``), and the ``MemAvailable`` it was planned from (None: not known, no limit)."""

    keep: Targets
    leave: Targets
    available: int | None

    def describe(self) -> str:
        kept = sum(dense_bytes(m) for _, m in self.keep)
        said = f"{kept / 2**20:.0f} MiB of dense copies"
        if self.available is None:
            return f"{said} (MemAvailable unknown: no limit)"
        budget = f"{DENSE_SHARE:.0%} of the {self.available / 2**30:.1f} GiB available after loading"
        if not self.leave:
            return f"{said}, all {len(self.keep)} linears within {budget}"
        left = sum(dense_bytes(m) for _, m in self.leave)
        layers = sorted({int(name.split(".")[1]) for name, _ in self.keep if name.startswith("layers.")})
        within = f" (decoder layers {layers[0]}-{layers[-1]})" if layers else ""
        return (
            f"{said} for {len(self.keep)} of {len(self.keep) + len(self.leave)} linears{within}; the other "
            f"{len(self.leave)} ({left / 2**20:.0f} MiB more, the LM head last) would pass {budget}: int4 only"
        )


def plan_copies(targets: Targets, available: int | None) -> CopyPlan:
    """The first of ``targets`` (the decoder layers' projections in order, then the rest) whose
    copies fit together within `DENSE_SHARE` of ``available`` bytes."""
    ordered = [t for t in targets if t[0].startswith("layers.")] + [
        t for t in targets if not t[0].startswith("layers.")
    ]
    if available is None:
        return CopyPlan(ordered, [], None)
    budget, total = DENSE_SHARE * available, 0
    for i, (_, linear) in enumerate(ordered):
        total += dense_bytes(linear)
        if total > budget:
            return CopyPlan(ordered[:i], ordered[i:], available)
    return CopyPlan(ordered, [], available)
