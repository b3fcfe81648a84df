"""The exporter stays out of the training process. A module's first export runs in a forked child
(capture/common.py), so the training process never imports the onnx package, protobuf's Python
side or onnxscript's ATen-to-ONNX tables (about 40 MB and 1 s on torch 2.x) for a module exported
once. From a process's second export on, the torch.export backend builds those tables in the
process itself, so that each later child reuses them instead of rebuilding them."""
import os
import subprocess
import sys
import textwrap

import onnxtrain
from onnxtrain import capture

PACKAGE_DIR = os.path.dirname(os.path.dirname(onnxtrain.__file__))

WORKER = """
import sys
import torch, torch.nn as nn, onnxtrain

def loaded():
    return sorted(name for name in ("onnx", "onnxscript", "google.protobuf") if name in sys.modules)

print("IMPORT", ",".join(loaded()))
torch.manual_seed(0)
for width in (8, 12):  # two modules: two exports
    model = onnxtrain.ORTModule(nn.Sequential(nn.Linear(4, width), nn.ReLU(), nn.Linear(width, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(6, 4)).square().mean().backward()
        opt.step()
    assert model.engine_runs == 2
    print("EXPORT", ",".join(loaded()))
"""


def run_worker():
    env = dict(os.environ, PYTHONPATH=PACKAGE_DIR, ONNXTRAIN_FALLBACK="0")
    env.pop("ONNXTRAIN_EXPORT_IN_PROCESS", None)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(WORKER)], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return [line.split(" ", 1) for line in done.stdout.splitlines() if line.startswith(("IMPORT", "EXPORT"))]


def test_the_training_process_loads_the_exporter_only_from_its_second_export_on():
    (_, imported), (_, first), (_, second) = run_worker()
    assert imported == ""
    assert first == "", f"the first export loaded {first} into the training process"
    if capture.backend_name() == "torch_export":
        assert "onnxscript" in second.split(","), "the second export should have prepared the registry here"
    else:  # the TorchScript backend has no tables to share: every export stays in its child
        assert second == ""
