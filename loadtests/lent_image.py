"""The lent GPU machine's Python packages, and that package set simulated here.

The machine `gpu_check.sh` runs on (the device tool's image 'cuda': Python
3.12, torch 2.11, triton 3.6, no network) holds `IMAGE` and nothing else;
whatever else the GPU steps import travels as the wheels of `CARRIED`, which
`gpu_wheels.sh` downloads into ``.whl/`` here. `simulate` builds, from this
machine's environment, a folder holding only the distributions of
`IMAGE` (and optionally of `CARRIED`) and a ``python`` that sees nothing
else, so that a CPU test or a dry run of `gpu_check.sh` meets every import
error the lent machine would.

    python loadtests/lent_image.py carried          # the wheels to download, one NAME==VERSION a line
    python loadtests/lent_image.py simulate DIR     # prints DIR/python (add --with-carried for the wheels too)

Standard library only: `gpu_wheels.sh` runs this file before anything is installed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import sys
from pathlib import Path

# The image's packages, as the device tool's KINDS.md lists them (read on a machine running it,
# 2026-11-17). Only distributions this machine also has matter for the simulation.
IMAGE = frozenset(
    """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
    certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
    cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
    flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
    huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt
    jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities
    linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes
    mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba
    numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
    nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse
    nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx
    onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix
    orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client
    propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions
    pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil pytorch-lightning
    pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy seaborn
    sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers statsmodels sympy
    tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers
    toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton
    typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl
    zipp""".split()
)

# What the GPU steps import that the image lacks: the engine's protocol (msgspec). The rest of
# what agentgate uses (gguf, pyzmq, xgrammar, the gateway's servers) no GPU step imports;
# tests/loadtests/test_gpu_check.py keeps it so. The version is the one this project's tests run with.
CARRIED = ("msgspec==0.23.0",)


def normalized(name: str) -> str:
    """A distribution's name as package indexes compare it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _top_level_entries(dist: importlib.metadata.Distribution) -> set[str]:
    """The first path components a distribution installed into its site folder (its packages,
    modules, bundled libraries and metadata folder); scripts installed elsewhere are left out."""
    return {Path(f).parts[0] for f in dist.files or () if not str(f).startswith("..")}


def simulate(target: Path, *, with_carried: bool = False) -> Path:
    """``target/site`` with links to every installed distribution of `IMAGE` (and of `CARRIED`
    when ``with_carried``), and ``target/python``: this interpreter without its site folders
    (``-S``), that folder on its path. Returns the ``python`` script.

    A top-level folder shared by several distributions is linked when any of them is allowed."""
    allowed = set(IMAGE) | ({normalized(spec.split("==")[0]) for spec in CARRIED} if with_carried else set())
    site = target / "site"
    site.mkdir(parents=True, exist_ok=True)
    for dist in importlib.metadata.distributions():
        if normalized(dist.metadata["Name"] or "") not in allowed:
            continue
        root = Path(str(dist.locate_file("")))
        for entry in _top_level_entries(dist):
            link = site / entry
            if (root / entry).exists() and not link.exists():
                link.symlink_to(root / entry)
    python = target / "python"
    python.write_text(
        "#!/bin/sh\n"
        "# This interpreter with the lent image's packages only (loadtests/lent_image.py).\n"
        f'export PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{site}"\n'
        f'exec {sys.executable} -S "$@"\n'
    )
    python.chmod(0o755)
    return python


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("carried", help="print the wheels gpu_check.sh carries, one NAME==VERSION a line")
    simulated = commands.add_parser("simulate", help="build the simulated image in DIR and print its python")
    simulated.add_argument("dir", type=Path)
    simulated.add_argument("--with-carried", action="store_true", help="the carried wheels' packages too")
    args = parser.parse_args(argv)
    if args.command == "carried":
        print("\n".join(CARRIED))
    else:
        print(simulate(args.dir.resolve(), with_carried=args.with_carried))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
