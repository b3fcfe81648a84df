#!/usr/bin/env bash
# The whole test suite: builds, then runs the C++ tests (ctest) and the Python tests (pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
PYTHON=${PYTHON:-/usr/bin/python3}
(cd build && ctest --output-on-failure -j "$(nproc)")
PYTHONPATH="$PWD/python" "$PYTHON" -m pytest -q tests/python "$@"
