#!/usr/bin/env bash
# Installs every dependency of onnxtrain from Debian's apt. Safe to run again: apt skips what is present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache
  libonnx-dev libprotobuf-dev protobuf-compiler libonnx-testdata
  libopenblas-dev libdnnl-dev
  pybind11-dev libdlpack-dev libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libzip-dev
  python3-dev python3-torch python3-torchvision python3-onnx python3-numpy python3-pytest python3-pytest-xdist
  python3-sklearn python3-matplotlib python3-tqdm python3-protobuf python3
  clang libclang-rt-14-dev llvm
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
