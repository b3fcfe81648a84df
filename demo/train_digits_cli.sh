#!/usr/bin/env bash
# Second part of the demo: the digits MLP of train_digits.py, exported to ONNX once, then trained,
# evaluated and exported by the `onnxtrain` command-line tool alone.
#   demo/train_digits_cli.sh [ONNXTRAIN_BINARY]   (default: build/onnxtrain)
set -euo pipefail
cd "$(dirname "$0")/.."
ONNXTRAIN=${1:-build/onnxtrain}
PYTHON=${PYTHON:-/usr/bin/python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/onnxtrain-digits.XXXXXX")
trap 'rm -rf "$work"' EXIT

"$PYTHON" demo/export_digits.py "$work"
set -x
"$ONNXTRAIN" artifacts "$work/digits.onnx" --out "$work/artifacts" --loss cross_entropy --optimizer sgd \
  --lr 0.05 --momentum 0.9
"$ONNXTRAIN" eval "$work/artifacts" --data "$work/test.npz"
"$ONNXTRAIN" train "$work/artifacts" --data "$work/train.npz" --epochs 15 --batch-size 64 --shuffle --seed 0
"$ONNXTRAIN" eval "$work/artifacts" --data "$work/test.npz"
"$ONNXTRAIN" export "$work/artifacts" --out "$work/digits_trained.onnx"
{ set +x; } 2>/dev/null
"$PYTHON" -c "import onnx, sys; onnx.checker.check_model(onnx.load(sys.argv[1])); print('digits_trained.onnx passes onnx.checker')" \
  "$work/digits_trained.onnx"
