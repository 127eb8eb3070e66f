#!/usr/bin/env bash
# Installs agentgate with its test extras in .venv and runs the whole test
# suite (extra arguments go to pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test
# The playground's browser tests drive Debian's chromium. Install it when it is
# missing and this runs as root with apt-get (as CI does); otherwise those tests
# skip and say why.
if ! command -v chromium >/dev/null 2>&1 && [ -z "${AGENTGATE_CHROMIUM:-}" ] \
  && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing chromium for the browser tests (apt-get)..."
  apt_log="$(mktemp)"
  if { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >"$apt_log" 2>&1; then
    rm -f "$apt_log"
  else
    echo "chromium did not install (log: $apt_log); the browser tests will skip"
  fi
fi
# Which CPU this runs on, first in the log: these machines differ (AVX2 only, AVX-512 BF16,
# AMX), and so do greedy answers near a tie and --deterministic's modes (loadtests/cpu_report.py).
.venv/bin/python -P -m agentgate.loadtests.cpu_report --brief || echo "cpu report failed (the tests still run)"
# Formatting and lint ([tool.ruff] in pyproject.toml) before any test runs.
.venv/bin/ruff format --check .
.venv/bin/ruff check .
# -P: the repository root is not put on sys.path, so `agents` is the OpenAI Agents
# SDK and our packages import only as agentgate.* (as installed). --durations: the 25 slowest
# tests close the log, so the suite's time (goal: 12 minutes here) shows where it goes.
# Two workers take whole files (module servers start once) in collection order, the longest
# first (tests/conftest.py): while one file's test waits on its server, the other core runs the next.
exec .venv/bin/python -P -m pytest -n 2 --dist loadfile --no-loadscope-reorder --durations=25 "$@"
