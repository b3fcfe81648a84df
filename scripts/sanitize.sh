#!/usr/bin/env bash
# The C++ suite under AddressSanitizer + UndefinedBehaviorSanitizer (clang; any report is fatal).
# Builds into build-asan/ (ONNXTRAIN_SANITIZE=ON, which also builds the fuzz target), then runs ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build_asan.sh
# Leak checking stays on; protobuf's and oneDNN's process-lifetime singletons are not leaks we own.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/fuzz/lsan_suppressions.txt}
(cd build-asan && ctest --output-on-failure -j "$(nproc)" "$@")
