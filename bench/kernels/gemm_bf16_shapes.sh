#!/usr/bin/env bash
# Builds and runs gemm_bf16_shapes.cc against the system oneDNN (the one the engine links), at one
# thread. Usage: bench/kernels/gemm_bf16_shapes.sh
set -euo pipefail
cd "$(dirname "$0")"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
g++ -O2 -fopenmp gemm_bf16_shapes.cc -o "$out/gemm_bf16_shapes" -ldnnl
OMP_NUM_THREADS=1 "$out/gemm_bf16_shapes"
