#!/usr/bin/env bash
# Set up denki in .venv at the repo root (idempotent; fast when already done).
# CPU machines: torch's CPU wheel is installed first so that no multi-GB CUDA build is pulled in.
# GPU machines: install a CUDA torch into .venv yourself before running this (see README "GPU").
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install -q "torch==2.13.0"
fi
.venv/bin/python -m pip install -q -e ".[test]"
.venv/bin/python -m pip check
echo "denki set up in .venv ($(.venv/bin/denki --version 2>/dev/null || echo ok))"
