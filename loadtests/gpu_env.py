"""The first step of `gpu_check.sh`: what this machine has, and what the
other steps need that it lacks.

Prints Python, torch, Triton and the CUDA device; checks every module the
GPU steps import (naming the missing ones and how to bring them); checks
that ``agentgate.*`` imports from this checkout. Exit status: 0 all there;
2 modules missing (the steps that need them will fail, and say so); 3 no
CUDA device (the GPU steps are skipped).
"""

from __future__ import annotations

import importlib
import importlib.util
import platform
import sys
from pathlib import Path

# Top-level modules the GPU steps import: the engine (msgspec for its
# protocol, gguf and yaml for its loaders), the tests (pytest).
NEEDED = ("torch", "triton", "numpy", "msgspec", "gguf", "yaml", "safetensors", "pytest")
ENGINE_MODULES = (
    "agentgate.engine.core",
    "agentgate.engine.runner.overlap",
    "agentgate.engine.runner.sync",
    "agentgate.engine.loaders",
)
WHEELS_HINT = "download their wheels into .whl/ (see loadtests/gpu_check.sh) and carry .whl"


def missing_modules(names: tuple[str, ...] = NEEDED) -> list[str]:
    return [name for name in names if importlib.util.find_spec(name) is None]


def main() -> int:
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
        print("no CUDA device: the GPU steps are skipped")
        return 3
    props = torch.cuda.get_device_properties(0)
    print(f"device {props.name}, {props.total_memory / 2**30:.0f} GiB, sm_{props.major}{props.minor}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
