#!/usr/bin/env bash
# The GPU check, for a lent CUDA machine (H200: Python 3.12, torch 2.11,
# triton 3.6, no network, agentgate not installed). Within 5 minutes, Triton
# cache cold: the environment, the GPU-marked tests, the kernel counts, the
# four-way runner benchmark on the default model's and Qwen3-0.6B's shapes
# (random weights, bf16), the attention kernels; then one summary table of
# every step and every FIGURE line the steps printed. Exits non-zero when any
# step failed, timed out or did not run.
#
# That machine lacks a wheel the steps import (loadtests/lent_image.py says
# which). Here, first, fetch it into .whl/ (ignored by git):
#   bash loadtests/gpu_wheels.sh
# then carry .whl and run, from the repository root:  bash loadtests/gpu_check.sh
# (a wheel is unpacked, not installed, and only when this Python lacks what
# it holds: no pip, no network, nothing written outside /tmp and $OUT).
# agentgate.* imports from this checkout through a folder of links put first
# on PYTHONPATH. When the environment step finds a module missing (or fails
# otherwise), the GPU steps are skipped: one failure that names the cause.
#
# Time: the steps' limits add up to 280 of the 285 s budget (the rest is the
# set-up, about a second): environment 20 (imports torch, triton, the engine;
# first CUDA call), gpu-tests 90 (about 70 Triton variants compiled cold, at
# roughly a second each on one core: four workers, whole files each, share
# them out), runner-smollm2 and runner-qwen3 50 each (four engines built,
# Triton kernels and CUDA graphs for each batch size, 4 x 3 runs of 64 tokens;
# a FIGURE line per batch size as it is measured, so a killed step keeps what
# it finished), kernels-smollm2 and kernels-qwen3 20 each (one engine, one
# step), attention 30 (16 figures, each kernel compiled once).
#
# For tests of this script: GPU_CHECK_STEPS names a file that replaces the
# step list below (it calls `step`), GPU_CHECK_BUDGET the seconds all steps
# may take together, PYTHON the interpreter. GPU_CHECK_SMOKE=1 runs the
# default steps on this CPU on a tiny model, the GPU tests only collected
# (skipped without CUDA): every step's imports and calls, no figures that mean
# anything (tests/loadtests/test_gpu_check.py; a dry run:
# loadtests/lent_image.py simulates the lent machine's packages).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
py=${PYTHON:-python3}
out=${OUT:-/tmp/agentgate-gpu-check}
budget=${GPU_CHECK_BUDGET:-285}
smoke=${GPU_CHECK_SMOKE:-0}
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
gpu_ok=1 skip_reason="no CUDA device"
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
    record "$name" "skipped: $skip_reason" 0; return
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
  local models=(smollm2-dummy qwen3) bench=(--batch-sizes 1,4,16,64) workers=4 env=()
  if [ "$smoke" = 1 ]; then  # workers 0: the plugin and its options, no worker processes
    models=(tiny) bench=(--batch-sizes 1,2 --prompt-len 8 --output-len 4 --repeats 1) workers=0 env=(--cpu)
  fi
  step environment 20 -- "$py" -m agentgate.loadtests.gpu_env "${env[@]}"
  case $? in
    0) ;;
    3) gpu_ok=0 ;;
    *) gpu_ok=0 skip_reason="the environment step failed" ;;
  esac
  step gpu-tests 90 gpu -- "$py" -m pytest -q -m gpu -p no:cacheprovider -n "$workers" --dist loadfile \
    --continue-on-collection-errors tests/engine/kernels tests/engine/runner
  local model
  for model in "${models[@]}"; do
    step "runner-${model%-dummy}" 50 gpu -- "$py" -m agentgate.loadtests.runner_bench --model "$model" "${bench[@]}"
    step "kernels-${model%-dummy}" 20 gpu -- "$py" -m agentgate.loadtests.kernel_count --model "$model"
  done
  step attention 30 gpu -- "$py" -m agentgate.loadtests.attn_bench
}

if [ -n "${GPU_CHECK_STEPS:-}" ]; then
  # shellcheck source=/dev/null
  source "$GPU_CHECK_STEPS"
else
  default_steps
fi

echo
echo "== summary ($(($(date +%s) - started))s; logs in $out)"
printf '%-20s %-40s %s\n' step status seconds
for i in "${!names[@]}"; do
  printf '%-20s %-40s %s\n' "${names[$i]}" "${statuses[$i]}" "${seconds[$i]}"
done
figures=$(for log in ${logs[@]+"${logs[@]}"}; do grep -h '^FIGURE ' "$log"; done | sed 's/^FIGURE /  /')
if [ -n "$figures" ]; then
  echo "figures:"
  echo "$figures"
fi
if [ "$failed" = 0 ]; then echo "gpu_check: all steps passed"; else echo "gpu_check: FAILED"; fi
exit "$failed"
