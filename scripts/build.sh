#!/usr/bin/env bash
# Installs dependencies (idempotent), then configures and builds everything into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
source scripts/compiler_cache.sh
PYTHON=${PYTHON:-/usr/bin/python3}
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$PYTHON" "${cache_args[@]}"
fi
cmake --build build -j "$(nproc)"
