#!/usr/bin/env bash
# Installs a build into a temporary prefix, then builds examples/cpp against that installed copy
# (a copy of its sources, in a fresh build directory: nothing points into this tree) and runs it,
# and runs the installed `onnxtrain` tool. Also checks that only the public headers are installed
# and that the engine's dependencies stay off the consumer's compile line.
#   scripts/test_install.sh [BUILD_DIR]      (default: build; ctest runs it as install_consumer)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=$(cd "${1:-build}" && pwd)
PYTHON=${PYTHON:-/usr/bin/python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/onnxtrain-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

cmake --install "$BUILD_DIR" --prefix "$prefix" > "$work/install.log"
headers=$(cd "$prefix/include" && find . -type f | sort | tr '\n' ' ')
if [ "$headers" != "./onnxtrain/error.h ./onnxtrain/onnxtrain.h " ]; then
  echo "test_install: installed headers are '$headers', expected only include/onnxtrain/*.h" >&2
  exit 1
fi
for f in bin/onnxtrain lib/cmake/onnxtrain/onnxtrainConfig.cmake lib/cmake/onnxtrain/onnxtrainConfigVersion.cmake; do
  [ -e "$prefix/$f" ] || { echo "test_install: $f was not installed" >&2; exit 1; }
done

cp -r examples/cpp "$work/example"
cmake -S "$work/example" -B "$work/example-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON > "$work/configure.log"
if grep -Eiq 'onnx_proto|protobuf|dnnl|openblas' "$work/example-build/compile_commands.json" ||
   grep -q "$PWD" "$work/example-build/compile_commands.json"; then
  echo "test_install: the consumer's compile line names onnxtrain's internals:" >&2
  cat "$work/example-build/compile_commands.json" >&2
  exit 1
fi
cmake --build "$work/example-build" > "$work/build.log"

"$PYTHON" "$work/example/make_model.py" "$work/mlp.onnx"
(cd "$work" && ./example-build/train_example mlp.onnx artifacts)

# The installed tool runs from the prefix (its RUNPATH finds the installed library).
"$prefix/bin/onnxtrain" --help > /dev/null
# ldd's output is taken whole first: `ldd | grep -q` under pipefail fails whenever grep stops
# reading early (ldd dies of SIGPIPE), which made this check flaky.
libraries=$(ldd "$prefix/bin/onnxtrain")
if grep -q "not found" <<< "$libraries"; then
  echo "$libraries" >&2
  exit 1
fi
grep -q "libonnxtrain.so.* => $prefix/" <<< "$libraries" ||
  { echo "test_install: bin/onnxtrain does not load the installed libonnxtrain" >&2; echo "$libraries" >&2; exit 1; }
"$prefix/bin/onnxtrain" export "$work/artifacts" --out "$work/exported.onnx" > /dev/null
echo "test_install: OK (installed, built and ran examples/cpp against $prefix)"
