"""The compiled CPU attention kernels (`engine/kernels/decode_attention_cpu.c`): decode attention,
each decode row over exactly its own context read from the paged cache in place, and RoPE with the
KV-cache write of a step's tokens in one call (bit for bit the torch path's, about a dozen torch
calls a layer fewer: at batch 1, 2.6 to 1.7 ms of a 14 ms default-model step on a 2-core Xeon).

The torch path (`engine.attention.torch._decode_attention`) gathers every row's blocks into a new
tensor, then multiplies; on a CPU that streams each context three times (read, write, read again)
and costs about 40 % of a 50-row fp32 step. The kernel reads it once. Each row is computed by one
thread in one fixed order, so a row's bits never depend on the batch around it.

It is built at first use with the system C compiler (``$CC``, else ``cc``) and kept in
``<cache dir>/kernels/`` under the hash of its source, the compiler, the flags and the CPU, so a
later start only loads it (`load_native_attention`). Where no compiler builds it the engine keeps
the torch path and says so in one log line. Chosen by ``--cpu-attention`` (auto: the kernel where
it builds; torch: never).

A deviation from DESIGN.md's "on CPU the references run": the torch path stays the reference the
kernel is tested against and the fallback, but the CPU serves through the kernel, as the design's
compiled CPU step would through an opaque attention op. It is called from Python, not registered
as a torch.library custom op: compiling the step around such an op paid at most 1.19x at batch 1
on this CPU for 10-15 s of compile a batch size (`loadtests.compile_probe`, issue 52), so nothing
compiles it. The library also holds the norm's kernel (`engine.layers.native_norm`)."""

from __future__ import annotations

import ctypes
import hashlib
import importlib.resources
import logging
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import torch

log = logging.getLogger("agentgate.engine")

SOURCES = ("decode_attention_cpu.c", "rms_norm_cpu.c")  # built into one library
HEADERS = ("cpu_vectors.h",)  # what they include: written beside them and hashed with them
FLAGS = ("-O2", "-march=native", "-fopenmp", "-shared", "-fPIC", "-Werror=implicit-function-declaration")
COMPILE_TIMEOUT_S = 120.0
MAX_HEAD_DIM = 256
MAX_GROUP = 64  # query heads per KV head
LANES = 16
CACHE_DTYPES = (torch.float32, torch.bfloat16)


class NativeAttention:
    """The loaded kernels: `rotary_write_kv` (RoPE and the cache write of a step's tokens) and
    `__call__` (decode rows' attention)."""

    def __init__(self, library: ctypes.CDLL, path: Path) -> None:
        self.path = path
        self.library = library  # its other kernels: the norm's (`engine.layers.native_norm`)
        pointer, int_, int64, float_ = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_float
        self._kernel = library.decode_attention
        self._kernel.restype = ctypes.c_int
        # decode_attention(query, k_cache, v_cache, cache_bf16, block_tables, table_stride, seq_lens, rows,
        # num_heads, num_kv_heads, head_dim, block_size, scale, scratch, max_seq_len, threads, query_bf16, out)
        self._kernel.argtypes = (
            [pointer] * 3 + [int_, pointer, int64, pointer] + [int_] * 5 + [float_, pointer, int64, int_, int_, pointer]
        )
        self._rotary = library.rotary_write_kv
        self._rotary.restype = ctypes.c_int
        # rotary_write_kv(query, q_stride, key, k_stride, value, v_stride, inputs_bf16, cos, sin, slots, tokens,
        # num_heads, num_kv_heads, head_dim, k_cache, v_cache, cache_bf16, threads, out_query)
        self._rotary.argtypes = (
            [pointer, int64] * 3
            + [int_]
            + [pointer] * 3
            + [int64]
            + [int_] * 3
            + [pointer] * 2
            + [int_] * 2
            + [pointer]
        )
        self._scratch = torch.empty(0, dtype=torch.float32)

    @staticmethod
    def unsupported(cache_dtype: torch.dtype, num_heads: int, num_kv_heads: int, head_dim: int) -> str | None:
        """Why the kernel cannot take a model's KV cache and heads; None when it can."""
        if cache_dtype not in CACHE_DTYPES:
            return f"a {cache_dtype} KV cache (it reads float32 and bfloat16)"
        if head_dim % LANES or head_dim > MAX_HEAD_DIM:
            return f"head_dim {head_dim} (it takes multiples of {LANES} up to {MAX_HEAD_DIM})"
        if num_heads % num_kv_heads or num_heads // num_kv_heads > MAX_GROUP:
            return f"{num_heads} query heads over {num_kv_heads} KV heads"
        return None

    def __call__(
        self,
        query: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        scale: float,
    ) -> torch.Tensor:
        """Attention of ``query`` [rows, heads, head_dim] (one token per row, at the last of its
        ``seq_lens`` positions, its key already written) over the rows' cached contexts, in
        ``query``'s dtype. ``block_tables`` [rows, >= blocks] int32; ``max_seq_len`` bounds
        ``seq_lens`` (a host value: no read of the device tensor). Rows of length 0 get zeros."""
        rows, num_heads, head_dim = query.shape
        num_kv_heads, block_size = k_cache.shape[2], k_cache.shape[1]
        threads = max(torch.get_num_threads(), 1)
        group = num_heads // num_kv_heads
        longest = max(max_seq_len, 1)
        needed = threads * group * longest
        if self._scratch.numel() < needed:
            self._scratch = torch.empty(needed, dtype=torch.float32)
        # A float32 or bfloat16 query is read as it is and the output written in its dtype (rounded
        # once, as .to() would); another dtype goes through float32.
        q = (query if query.dtype in CACHE_DTYPES else query.to(torch.float32)).contiguous()
        tables = block_tables.to(torch.int32)
        if tables.stride(1) != 1:
            tables = tables.contiguous()
        lens = seq_lens.to(torch.int32).contiguous()
        out = torch.empty(rows, num_heads, head_dim, dtype=q.dtype)
        failed = self._kernel(
            q.data_ptr(),
            k_cache.data_ptr(),
            v_cache.data_ptr(),
            int(k_cache.dtype == torch.bfloat16),
            tables.data_ptr(),
            tables.stride(0),
            lens.data_ptr(),
            rows,
            num_heads,
            num_kv_heads,
            head_dim,
            block_size,
            scale,
            self._scratch.data_ptr(),
            longest,
            threads,
            int(q.dtype == torch.bfloat16),
            out.data_ptr(),
        )
        if failed:
            raise RuntimeError(f"decode attention kernel failed ({failed}): shapes {tuple(query.shape)}, {max_seq_len}")
        return out if out.dtype == query.dtype else out.to(query.dtype)

    @staticmethod
    def takes_rotary(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cos: torch.Tensor) -> bool:
        """Whether `rotary_write_kv` takes these: one dtype it reads, each token's heads contiguous,
        float32 RoPE rows (the model's tables gathered at the positions)."""
        dtype, head_dim = query.dtype, query.shape[2]
        return (
            dtype in CACHE_DTYPES
            and key.dtype == dtype
            and value.dtype == dtype
            and cos.dtype == torch.float32
            and all(x.stride(2) == 1 and x.stride(1) == head_dim for x in (query, key, value))
        )

    def rotary_write_kv(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> torch.Tensor:
        """`AttentionBackend.rotary_write_kv` in one call: the same numbers as the torch path
        (`torch_rotary.rotary_write_kv`), bit for bit. Inputs as `takes_rotary` says; a token whose
        slot is -1 is not written (no host read of the slots)."""
        tokens, num_heads, head_dim = query.shape
        cos, sin, slots = cos.contiguous(), sin.contiguous(), slot_mapping.to(torch.int64).contiguous()
        out = torch.empty(query.shape, dtype=query.dtype)
        failed = self._rotary(
            query.data_ptr(),
            query.stride(0),
            key.data_ptr(),
            key.stride(0),
            value.data_ptr(),
            value.stride(0),
            int(query.dtype == torch.bfloat16),
            cos.data_ptr(),
            sin.data_ptr(),
            slots.data_ptr(),
            tokens,
            num_heads,
            key.shape[1],
            head_dim,
            k_cache.data_ptr(),
            v_cache.data_ptr(),
            int(k_cache.dtype == torch.bfloat16),
            max(torch.get_num_threads(), 1),
            out.data_ptr(),
        )
        if failed:
            raise RuntimeError(f"rotary KV write kernel failed ({failed}): shapes {tuple(query.shape)}")
        return out


def _compiler() -> str | None:
    return shutil.which(os.environ.get("CC") or "cc")


def _cpu_identity() -> str:
    """What -march=native compiles for: the CPU's model name and flags."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        import platform

        return platform.processor() or platform.machine()
    wanted = ("model name", "flags", "Features", "CPU part")
    return "\n".join(sorted({line for line in lines if line.split(":")[0].strip() in wanted}))


def _library_name(sources: dict[str, bytes], compiler: str) -> str:
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
    parts = [source for _, source in sorted(sources.items())]
    key = hashlib.sha256(b"\0".join([*parts, version.encode(), " ".join(FLAGS).encode(), _cpu_identity().encode()]))
    return f"decode_attention_cpu-{key.hexdigest()[:20]}.so"


def load_native_attention(cache_dir: Path | None) -> NativeAttention | None:
    """The kernel, built into ``cache_dir``/kernels (default: the measurement cache's directory)
    on first use and loaded; None, with one log line saying why, where it cannot be."""
    from agentgate.engine.kernel_choice.row_choice_cache import default_cache_dir

    compiler = _compiler()
    if compiler is None:
        log.info("decode attention: the torch path (no C compiler: set CC or install cc)")
        return None
    directory = (cache_dir or default_cache_dir()) / "kernels"
    try:
        kernels = importlib.resources.files("agentgate.engine.kernels")
        sources = {name: kernels.joinpath(name).read_bytes() for name in (*SOURCES, *HEADERS)}
        path = directory / _library_name(sources, compiler)
        if not path.exists():
            started = time.monotonic()
            _build(compiler, sources, directory, path)
            log.info("decode attention: compiled the CPU kernel in %.1f s (%s)", time.monotonic() - started, path)
        return NativeAttention(ctypes.CDLL(str(path)), path)
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("decode attention: the torch path (the C kernel did not build or load: %s)", exc)
        return None


def _build(compiler: str, sources: dict[str, bytes], directory: Path, path: Path) -> None:
    """Compile ``sources`` (file name: text; the headers among them are written, not compiled) into
    the library ``path``, atomically: engines starting together each build their own temporary file
    and the last rename wins with the same bytes."""
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory) as work:
        for name, source in sources.items():
            (Path(work) / name).write_bytes(source)
        built = Path(work) / path.name
        result = subprocess.run(
            [compiler, *FLAGS, "-o", str(built), *(str(Path(work) / name) for name in sources if name.endswith(".c"))],
            capture_output=True,
            text=True,
            timeout=COMPILE_TIMEOUT_S,
        )
        if result.returncode != 0:
            raise subprocess.SubprocessError(f"{compiler} exited {result.returncode}: {result.stderr.strip()[:500]}")
        os.replace(built, path)
