#!/usr/bin/env bash
# NVIDIA AIPerf (PyPI `aiperf`) in a virtualenv of its own, .venv-aiperf, for tests/loadtests/test_aiperf.py
# (pytest -m aiperf). Its own: aiperf 0.13.0 would move the test environment's transformers to 5.x and
# pin rich, pyzmq and prometheus-client to its versions. Needs only the registry; takes about 3 minutes.
#   loadtests/aiperf_setup.sh [VENV]     (default VENV: .venv-aiperf)
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv-aiperf}"
[ -x "$venv/bin/aiperf" ] || { python3 -m venv "$venv" && "$venv/bin/pip" install -q "aiperf==0.13.0"; }
"$venv/bin/aiperf" --version
