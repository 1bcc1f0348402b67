#!/usr/bin/env bash
# Create .venv and install everything compcoll needs on a fresh machine: CPU torch first (a bare
# "torch" would pull a multi-GB CUDA build), MPICH + mpi4py from PyPI, the build tools, and the
# package itself (compiling csrc/ into the _compcoll extension).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==${TORCH_VERSION:-2.13.0}"
.venv/bin/python -m pip install -q "scikit-build-core>=0.10" "nanobind>=2.0" numpy mpi4py mpich
# NVRTC alone (a ~90 MB wheel, no GPU needed), the compiler CuPy uses: with it the tests compile the
# CUDA twins (csrc/cuda) to PTX as CuPy does with pip-installed NVRTC, on a CPU machine.
.venv/bin/python -m pip install -q nvidia-cuda-nvrtc-cu12
.venv/bin/python -m pip install -q --no-build-isolation -e ".[test]"
.venv/bin/python -c "import _compcoll, collectives; print('compcoll installed; OpenMP:', _compcoll.openmp)"
