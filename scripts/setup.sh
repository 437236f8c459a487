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
# One ONNX Runtime build (never both): DENKI_ORT=cpu|gpu, else gpu where a GPU driver or onnxruntime-gpu is already
# there (it also runs on CPUs), cpu otherwise.
ORT=${DENKI_ORT:-}
if [ -z "$ORT" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 || .venv/bin/python -m pip show -q onnxruntime-gpu >/dev/null 2>&1; then
    ORT=gpu
  else
    ORT=cpu
  fi
fi
case "$ORT" in
  cpu) OTHER=onnxruntime-gpu ;;
  gpu) OTHER=onnxruntime ;;
  *) echo "DENKI_ORT must be cpu or gpu, not '$ORT'" >&2; exit 2 ;;
esac
if .venv/bin/python -m pip show -q "$OTHER" >/dev/null 2>&1; then
  .venv/bin/python -m pip uninstall -q -y "$OTHER"
fi
# everything the README's two commands need: training, export, serving, the demo, the tests
.venv/bin/python -m pip install -q -e ".[all,$ORT,test]"
.venv/bin/python -m pip check
echo "denki set up in .venv with onnxruntime ($ORT) ($(.venv/bin/denki --version 2>/dev/null || echo ok))"
