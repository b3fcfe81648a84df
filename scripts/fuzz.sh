#!/usr/bin/env bash
# Fuzzes the model loader and the executor: bytes -> load -> inference and training sessions -> a
# run on small random inputs (tests/fuzz/). Usage: scripts/fuzz.sh [seconds, default 60].
# FUZZ_SEED fixes libFuzzer's seed (CI uses 1, so that its short run explores the same inputs
# each time); unset, each run explores new ones.
# Seeds: ONNX's node-test models plus our regression corpus. A crashing input is written to
# tests/fuzz/regressions/ (as crash-<hash>); give it a name and commit it, and the normal test suite
# replays it from then on (tests/cpp/test_fuzz_regressions.cc).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
./scripts/build_asan.sh onnxtrain_fuzz_model
corpus=build-asan/fuzz-corpus
mkdir -p "$corpus"
if [ -z "$(ls -A "$corpus")" ]; then
  for m in /usr/share/libonnx-testdata/data/node/*/model.onnx; do
    cp "$m" "$corpus/$(basename "$(dirname "$m")").onnx"
  done
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
./build-asan/onnxtrain_fuzz_model "$corpus" tests/fuzz/regressions \
  -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len=200000 \
  -artifact_prefix=tests/fuzz/regressions/ -print_final_stats=1 ${FUZZ_SEED:+-seed=$FUZZ_SEED}
