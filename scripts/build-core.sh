#!/bin/sh
# Builds the compiled decision core in place (src/caldera/compiled.py, setup.py): mypyc turns
# caldera.core and caldera.model into C extension modules beside their sources. Skipped when
# the modules there were built from exactly these sources. Without a C compiler (or Python's
# headers) it says so in one line and the sources run interpreted — except under CI=true,
# where the compiled build is tested (tests/sim/test_compiled.py) and must exist.
# `build-core.sh --remove` (make pure) removes a build.
set -eu
cd "$(dirname "$0")/.."
remove() {
  rm -f src/caldera_core__mypyc*.so src/caldera/core/*.so src/caldera/core/*/*.so \
    src/caldera/model/*.so src/caldera/_compiled.digest
}
if [ "${1:-}" = "--remove" ]; then
  remove
  exit 0
fi
PY=${PYTHON:-.venv/bin/python}
if CALDERA_PURE=1 "$PY" -c 'import sys, caldera.compiled as c; sys.exit(not c.current())'; then
  echo "build-core: the compiled core matches its sources"
  exit 0
fi
if ! command -v cc >/dev/null 2>&1 && ! command -v gcc >/dev/null 2>&1; then
  if [ "${CI:-}" = "true" ]; then
    echo "build-core: CI needs a C compiler to build the compiled core" >&2
    exit 1
  fi
  echo "build-core: no C compiler: the core runs interpreted (same decisions, slower)" >&2
  exit 0
fi
echo "build-core: compiling caldera.core and caldera.model with mypyc (about 90 s on 2 cores)"
log=build/build-core.log
mkdir -p build
if ! CALDERA_COMPILE=1 CALDERA_PURE=1 "$PY" setup.py -q build_ext --inplace >"$log" 2>&1; then
  if [ "${CI:-}" = "true" ]; then
    tail -20 "$log" >&2
    echo "build-core: the compiled core did not build (log: $log)" >&2
    exit 1
  fi
  remove
  echo "build-core: the compiled core did not build (log: $log); the core runs interpreted" >&2
  exit 0
fi
echo "build-core: done"
