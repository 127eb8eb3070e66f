#!/usr/bin/env bash
# Installs agentgate with its test extras in .venv and runs the whole test
# suite (extra arguments go to pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test
exec .venv/bin/python -m pytest "$@"
