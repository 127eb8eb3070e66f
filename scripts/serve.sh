#!/usr/bin/env bash
# Installs agentgate in .venv and serves the default model on
# http://127.0.0.1:8000 (extra arguments go to `agentgate serve`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/agentgate serve "$@"
