#!/usr/bin/env bash
# The main job: builds, then trains a small CNN on scikit-learn's handwritten digits with onnxtrain
# and with plain PyTorch, each in fresh processes of its own at equal threads, and compares them.
# Second part: an MLP on the same digits exported to ONNX and trained with the `onnxtrain`
# command-line tool alone (demo/train_digits_cli.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
PYTHON=${PYTHON:-/usr/bin/python3}
PYTHONPATH="$PWD/python" "$PYTHON" demo/train_digits.py "$@"
echo
echo "== part 2: a digits MLP as an ONNX model, trained by the command-line tool"
PYTHON="$PYTHON" demo/train_digits_cli.sh build/onnxtrain
