#!/usr/bin/env bash
# The whole test suite: builds, then runs the C++ tests (ctest) and the Python tests (pytest),
# once with the graph optimizer at its default level and once with it off (ONNXTRAIN_OPT_LEVEL=0),
# so that every test holds for the optimized and the unoptimized graphs. pytest runs one worker per
# core (pytest-xdist; ONNXTRAIN_TEST_WORKERS overrides): exporting is single-threaded Python.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
PYTHON=${PYTHON:-/usr/bin/python3}
for level in default 0; do
  if [ "$level" = default ]; then unset ONNXTRAIN_OPT_LEVEL; else export ONNXTRAIN_OPT_LEVEL=$level; fi
  echo "== tests with the graph optimizer at level $level"
  (cd build && ctest --output-on-failure -j "$(nproc)")
  PYTHONPATH="$PWD/python" "$PYTHON" -m pytest -q -n "${ONNXTRAIN_TEST_WORKERS:-auto}" tests/python "$@"
done
