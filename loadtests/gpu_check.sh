#!/usr/bin/env bash
# The GPU check, for a lent CUDA machine (H200: Python 3.12, torch 2.11,
# triton 3.6, no network). Runs the GPU-marked tests, then the runner and
# attention benchmarks in bf16; about 5 minutes.
#
# That machine lacks a few of our dependencies. Fetch their wheels here first
# (into .whl/, ignored by git) and carry it:
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
#     --platform manylinux2014_x86_64 -d .whl msgspec pyzmq gguf
# The default model's GGUF (98 MB) is too big to carry, so the benchmarks use
# random weights of its exact shapes (loadtests/configs/smollm2-135m).
set -uo pipefail
cd "$(dirname "$0")/.."
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH="/tmp/site:$PWD"
else
  export PYTHONPATH="$PWD"
fi
export PYTHONUNBUFFERED=1
out="${OUT:-/tmp}"
nvidia-smi -L
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"

echo "== GPU-marked tests"
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider \
  tests/engine/kernels tests/engine/runner tests/engine/models 2>&1 | tee "$out/gpu_tests.log"

echo "== runner benchmark: default model's shapes, bf16"
timeout 90 python3 -m agentgate.loadtests.runner_bench --model smollm2-dummy --batch-sizes 1,4,16,64 2>&1 | tee "$out/runner_smollm2.log"
echo "== runner benchmark: Qwen3-0.6B shapes, bf16"
timeout 90 python3 -m agentgate.loadtests.runner_bench --model qwen3 --batch-sizes 1,4,16,64 2>&1 | tee "$out/runner_qwen3.log"
echo "== attention kernels against SDPA"
timeout 60 python3 -m agentgate.loadtests.attn_bench 2>&1 | tee "$out/attn.log"
