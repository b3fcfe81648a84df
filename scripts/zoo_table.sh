#!/usr/bin/env bash
# README.md's parity tables of the HuggingFace and timm models (between the zoo markers): each model
# trained through the engine for 3 steps against eager float32 and float64 (tests/python/zoo_parity.py),
# on Debian's torch 1.13 (TorchScript capture) and on the newest supported PyPI torch (torch.export
# capture), with no fallback of either kind. A model that cannot train gets a row that says why.
#   scripts/zoo_table.sh [TORCH_VERSION]     (default 2.15.0; the venvs are scripts/torch_venv.sh's)
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-2.15.0}
./scripts/build.sh > /dev/null
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for interpreter in "$(./scripts/torch_venv.sh system)" "$(./scripts/torch_venv.sh "$version")"; do
  # shellcheck disable=SC2016
  "$interpreter" -c 'import torch, transformers, timm, sys
sys.path.insert(0, "python"); import onnxtrain.capture as c
print(f"\n**torch {torch.__version__.split(chr(43))[0]}** ({c.backend_name()} capture; transformers "
      f"{transformers.__version__}, timm {timm.__version__}):\n")' >> "$out"
  for suite in test_hf_models test_timm_models; do
    PYTHONPATH="$PWD/python" "$interpreter" "tests/python/$suite.py" | grep "^|" >> "$out"
    echo >> "$out"
  done
done
/usr/bin/python3 - "$out" <<'EOF'
import sys
begin, end = "<!-- zoo:begin -->", "<!-- zoo:end -->"
table = open(sys.argv[1]).read().strip()
text = open("README.md").read()
i, j = text.index(begin), text.index(end)
open("README.md", "w").write(text[:i + len(begin)] + "\n" + table + "\n" + text[j:])
print("[zoo_table] README.md updated")
EOF
