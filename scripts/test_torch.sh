#!/usr/bin/env bash
# The Python suite on PyPI's torch VERSION (default: the newest this project supports), in the venv
# scripts/torch_venv.sh makes once and reuses. The engine is the one scripts/build.sh built: the
# extension links no torch, so it serves every torch version. One pytest worker per core, as in
# scripts/test.sh.
#   scripts/test_torch.sh [VERSION] [pytest arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-2.15.0}
shift || true
./scripts/build.sh
python_bin=$(./scripts/torch_venv.sh "$version")
echo "== Python tests on torch $version ($python_bin)"
PYTHONPATH="$PWD/python" "$python_bin" -m pytest -q -n "${ONNXTRAIN_TEST_WORKERS:-auto}" tests/python "$@"
