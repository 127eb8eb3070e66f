#!/usr/bin/env bash
# checkov (PyPI) on the Containerfile and on every rendered overlay; skips are named and justified in
# the files (checkov.io/skip annotations). Needs kubectl; installs checkov into its own virtualenv.
#   deploy/checkov.sh [VENV]     (default VENV: /tmp/checkov-venv)
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-/tmp/checkov-venv}"
[ -x "$venv/bin/checkov" ] || { python3 -m venv "$venv" && "$venv/bin/pip" install -q checkov; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp deploy/Containerfile "$work/Dockerfile"  # checkov reads only files named like Dockerfile
"$venv/bin/checkov" --skip-download --compact --quiet --framework dockerfile -f "$work/Dockerfile"
for overlay in cpu cuda inferencepool; do
  kubectl kustomize "deploy/kubernetes/overlays/$overlay" > "$work/$overlay.yaml"
  "$venv/bin/checkov" --skip-download --compact --quiet --framework kubernetes -f "$work/$overlay.yaml"
done
