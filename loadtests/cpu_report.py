"""What this CPU does to the model's arithmetic: ``python -m agentgate.loadtests.cpu_report``.

Machines of one kind differ (an AVX2-only EPYC, a Xeon with AVX-512 BF16,
one with AMX tiles), and what the engine computes and how fast moves with
them: greedy answers near a tie, which ``--deterministic`` mode holds, where
int4 stops paying. This prints, in order:

1. the CPU: model, cores, the ISA flags that matter, what torch, oneDNN and
   MKL say they use, whether AMX is usable (flags, kernel permission, oneDNN),
   and how fast it streams memory at torch's thread count (`loadtests.bandwidth`,
   under 2 s: the limit every decode step time has beside it);
2. the kernel each of the model's matmuls runs, per weight form (int4 as the
   GGUF stores it, dense bfloat16 through packed oneDNN, dense float32), at 1
   and 16 rows (from oneDNN's and MKL's own verbose lines);
3. the ``--deterministic`` mode the load-time check chooses for each, with its
   cost (`engine.kernel_choice.row_invariance`);
4. the int4 / dense crossover: one decoder layer's projections at 1-256 rows
   per form, and from how many rows dense bfloat16 is faster than int4.

    python -m agentgate.loadtests.cpu_report            # everything, on the default model (~1 min)
    python -m agentgate.loadtests.cpu_report --brief    # part 1 only, ~2 s (what scripts/test.sh prints)
    python -m agentgate.loadtests.cpu_report --model loadtests/configs/qwen3-0.6b --load-format dummy
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from agentgate.engine.kernel_choice.row_choice import fastest_seconds
from agentgate.engine.kernel_choice.row_invariance import choose_mode
from agentgate.engine.layers.batch_invariant import MAX_CHECKED_ROWS
from agentgate.engine.layers.cpu_linear import PackedLinear, can_pack
from agentgate.engine.loaders import load_model
from agentgate.engine.models.config import cpu_has_native_bf16
from agentgate.engine.models.llama import CausalLM
from agentgate.loadtests import bandwidth

# (label, load_model options) of each weight form the engine can serve on a CPU.
FORMS: tuple[tuple[str, dict[str, str]], ...] = (
    ("int4 as stored", {"quantization": "auto"}),
    ("bfloat16 dense", {"dtype": "bfloat16", "quantization": "none"}),
    ("float32 dense", {"dtype": "float32", "quantization": "none"}),
)
ISA_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")
CROSSOVER_ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@contextlib.contextmanager
def captured_stdout() -> Iterator[list[str]]:
    """What C code writes to file descriptor 1 inside the block (oneDNN and
    MKL print their verbose lines there), as lines, once the block ends."""
    lines: list[str] = []
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1)
        try:
            yield lines
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
            sink.seek(0)
            lines.extend(sink.read().decode(errors="replace").splitlines())


def blas_verbose(call: Callable[[], object]) -> list[str]:
    """oneDNN's and MKL's verbose lines for one call."""
    with captured_stdout() as lines:
        with (
            torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON),
            torch.backends.mkl.verbose(torch.backends.mkl.VERBOSE_ON),
        ):
            call()
    return lines


def kernels_in(lines: list[str]) -> list[str]:
    """The implementations named by verbose lines: ``oneDNN brg_matmul:avx512_core_bf16``, ``MKL SGEMM``."""
    found = []
    for line in lines:
        fields = line.split(",")
        if line.startswith("onednn_verbose") and len(fields) > 6 and fields[2] == "primitive" and fields[3] == "exec":
            found.append(f"oneDNN {fields[6]}")
        elif match := re.match(r"MKL_VERBOSE (\w+)\(", line):
            found.append(f"MKL {match.group(1)}")
    return list(dict.fromkeys(found))


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    match = re.search(r"^flags\s*:(.*)$", text, re.MULTILINE)
    return set(match.group(1).split()) if match else set()


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        match = re.search(r"^model name\s*:\s*(.*)$", Path("/proc/cpuinfo").read_text(), re.MULTILINE)
        if match:
            return match.group(1).strip()
    return "unknown CPU"


def isa_lines() -> list[str]:
    """Part 1: the CPU and what the math libraries make of it (no model, ~1 s)."""
    flags = cpu_flags()
    x = torch.randn(16, 64)
    bf16_packs = can_pack(torch.bfloat16)
    packed = PackedLinear(x.bfloat16(), None) if bf16_packs else None
    # The first verbose call of each library names its ISA (oneDNN's "info" lines, MKL's banner).
    first = blas_verbose(lambda: (x @ x.T, packed(x.bfloat16()) if packed is not None else None))
    onednn_isa = next((line.split("isa:", 1)[1] for line in first if ",isa:" in line), "not reported")
    mkl = next((line for line in first if line.startswith("MKL_VERBOSE") and " for " in line), "")
    mkl_isa = re.sub(r"^MKL_VERBOSE\s+", "", mkl).split(", Lnx")[0] if mkl else "not used"
    granted = bool(torch.cpu._init_amx()) if hasattr(torch.cpu, "_init_amx") else False
    amx_flags = sorted(f for f in flags if f.startswith("amx"))
    onednn_amx = "amx" in onednn_isa.lower()
    return [
        f"cpu: {cpu_model()}, {os.cpu_count()} cores; torch {torch.__version__} "
        f"(capability {torch.backends.cpu.get_cpu_capability()}), {torch.get_num_threads()} threads",
        "isa flags: " + " ".join(f"{f}={'yes' if f in flags else 'no'}" for f in ISA_FLAGS),
        f"amx: usable={'yes' if granted and onednn_amx else 'no'} (cpu flags: {' '.join(amx_flags) or 'none'}; "
        f"kernel grants tiles: {'yes' if granted else 'no'}; oneDNN uses it: {'yes' if onednn_amx else 'no'})",
        f"oneDNN: isa {onednn_isa}; bf16 linears (packed): {'yes' if bf16_packs else 'no'}; bf16 in hardware "
        f"(--dtype auto takes bfloat16): {'yes' if cpu_has_native_bf16() else 'no, float32'}",
        f"MKL: {mkl_isa}",
    ]


@dataclass
class Form:
    """One weight form of the model, loaded as the engine runs it."""

    label: str
    model: CausalLM
    dtype: torch.dtype

    def linears(self) -> dict[str, nn.Module]:
        """One linear of each kind (layer 0's projections, the LM head), by name."""
        attn, mlp = self.model.layers[0].self_attn, self.model.layers[0].mlp
        return {
            "qkv": attn.qkv_proj,
            "o": attn.o_proj,
            "gate_up": mlp.gate_up_proj,
            "down": mlp.down_proj,
            "lm_head": self.model.head_linear(),
        }


def load_forms(model: str | None, load_format: str) -> list[Form]:
    forms = []
    for label, options in FORMS:
        loaded = load_model(model, load_format=load_format, **options)
        loaded.model.pack_for_cpu()  # as the CPU runner does
        forms.append(Form(f"{label} ({loaded.quantization})", loaded.model, loaded.model.embed_tokens.weight.dtype))
    return forms


def kernel_lines(forms: list[Form]) -> list[str]:
    """Part 2: the kernel each matmul runs, at 1 and 16 rows."""
    lines = ["matmul kernels (1 row / 16 rows):"]
    for form in forms:
        for name, linear in form.linears().items():
            seen = []
            for rows in (1, 16):
                x = torch.randn(rows, linear.in_features).to(form.dtype)
                with torch.inference_mode():
                    named = kernels_in(blas_verbose(lambda linear=linear, x=x: linear(x)))
                seen.append(", ".join(named) or f"ATen {type(linear).__name__} (no oneDNN/MKL call)")
            shape = f"{linear.in_features}x{linear.out_features}"
            lines.append(f"  {form.label:<28} {name:<8} {shape:<10} {' / '.join(dict.fromkeys(seen))}")
    return lines


def deterministic_lines(forms: list[Form], max_rows: int) -> list[str]:
    """Part 3: the mode ``--deterministic`` chooses for each matmul, with its cost."""
    lines = [f"--deterministic modes (checked up to {max_rows} rows; cost at 16 rows against the plain kernel):"]
    for form in forms:
        for name, linear in form.linears().items():
            start = time.perf_counter()
            try:
                choice = str(choose_mode(linear, form.dtype, max_rows))
            except RuntimeError as exc:  # NoInvariantMode: --deterministic refuses to start here
                choice = f"NONE: {exc}"
            lines.append(f"  {form.label:<28} {name:<8} {choice} [checked in {time.perf_counter() - start:.1f} s]")
    return lines


def crossover_lines(forms: list[Form], repeat: int) -> list[str]:
    """Part 4: one layer's projections (qkv, o, gate_up, down) per form and
    row count, and where dense bfloat16 overtakes int4."""
    header = f"  {'rows':>5} " + " ".join(f"{form.label.split(' (')[0]:>16}" for form in forms)
    lines = ["int4 / dense crossover (one decoder layer's projections, ms per call, fastest of runs):", header]
    times: dict[str, list[float]] = {form.label: [] for form in forms}
    for rows in CROSSOVER_ROWS:
        cells = []
        for form in forms:
            projections = [m for name, m in form.linears().items() if name != "lm_head"]
            inputs = [torch.randn(rows, m.in_features).to(form.dtype) for m in projections]
            ms = (
                fastest_seconds(lambda ps=projections, xs=inputs: [m(x) for m, x in zip(ps, xs, strict=True)], repeat)
                * 1e3
            )
            times[form.label].append(ms)
            cells.append(f"{ms:>16.3f}")
        lines.append(f"  {rows:>5} " + " ".join(cells))
    int4, bf16 = (times[form.label] for form in forms[:2])
    faster = [rows for rows, a, b in zip(CROSSOVER_ROWS, int4, bf16, strict=True) if b < a]
    if faster:
        at = CROSSOVER_ROWS.index(faster[0])
        lines.append(
            f"crossover: dense bfloat16 is faster than int4 from {faster[0]} rows (at {faster[0]}: "
            f"x{int4[at] / bf16[at]:.2f})"
        )
    else:
        lines.append(f"crossover: int4 is faster than dense bfloat16 up to {CROSSOVER_ROWS[-1]} rows")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--brief", action="store_true", help="the CPU and its memory only (part 1), no model")
    parser.add_argument("--model", default=None, help="a .gguf file, an HF directory or a config (default model)")
    parser.add_argument("--load-format", default="auto", help="auto, gguf, safetensors or dummy")
    parser.add_argument("--max-rows", type=int, default=MAX_CHECKED_ROWS, help="largest batch the check tries")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per crossover cell")
    args = parser.parse_args(argv)
    for line in isa_lines():
        print(line, flush=True)
    print(bandwidth.measure().line(), flush=True)
    if args.brief:
        return
    forms = load_forms(args.model, args.load_format)
    for part in (kernel_lines(forms), deterministic_lines(forms, args.max_rows), crossover_lines(forms, args.repeat)):
        print("\n".join(part), flush=True)


if __name__ == "__main__":
    main()
