#!/usr/bin/env bash
# Fetches, here (with network), the wheels gpu_check.sh carries to the lent
# GPU machine: what its image lacks (loadtests/lent_image.py: CARRIED), for
# CPython 3.12 on x86-64 Linux, into .whl/ (.gitignore). Run it once,
# then carry .whl:
#   bash loadtests/gpu_wheels.sh && bash loadtests/gpu_check.sh   # (the second on the GPU machine)
# Exits non-zero when a wheel cannot be fetched. Env: PYTHON (default python3),
# WHEELS_DIR (default .whl).
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
dir=${WHEELS_DIR:-.whl}
mkdir -p "$dir"
mapfile -t wanted < <("$py" -P loadtests/lent_image.py carried)
# One version of each: an older wheel of the same name left in the folder would stop the install there.
for spec in "${wanted[@]}"; do
  name=${spec%%==*}
  find "$dir" -maxdepth 1 -iname "${name//-/_}-*.whl" ! -iname "${name//-/_}-${spec##*==}-*" -delete
done
platforms=()
for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
  manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$tag")
done
"$py" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" -d "$dir" "${wanted[@]}"
echo "wheels in $dir for the lent machine:"
ls -1 "$dir"/*.whl
