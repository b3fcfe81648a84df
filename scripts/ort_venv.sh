#!/usr/bin/env bash
# A virtual environment with ONNX Runtime's own ORTModule (onnxruntime-training-cpu 1.19.2, the last
# release of the training wheels), created once and reused, like scripts/torch_venv.sh: it lives in
# $ONNXTRAIN_VENV_ROOT (default ~/.cache/onnxtrain/) as ort-1.19.2 and is complete only once its stamp
# file exists, so an interrupted install is redone. Prints the venv's python.
#   scripts/ort_venv.sh [extra pip requirements...]
# ORTModule also needs its torch C++ extensions (aten_op_executor, torch_interop_utils) compiled
# against the installed torch, with g++ and Python.h; without them ORTModule(...) raises
# "ORTModule's extensions were not detected". They are built here, then checked by one training step.
# torch: 2.6.0 is the newest that works (2.4.1 works too). From 2.7 on, PyPI's libtorch_python.so no
# longer exports torch::autograd::PyNode, so the extensions build but fail to load ("undefined symbol:
# _ZTIN5torch8autograd6PyNodeE"). ONNXTRAIN_ORT_TORCH picks another torch for this same venv.
# Run ORTModule with ORTMODULE_FALLBACK_POLICY=FALLBACK_DISABLE to make it raise instead of silently
# running the model in PyTorch; ORTMODULE_LOG_LEVEL=ERROR silences its banner.
set -euo pipefail
root=${ONNXTRAIN_VENV_ROOT:-$HOME/.cache/onnxtrain}
torch_version=${ONNXTRAIN_ORT_TORCH:-2.6.0}
case "$torch_version" in
  1.* | 2.[0-6] | 2.[0-6].*) ;;
  *) echo "ort_venv.sh: torch $torch_version cannot load ORTModule 1.19.2's extensions; use 2.6.0 or older" >&2; exit 2 ;;
esac
venv="$root/ort-1.19.2"
# The versions this venv was verified with, pinned so that a later release changes nothing. PyPI's
# x86_64 torch is a CUDA build (download.pytorch.org's CPU index is not reachable from everywhere);
# ORTModule runs on the CPU with it. ninja builds the extensions (from the venv's bin, put on PATH).
requirements=("torch==$torch_version" "onnxruntime-training-cpu==1.19.2" "onnx==1.23.2" "numpy==2.4.6"
  "protobuf==7.36.2" "transformers==4.44.2" "timm==1.0.9" "ninja==1.13.2" "$@")
# The stamp names what was installed: a new requirement installs again, into the same venv.
stamp="$venv/.complete-$(printf '%s\n' "${requirements[@]}" | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  # Debian's /usr/bin/python3 with its venv module, g++ and Python.h for the torch C++ extensions.
  missing=()
  /usr/bin/python3 -c 'import ensurepip' 2>/dev/null || missing+=(python3-venv)
  command -v c++ >/dev/null && command -v g++ >/dev/null || missing+=(g++)
  include=$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  [ -f "$include/Python.h" ] || missing+=(python3-dev)
  if [ ${#missing[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  fi
  rm -f "$venv"/.complete-*
  [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv" >&2
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  echo "ort_venv.sh: installing ${requirements[*]} into $venv" >&2
  "$venv/bin/python" -m pip install -q "${requirements[@]}" >&2
  # The extensions are built inside the installed package and must match this torch: drop old ones.
  ext_dir=$("$venv/bin/python" -c 'import importlib.util, os
print(os.path.join(os.path.dirname(importlib.util.find_spec("onnxruntime").origin),
                   "training", "ortmodule", "torch_cpp_extensions"))')
  rm -rf "$ext_dir/build"
  rm -f "$ext_dir"/*.so
  log="$venv/torch_cpp_extensions-build.log"
  echo "ort_venv.sh: building ORTModule's torch C++ extensions (a few minutes; log in $log)" >&2
  if ! PATH="$venv/bin:$PATH" "$venv/bin/python" -m onnxruntime.training.ortmodule.torch_cpp_extensions.install \
    >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    echo "ort_venv.sh: building the torch C++ extensions failed; see $log" >&2
    exit 1
  fi
  # The extensions load, and ORTModule (not a fallback to PyTorch) trains one step.
  ORTMODULE_FALLBACK_POLICY=FALLBACK_DISABLE ORTMODULE_LOG_LEVEL=ERROR "$venv/bin/python" - >&2 <<'EOF'
import torch
from onnxruntime.training.ortmodule.torch_cpp_extensions import aten_op_executor, torch_interop_utils  # noqa: F401
from onnxruntime.training.ortmodule import ORTModule

torch.manual_seed(0)
model = ORTModule(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)))
loss = torch.nn.functional.cross_entropy(model(torch.randn(4, 8)), torch.tensor([0, 1, 2, 3]))
loss.backward()
assert not model._torch_module._execution_manager(True)._fallback_manager.is_pending()
print(f"ort_venv.sh: ORTModule trains (loss {loss.item():.4f})")
EOF
  touch "$stamp"
fi
echo "$venv/bin/python"
