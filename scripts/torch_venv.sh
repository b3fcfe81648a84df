#!/usr/bin/env bash
# A virtual environment with PyPI's torch VERSION, created once and reused (by CI too): PyPI's x86_64
# torch is a CUDA build of several GB, so it is never downloaded twice. It lives outside the clone,
# in $ONNXTRAIN_VENV_ROOT (default ~/.cache/onnxtrain/), one per torch version, and is complete only
# once its stamp file exists, so an interrupted install is redone. Prints the venv's python.
#   scripts/torch_venv.sh 2.15.0 [extra pip requirements...]
set -euo pipefail
version=${1:?usage: scripts/torch_venv.sh TORCH_VERSION [REQUIREMENT...]}
shift
root=${ONNXTRAIN_VENV_ROOT:-$HOME/.cache/onnxtrain}
venv="$root/torch-$version"
# torchvision is left to pip to match the torch version; onnx and onnxscript are what the
# torch.export-based exporter needs; matplotlib draws bench/run's charts.
requirements=("torch==$version" torchvision onnx onnxscript numpy pytest pytest-xdist matplotlib "$@")
# The stamp names what was installed: a new requirement installs again, into the same venv.
stamp="$venv/.complete-$(printf '%s\n' "${requirements[@]}" | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  # Debian's /usr/bin/python3 with its venv module: the same interpreter on every Debian 12 machine.
  if ! /usr/bin/python3 -c 'import ensurepip' 2>/dev/null; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-venv >&2
  fi
  [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv" >&2
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  "$venv/bin/python" -m pip install -q "${requirements[@]}" >&2
  touch "$stamp"
fi
echo "$venv/bin/python"
