#!/usr/bin/env bash
# Create .venv and install compcoll on a fresh machine, one progress line per step.
#
#   scripts/setup.sh [main|test] [--dry-run]
#
# main (default, `make bench`): CPU torch first, pinned, from PyTorch's CPU-only index (PyPI's
#   torch for Linux is the CUDA build with several GB of CUDA libraries), MPICH + mpi4py from
#   PyPI, the build tools, and the package itself with its bench extras (compiling csrc/ into
#   the _compcoll extension). TORCH_VERSION and TORCH_INDEX change the torch step
#   (TORCH_INDEX= empty, or an index whose host does not resolve: pip's own indexes, as
#   configured, e.g. a mirror that holds the CPU build).
# test (`make test`): the same, plus NVRTC for the CUDA compile tests and the test tools.
# --dry-run: print the steps and their commands, run nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=main
DRY=0
for arg in "$@"; do
  case "$arg" in
    main | test) MODE=$arg ;;
    --dry-run) DRY=1 ;;
    *) echo "setup.sh: unknown argument '$arg'; give main or test, and --dry-run to print" \
            "the steps only" >&2
       exit 2 ;;
  esac
done
PY=${PYTHON:-python3}
TORCH=${TORCH_VERSION:-2.13.0}
TORCH_INDEX=${TORCH_INDEX-https://download.pytorch.org/whl/cpu}
PIP=(.venv/bin/python -m pip install -q)
if [ "$MODE" = test ]; then TOTAL=5 EXTRAS=bench,test; else TOTAL=4 EXTRAS=bench; fi

done_steps=0
step() {  # step LABEL COMMAND...: one progress line, then the command (pip stays quiet)
  done_steps=$((done_steps + 1))
  echo "[$done_steps/$TOTAL] $1..."
  shift
  if [ "$DRY" = 1 ]; then echo "      $*"; else "$@"; fi
}
new_venv() {
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  "${PIP[@]}" --upgrade pip
}

step "virtual environment .venv and pip" new_venv
TORCH_ARGS=() TORCH_NOTE=""  # --index-url TORCH_INDEX where its host resolves
if [ -n "$TORCH_INDEX" ]; then
  if "$PY" -c "import socket, sys, urllib.parse as u
socket.getaddrinfo(u.urlsplit(sys.argv[1]).hostname, 443)" "$TORCH_INDEX" 2>/dev/null; then
    TORCH_ARGS=(--index-url "$TORCH_INDEX")
  else
    TORCH_NOTE="; $TORCH_INDEX does not resolve here: pip's own indexes"
  fi
fi
step "torch $TORCH (CPU$TORCH_NOTE)" "${PIP[@]}" "torch==$TORCH" "${TORCH_ARGS[@]}"
step "MPICH, mpi4py, numpy and the build tools" \
  "${PIP[@]}" "scikit-build-core>=0.10" "nanobind>=2.0" numpy mpi4py mpich
if [ "$MODE" = test ]; then
  # NVRTC alone (a ~90 MB wheel, no GPU needed), the compiler CuPy uses: with it the tests
  # compile the CUDA twins (csrc/cuda) to PTX as CuPy does with pip-installed NVRTC, on a CPU
  # machine.
  step "NVRTC (nvidia-cuda-nvrtc-cu12) for the CUDA compile tests" \
    "${PIP[@]}" nvidia-cuda-nvrtc-cu12
fi
step "compcoll[$EXTRAS], compiling csrc/ (a few minutes)" \
  "${PIP[@]}" --no-build-isolation -e ".[$EXTRAS]"
[ "$DRY" = 1 ] || .venv/bin/python -c \
  "import _compcoll, collectives; print('compcoll installed; OpenMP:', _compcoll.openmp)"
