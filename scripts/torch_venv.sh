#!/usr/bin/env bash
# A virtual environment with PyPI's torch VERSION, created once and reused (by CI too): PyPI's x86_64
# torch is a CUDA build of several GB, so it is never downloaded twice. It lives outside the clone,
# in $ONNXTRAIN_VENV_ROOT (default ~/.cache/onnxtrain/), one per torch version, and is complete only
# once its stamp file exists, so an interrupted install is redone. Prints the venv's python.
# VERSION "system" is Debian's own torch 1.13: a venv over /usr/bin/python3 that sees its packages
# (--system-site-packages) and adds only the model zoos.
#   scripts/torch_venv.sh 2.15.0 [extra pip requirements...]
#   scripts/torch_venv.sh system [extra pip requirements...]
set -euo pipefail
version=${1:?usage: scripts/torch_venv.sh TORCH_VERSION|system [REQUIREMENT...]}
shift
root=${ONNXTRAIN_VENV_ROOT:-$HOME/.cache/onnxtrain}
# The model zoos the suite trains (tests/python/test_hf_models.py, test_timm_models.py), in the
# newest versions that support each torch and one another (accelerate is transformers.Trainer's);
# pinned, because pip upgrades torch itself to satisfy a newer one.
case "$version" in
  system) zoo=("transformers==4.44.2" "timm==1.0.9" "accelerate==0.33.0") ;;
  2.4.*) zoo=("transformers==4.57.6" "timm==1.0.31" "accelerate==1.10.1") ;;
  *) zoo=("transformers==5.24.0" "timm==1.0.31" "accelerate==1.16.0") ;;
esac
if [ "$version" = system ]; then
  # Debian's torch must be installed before the venv: pip would otherwise satisfy the zoos' torch
  # requirement from PyPI, and "torch 1.13" would silently be PyPI's newest.
  if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    "$(dirname "$0")/setup.sh" >&2
  fi
  venv="$root/debian-system"
  requirements=("${zoo[@]}" "$@")
  venv_options=(--system-site-packages)
else
  venv="$root/torch-$version"
  # torchvision is left to pip to match the torch version; onnx and onnxscript are what the
  # torch.export-based exporter needs; matplotlib draws bench/run's charts.
  requirements=("torch==$version" torchvision onnx onnxscript numpy pytest pytest-xdist matplotlib "${zoo[@]}" "$@")
  venv_options=()
fi
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
  [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "${venv_options[@]}" "$venv" >&2
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  "$venv/bin/python" -m pip install -q "${requirements[@]}" >&2
  if [ "$version" = system ]; then
    system_torch=$(/usr/bin/python3 -c 'import torch; print(torch.__file__)')
    venv_torch=$("$venv/bin/python" -c 'import torch; print(torch.__file__)' 2>/dev/null)
    if [ "$venv_torch" != "$system_torch" ]; then
      echo "torch_venv.sh: $venv imports torch from $venv_torch, not Debian's $system_torch; remove the venv and run again" >&2
      exit 1
    fi
  fi
  touch "$stamp"
fi
echo "$venv/bin/python"
