#!/usr/bin/env bash
# Install and run the main job. No API key: the offline proposer; no GPU: the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -d .venv ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[llm]"
aka optimize op=rms_norm shape=4096x4096 "$@"
