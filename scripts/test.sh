#!/usr/bin/env bash
# The whole test suite: builds, then runs the C++ tests (ctest) and the Python tests (pytest),
# once with the graph optimizer at its default level and once with it off (ONNXTRAIN_OPT_LEVEL=0),
# so that every test holds for the optimized and the unoptimized graphs. pytest runs one worker per
# core (pytest-xdist; ONNXTRAIN_TEST_WORKERS overrides): exporting is single-threaded Python. The
# Python tests run in a venv over Debian's Python and its torch 1.13 that adds the model zoos
# (transformers, timm: scripts/torch_venv.sh system, made once); the zoo models train at the default
# optimizer level only (they take the same passes as the torchvision models, which run at both).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
PYTHON=${PYTHON:-$(./scripts/torch_venv.sh system)}
for level in default 0; do
  selection=()
  if [ "$level" = default ]; then unset ONNXTRAIN_OPT_LEVEL; else export ONNXTRAIN_OPT_LEVEL=$level; selection=(-m "not zoo"); fi
  echo "== tests with the graph optimizer at level $level"
  (cd build && ctest --output-on-failure -j "$(nproc)")
  PYTHONPATH="$PWD/python" "$PYTHON" -m pytest -q -n "${ONNXTRAIN_TEST_WORKERS:-auto}" tests/python "${selection[@]}" "$@"
done
