"""`python -m agentgate.loadtests.cpu_report`: what this CPU does to the model's arithmetic."""

from __future__ import annotations

import re

import torch

from agentgate.loadtests import cpu_report
from agentgate.loadtests.cpu_report import ISA_FLAGS, cpu_flags, kernels_in
from tests.support.tiny_models import tiny_llama_dir


def test_the_brief_report_names_this_cpu_and_what_the_libraries_use(capfd):
    cpu_report.main(["--brief"])
    lines = capfd.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["cpu", "isa flags", "amx", "oneDNN", "MKL", "memory"]
    flags = cpu_flags()
    # Each flag as /proc/cpuinfo reports it.
    assert lines[1] == "isa flags: " + " ".join(f"{f}={'yes' if f in flags else 'no'}" for f in ISA_FLAGS)
    assert re.match(
        r"amx: usable=(yes|no) \(cpu flags: .*; kernel grants tiles: (yes|no); oneDNN uses it: (yes|no)\)$", lines[2]
    )
    if "amx_tile" not in flags:
        assert lines[2].startswith("amx: usable=no")
    # bf16 by default only with bf16 in hardware: oneDNN's packed bf16 linears run (emulated) on any AVX-512.
    in_hardware = "yes" if {"avx512_bf16", "amx_bf16"} & flags else "no, float32"
    assert lines[3].endswith(f"bf16 in hardware (--dtype auto takes bfloat16): {in_hardware}"), lines[3]
    memory = re.fullmatch(
        r"memory: ([\d.]+) GB/s streaming read \(512 MB tensor summed at (\d+) threads, .*\)", lines[5]
    )
    assert memory, lines[5]
    # Any machine this runs on reads memory faster than 0.5 GB/s and slower than 10 TB/s.
    assert 0.5 < float(memory.group(1)) < 10_000 and int(memory.group(2)) == torch.get_num_threads()


def test_verbose_lines_name_the_kernels():
    lines = [
        "onednn_verbose,v1,info,cpu,isa:Intel AVX 10.1",
        "onednn_verbose,v1,primitive,create_nested:cache_miss,cpu,matmul,brg_matmul:avx512_core_bf16,undef,src:bf16",
        "onednn_verbose,v1,primitive,exec,cpu,inner_product,brg_matmul:avx512_core_bf16,forward_inference,src:bf16",
        "onednn_verbose,v1,primitive,exec,cpu,inner_product,brg_matmul:avx512_core_amx,forward_inference,src:bf16",
        "MKL_VERBOSE oneMKL 2024.0 Update 2 Product build 20240605 for Intel(R) 64 architecture, Lnx 2.30GHz",
        "MKL_VERBOSE SGEMM(T,N,3072,16,576,0x1,0x2,576,0x3,576,0x4,0x5,3072) 16.59ms CNR:OFF Dyn:1 TID:0  NThr:2",
        "MKL_VERBOSE SGEMM(T,N,3072,1,576,0x1,0x2,576,0x3,576,0x4,0x5,3072) 1.1ms CNR:OFF Dyn:1 TID:0  NThr:2",
    ]
    assert kernels_in(lines) == ["oneDNN brg_matmul:avx512_core_bf16", "oneDNN brg_matmul:avx512_core_amx", "MKL SGEMM"]


def test_the_full_report_covers_every_form_and_matmul(tmp_path, capfd):
    cpu_report.main(
        ["--model", str(tiny_llama_dir(tmp_path)), "--load-format", "dummy", "--max-rows", "16", "--repeat", "1"]
    )
    out = capfd.readouterr().out
    for part in ("matmul kernels", "--deterministic modes (checked up to 16 rows", "int4 / dense crossover"):
        assert part in out
    kernels = [line for line in out.splitlines() if re.match(r"  \S.* (qkv|o|gate_up|down|lm_head) +\d+x\d+ ", line)]
    assert len(kernels) == 3 * 5, out  # three weight forms, five kinds of matmul
    modes = re.findall(r": (as is|padded|tiles|per row|NONE)[ :]", out)
    assert len(modes) == 15 and "NONE" not in modes, out
    rows = [line.split()[0] for line in out.splitlines() if re.match(r"\s+\d+( +[\d.]+){3}$", line)]
    assert rows == [str(n) for n in cpu_report.CROSSOVER_ROWS]
    assert re.search(r"^crossover: (dense bfloat16 is faster than int4 from \d+ rows|int4 is faster)", out, re.M)
