"""GGUF files: the header parsed, tensor data memory-mapped. Torch-free, so
the tokenizer (and the gateway) can read GGUF metadata too.

The header is parsed here rather than by `gguf.GGUFReader`: the reader builds
a numpy view per metadata string, which costs ~2 s on the default model's
98k-entry vocabulary and merges (this parser: ~0.1 s). Tensor types, sizes
and dequantization come from the `gguf` package, imported only where a file
is read: the engine runs dummy and safetensors weights without it (the lent
GPU machine has no `gguf`).
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from agentgate.engine.errors import ModelLoadError

if TYPE_CHECKING:
    import gguf


@cache
def _scalar_formats() -> dict[int, str]:
    """struct formats of the metadata's scalar value types."""
    import gguf

    types = gguf.GGUFValueType
    return {
        types.UINT8: "<B",
        types.INT8: "<b",
        types.UINT16: "<H",
        types.INT16: "<h",
        types.UINT32: "<I",
        types.INT32: "<i",
        types.UINT64: "<Q",
        types.INT64: "<q",
        types.FLOAT32: "<f",
        types.FLOAT64: "<d",
        types.BOOL: "<?",
    }


@dataclass(frozen=True)
class GGUFTensor:
    """Where one tensor's bytes lie. ``shape`` is in numpy order (GGUF's
    ``ne`` reversed); ``offset`` is absolute in the file."""

    name: str
    shape: tuple[int, ...]
    type: gguf.GGMLQuantizationType
    offset: int
    nbytes: int


@dataclass
class GGUFFile:
    """A parsed GGUF file: metadata values (strings, numbers, lists) and tensors."""

    path: Path
    metadata: dict[str, Any]
    tensors: dict[str, GGUFTensor]
    buffer: mmap.mmap

    def raw(self, name: str) -> np.ndarray:
        """One tensor's bytes as stored (uint8, a read-only view of the file)."""
        info = self.tensors[name]
        return np.frombuffer(self.buffer, dtype=np.uint8, count=info.nbytes, offset=info.offset)

    def dequantize(self, name: str) -> np.ndarray:
        """One tensor as float32 in numpy order."""
        import gguf

        info = self.tensors[name]
        raw = self.raw(name).reshape(*info.shape[:-1], -1)
        try:
            out = gguf.quants.dequantize(raw, info.type)
        except NotImplementedError as exc:
            raise ModelLoadError(
                f"{self.path}: tensor {name} has type {info.type.name}, which cannot be dequantized"
            ) from exc
        # F32 comes back as a read-only view of the file.
        return out if out.flags.writeable else out.copy()


def read_gguf(path: Path) -> GGUFFile:
    """Parse the header of a GGUF file (v2/v3, little-endian); tensor data
    stays memory-mapped. Raises ModelLoadError on anything malformed."""
    try:
        with open(path, "rb") as f:
            buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as exc:  # ValueError: an empty file
        raise ModelLoadError(f"cannot open GGUF file {path}: {exc}") from exc
    try:
        return _parse(path, buffer)
    except (UnicodeDecodeError, ValueError, KeyError, OverflowError) as exc:
        raise ModelLoadError(f"{path} is not a valid GGUF file (corrupt or truncated): {exc}") from exc


class _Cursor:
    """Sequential little-endian reads with bounds checks."""

    def __init__(self, buffer: mmap.mmap) -> None:
        import gguf

        self.buffer, self.pos = buffer, 0
        self.types, self.formats = gguf.GGUFValueType, _scalar_formats()

    def scalar(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.buffer):
            raise ValueError(f"the header runs past the end of the file (at byte {self.pos})")
        (value,) = struct.unpack_from(fmt, self.buffer, self.pos)
        self.pos += size
        return value

    def string(self) -> str:
        length = self.scalar("<Q")
        end = self.pos + length
        if end > len(self.buffer):
            raise ValueError(f"string of {length} bytes runs past the end of the file")
        text = self.buffer[self.pos : end].decode("utf-8")
        self.pos = end
        return text

    def value(self, vtype: int) -> Any:
        if vtype in self.formats:
            return self.scalar(self.formats[vtype])
        if vtype == self.types.STRING:
            return self.string()
        if vtype != self.types.ARRAY:
            raise ValueError(f"unknown metadata value type {vtype}")
        item_type, count = self.scalar("<I"), self.scalar("<Q")
        if count > len(self.buffer) - self.pos:  # every item takes at least a byte
            raise ValueError(f"array of {count} items runs past the end of the file")
        if item_type in self.formats and item_type != self.types.BOOL:
            dtype = np.dtype(self.formats[item_type])
            items = np.frombuffer(self.buffer, dtype=dtype, count=count, offset=self.pos)
            self.pos += items.nbytes
            return items.tolist()
        return [self.value(item_type) for _ in range(count)]


def _parse(path: Path, buffer: mmap.mmap) -> GGUFFile:
    import gguf

    cur = _Cursor(buffer)
    if cur.scalar("<I") != gguf.GGUF_MAGIC:
        raise ValueError("bad magic number")
    version = cur.scalar("<I")
    if version not in (2, 3):
        raise ValueError(f"unsupported GGUF version {version} (big-endian files are not supported)")
    tensor_count, kv_count = cur.scalar("<Q"), cur.scalar("<Q")
    metadata: dict[str, Any] = {}
    for _ in range(kv_count):
        key = cur.string()
        metadata[key] = cur.value(cur.scalar("<I"))
    infos = []
    for _ in range(tensor_count):
        name = cur.string()
        ne = [cur.scalar("<Q") for _ in range(cur.scalar("<I"))]
        qtype = gguf.GGMLQuantizationType(cur.scalar("<I"))
        infos.append((name, tuple(reversed(ne)), qtype, cur.scalar("<Q")))
    alignment = metadata.get("general.alignment", gguf.GGUF_DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise ValueError(f"invalid general.alignment {alignment!r}")
    data_start = -(-cur.pos // alignment) * alignment
    tensors: dict[str, GGUFTensor] = {}
    for name, shape, qtype, rel_offset in infos:
        block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
        if not shape or shape[-1] % block_size:
            raise ValueError(f"tensor {name} has shape {shape}, not whole {qtype.name} blocks")
        nbytes = math.prod(shape) // block_size * type_size
        offset = data_start + rel_offset
        if offset + nbytes > len(buffer):
            raise ValueError(f"tensor {name} runs past the end of the file (truncated?)")
        tensors[name] = GGUFTensor(name, shape, qtype, offset, nbytes)
    return GGUFFile(path, metadata, tensors, buffer)
