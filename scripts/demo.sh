#!/usr/bin/env bash
# The main job: builds, then trains an MLP on scikit-learn's handwritten digits with onnxtrain
# and with plain PyTorch, and compares them. Second part: the same MLP exported to ONNX and
# trained with the `onnxtrain` command-line tool alone (demo/train_digits_cli.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
PYTHON=${PYTHON:-/usr/bin/python3}
PYTHONPATH="$PWD/python" "$PYTHON" demo/train_digits.py "$@"
echo
echo "== part 2: the digits MLP as an ONNX model, trained by the command-line tool"
PYTHON="$PYTHON" demo/train_digits_cli.sh build/onnxtrain
