#!/usr/bin/env bash
# The GPU check, for a lent CUDA machine (H200: Python 3.12, torch 2.11,
# triton 3.6, no network, agentgate not installed). Within 5 minutes, Triton
# cache cold: the environment, the GPU-marked tests, the kernel counts, the
# four-way runner benchmark on the default model's and Qwen3-0.6B's shapes
# (random weights, bf16), the attention kernels; then one summary table of
# every step and every FIGURE line the steps printed. Exits non-zero when any
# step failed, timed out or did not run.
#
# That machine lacks a few of the wheels the steps import. Fetch them here
# first into .whl/ (ignored by git), then carry .whl:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --abi cp312 --platform manylinux_2_28_x86_64 \
#     --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl msgspec pyyaml
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl \
#     gguf pytest pluggy iniconfig pygments pytest-timeout packaging
# and run, from the repository root:  bash loadtests/gpu_check.sh
# (a wheel is unpacked, not installed, and only when this Python lacks what
# it holds: no pip, no network, nothing written outside /tmp and $OUT).
# agentgate.* imports from this checkout through a folder of links put first
# on PYTHONPATH.
#
# For tests of this script: GPU_CHECK_STEPS names a file that replaces the
# step list below (it calls `step`), GPU_CHECK_BUDGET the seconds all steps
# may take together, PYTHON the interpreter.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
py=${PYTHON:-python3}
out=${OUT:-/tmp/agentgate-gpu-check}
budget=${GPU_CHECK_BUDGET:-285}
mkdir -p "$out"
started=$(date +%s)

site=$(mktemp -d /tmp/agentgate-site.XXXXXX)
trap 'rm -rf "$site"' EXIT
mkdir "$site/agentgate"
for part in engine gateway agents loadtests; do ln -s "$root/$part" "$site/agentgate/$part"; done
# Unpack a carried wheel only when this Python cannot import what it holds:
# a carried wheel never shadows a module the machine already has.
"$py" - "$site" "$root"/.whl/*.whl <<'UNPACK'
import importlib.util, sys, zipfile
site, wheels = sys.argv[1], [w for w in sys.argv[2:] if w.endswith(".whl")]
unpacked = []
for wheel in wheels:
    with zipfile.ZipFile(wheel) as archive:
        tops = {name.split("/")[0] for name in archive.namelist()}
        modules = {t.removesuffix(".py") for t in tops if not t.endswith((".dist-info", ".data", ".libs"))}
        if all(importlib.util.find_spec(m) is not None for m in modules if m.isidentifier()):
            continue
        archive.extractall(site)
        unpacked.append(wheel.rsplit("/", 1)[-1].split("-")[0])
print(f"{len(unpacked)} of {len(wheels)} carried wheels unpacked (the rest are installed here): {' '.join(unpacked)}")
UNPACK
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
echo "agentgate from $root through $site"

names=() statuses=() seconds=() logs=()
gpu_ok=1
failed=0

record() {  # record NAME STATUS SECONDS
  names+=("$1"); statuses+=("$2"); seconds+=("$3")
  [ "$2" = ok ] || failed=1
}

step() {  # step NAME LIMIT_SECONDS [gpu] -- COMMAND...
  local name=$1 limit=$2 needs_gpu=0
  shift 2
  if [ "$1" = gpu ]; then needs_gpu=1; shift; fi
  [ "$1" = -- ] && shift
  if [ "$needs_gpu" = 1 ] && [ "$gpu_ok" = 0 ]; then
    record "$name" "skipped: no CUDA device" 0; return
  fi
  local left=$((budget - ($(date +%s) - started)))
  if [ "$left" -lt 5 ]; then
    record "$name" "not run: the time budget is spent" 0; return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (at most ${limit}s)"
  local t0 rc status
  t0=$(date +%s)
  logs+=("$out/$name.log")
  timeout -k 5 "$limit" "$@" 2>&1 | tee "$out/$name.log"
  rc=${PIPESTATUS[0]}
  case $rc in
    0) status=ok ;;
    124 | 137) status="timed out after ${limit}s" ;;
    *) status="failed (exit $rc)" ;;
  esac
  record "$name" "$status" $(($(date +%s) - t0))
  return "$rc"
}

default_steps() {
  step environment 40 -- "$py" -m agentgate.loadtests.gpu_env
  case $? in 3) gpu_ok=0 ;; esac
  step gpu-tests 100 gpu -- "$py" -m pytest -q -m gpu -p no:cacheprovider --continue-on-collection-errors \
    tests/engine/kernels tests/engine/runner
  step runner-smollm2 80 gpu -- "$py" -m agentgate.loadtests.runner_bench --model smollm2-dummy --batch-sizes 1,4,16,64
  step kernels-smollm2 30 gpu -- "$py" -m agentgate.loadtests.kernel_count --model smollm2-dummy
  step runner-qwen3 80 gpu -- "$py" -m agentgate.loadtests.runner_bench --model qwen3 --batch-sizes 1,4,16,64
  step kernels-qwen3 30 gpu -- "$py" -m agentgate.loadtests.kernel_count --model qwen3
  step attention 40 gpu -- "$py" -m agentgate.loadtests.attn_bench
}

if [ -n "${GPU_CHECK_STEPS:-}" ]; then
  # shellcheck source=/dev/null
  source "$GPU_CHECK_STEPS"
else
  default_steps
fi

echo
echo "== summary ($(($(date +%s) - started))s; logs in $out)"
printf '%-20s %-34s %s\n' step status seconds
for i in "${!names[@]}"; do
  printf '%-20s %-34s %s\n' "${names[$i]}" "${statuses[$i]}" "${seconds[$i]}"
done
figures=$(for log in ${logs[@]+"${logs[@]}"}; do grep -h '^FIGURE ' "$log"; done | sed 's/^FIGURE /  /')
if [ -n "$figures" ]; then
  echo "figures:"
  echo "$figures"
fi
if [ "$failed" = 0 ]; then echo "gpu_check: all steps passed"; else echo "gpu_check: FAILED"; fi
exit "$failed"
