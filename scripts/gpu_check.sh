#!/usr/bin/env bash
# The prepared GPU check: build compcoll's extension where it is missing, then run
# scripts/gpu_check.py (its docstring lists the sections); results in
# bench/results/gpu/gpu_check_<device>.{txt,json}.
#
#   bash scripts/gpu_check.sh [--cpu] [--quick] [--out DIR]
#
# Meant for a fresh GPU machine with torch (CUDA), CuPy and a C++ compiler, without network;
# every step has a timeout and the whole stays within GPU_CHECK_LIMIT_S (480 s). Python:
# $PYTHON, else .venv/bin/python, else python3. The extension is built only when
# `import _compcoll` fails:
#   - pip install --no-build-isolation --no-deps -e . where scikit-build-core is importable;
#   - else (or if pip fails) CMake straight into build/gpu-check, put on PYTHONPATH;
#   - nanobind or cmake (or both make and ninja) missing? They are installed from the wheels in
#     $GPU_CHECK_WHEELS (default build/wheels) into build/gpu-check/deps, never from an index.
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT=${GPU_CHECK_LIMIT_S:-480}
BUILD_LIMIT=300
WHEELS=${GPU_CHECK_WHEELS:-build/wheels}
DIR=build/gpu-check
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x .venv/bin/python ]; then PY=.venv/bin/python
else PY=python3
fi
export GPU_CHECK_COMMAND="bash scripts/gpu_check.sh${*:+ $*}"
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}

left() { echo $((LIMIT - SECONDS)); }
importable() { timeout 60 "$PY" -c "import $1" >/dev/null 2>&1; }

deps_from_wheels() {  # the build tools this machine lacks, from local wheels
  local want=()
  importable nanobind || want+=(nanobind)
  command -v cmake >/dev/null || want+=(cmake)
  command -v make >/dev/null || command -v ninja >/dev/null || want+=(ninja)
  [ ${#want[@]} -gt 0 ] || return 0
  if [ ! -d "$WHEELS" ]; then
    echo "gpu_check: ${want[*]} missing and no wheels in $WHEELS (set GPU_CHECK_WHEELS)"
    return 1
  fi
  echo "[build] ${want[*]} from $WHEELS"
  timeout 120 "$PY" -m pip install -q --no-index --find-links "$WHEELS" --upgrade \
    --target "$DIR/deps" "${want[@]}"
  export PYTHONPATH="$PWD/$DIR/deps${PYTHONPATH:+:$PYTHONPATH}" PATH="$PWD/$DIR/deps/bin:$PATH"
}

build_pip() {
  importable scikit_build_core || return 1
  echo "[build] pip install --no-build-isolation --no-deps -e ."
  timeout "$BUILD_LIMIT" "$PY" -m pip install -q --no-index --no-build-isolation --no-deps -e .
}

build_cmake() {  # as `make sanitize` builds: the module lands in $DIR
  local limit=$((BUILD_LIMIT - SECONDS))
  if [ "$limit" -lt 30 ]; then echo "gpu_check: no time left to build with cmake"; return 1; fi
  echo "[build] cmake into $DIR (${limit} s left for it)"
  local gen=()
  command -v make >/dev/null || gen=(-G Ninja)
  timeout "$limit" cmake -S . -B "$DIR" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DPython_EXECUTABLE="$("$PY" -c 'import sys; print(sys.executable)')" >"$DIR.log" 2>&1 &&
    timeout "$limit" cmake --build "$DIR" -j "$CMAKE_BUILD_PARALLEL_LEVEL" >>"$DIR.log" 2>&1 ||
    { tail -20 "$DIR.log"; return 1; }
  export PYTHONPATH="$PWD/$DIR${PYTHONPATH:+:$PYTHONPATH}"
}

mkdir -p build
if importable _compcoll; then
  echo "[build] _compcoll importable: no build"
else
  deps_from_wheels
  build_pip || build_cmake
  importable _compcoll || { echo "gpu_check: _compcoll still not importable"; exit 3; }
  echo "[build] done in ${SECONDS} s"
fi
if [ "$(left)" -lt 60 ]; then echo "gpu_check: $(left) s left of ${LIMIT} s after the build"; exit 3; fi
exec timeout --kill-after=10 "$(left)" "$PY" scripts/gpu_check.py "$@"
