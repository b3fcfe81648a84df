#!/usr/bin/env bash
# Configures and builds build-asan/: clang, ASan+UBSan, libFuzzer instrumentation
# (ONNXTRAIN_SANITIZE=ON). Usage: scripts/build_asan.sh [ninja target...]; all targets by default.
# Used by scripts/sanitize.sh and scripts/fuzz.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
source scripts/compiler_cache.sh
if ! command -v clang++ >/dev/null; then
  echo "build_asan: clang++ not found (scripts/setup.sh installs clang)" >&2
  exit 1
fi
if [ ! -f build-asan/build.ninja ]; then
  CC=clang CXX=clang++ cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Release -DONNXTRAIN_SANITIZE=ON "${cache_args[@]}"
fi
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build build-asan -j "$(nproc)" "${targets[@]}"
