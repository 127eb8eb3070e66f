"""The first step of `gpu_check.sh`: what this machine has, and what the
other steps need that it lacks.

Prints Python, torch, Triton and the CUDA device; checks every module the
GPU steps import (naming the missing ones and how to bring them); checks
that ``agentgate.*`` imports from this checkout. Exit status: 0 all there;
2 modules missing (`gpu_check.sh` then skips the GPU steps); 3 no CUDA
device (the GPU steps are skipped), or 0 with ``--cpu`` (`gpu_check.sh`'s
CPU smoke, which runs the GPU steps on the CPU).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import platform
import sys
from pathlib import Path

# Top-level modules the GPU steps import: the engine (msgspec for its protocol;
# `gguf` only where a GGUF file is read, and the steps read none), the tests
# (pytest, and xdist for its workers).
NEEDED = ("torch", "triton", "numpy", "msgspec", "safetensors", "pytest", "xdist")
ENGINE_MODULES = (
    "agentgate.engine.core",
    "agentgate.engine.runner.overlap",
    "agentgate.engine.runner.sync",
    "agentgate.engine.loaders",
)
WHEELS_HINT = "download their wheels into .whl/ (bash loadtests/gpu_wheels.sh) and carry .whl"


def missing_modules(names: tuple[str, ...] = NEEDED) -> list[str]:
    return [name for name in names if importlib.util.find_spec(name) is None]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cpu", action="store_true", help="no CUDA device is fine (exit 0): a CPU smoke")
    args = parser.parse_args(argv)
    print(f"python {platform.python_version()} ({sys.executable})")
    missing = missing_modules()
    if "torch" not in missing:
        import torch

        print(f"torch {torch.__version__}, cuda {torch.version.cuda}")
    if "triton" not in missing:
        import triton

        print(f"triton {triton.__version__}")
    repo = Path(__file__).resolve().parents[1]
    try:
        for name in ENGINE_MODULES:
            module = importlib.import_module(name)
        print(f"agentgate.engine from {Path(module.__file__).resolve().parent.parent}")
        if not Path(module.__file__).resolve().is_relative_to(repo):
            print(f"agentgate imports from outside this checkout ({repo})")
            return 2
    except ModuleNotFoundError as exc:
        if exc.name and not exc.name.startswith("agentgate") and exc.name not in missing:
            missing.append(exc.name)
        print(f"cannot import agentgate's engine: {exc}")
    if missing:
        print(f"MISSING modules: {', '.join(missing)}: {WHEELS_HINT}")
        return 2
    import torch

    if not torch.cuda.is_available():
        if args.cpu:
            print("no CUDA device: the GPU steps run on the CPU (a smoke: their figures mean nothing)")
            return 0
        print("no CUDA device: the GPU steps are skipped")
        return 3
    props = torch.cuda.get_device_properties(0)
    print(f"device {props.name}, {props.total_memory / 2**30:.0f} GiB, sm_{props.major}{props.minor}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
