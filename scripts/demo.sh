#!/usr/bin/env bash
# The main job: builds, then trains an MLP on scikit-learn's handwritten digits with onnxtrain
# and with plain PyTorch, and compares them.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
PYTHON=${PYTHON:-/usr/bin/python3}
PYTHONPATH="$PWD/python" "$PYTHON" demo/train_digits.py "$@"
