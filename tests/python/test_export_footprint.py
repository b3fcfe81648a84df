"""The exporter stays out of the training process. A module's first export runs in a forked child
(capture/common.py), so the training process never imports the onnx package, protobuf's Python
side or onnxscript's ATen-to-ONNX tables (about 40 MB and 1 s on torch 2.x) for a module exported
once. From a process's second export on, the torch.export backend builds those tables in the
process itself, so that each later child reuses them instead of rebuilding them."""
import os
import subprocess
import sys
import textwrap

import pytest

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


NO_AUTOGRAD_IN_CHILDREN = """
import os
import torch, torch.nn as nn, onnxtrain

def autograd_runs_in_a_forked_child():
    pid = os.fork()
    if pid == 0:
        try:
            x = torch.zeros((), requires_grad=True)
            torch.autograd.grad(x * 2, x)
            os._exit(0)
        except RuntimeError:
            os._exit(1)
    return os.waitpid(pid, 0)[1] == 0

class IgnoresScale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        return x * scale

    @staticmethod
    def backward(ctx, grad):
        return grad * 5, None

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 4)
        self.scale = nn.Parameter(torch.full((4,), 1.5))

    def forward(self, x):
        return IgnoresScale.apply(self.l(x), self.scale)

# An export in this process, then its first backward: where torch.export's fake tensors made CUDA
# count devices, torch's autograd engine starts device threads and then refuses to run in any
# child forked later, the export's child included.
os.environ["ONNXTRAIN_EXPORT_IN_PROCESS"] = "1"
onnxtrain.ORTModule(nn.Linear(3, 2))(torch.randn(2, 3)).sum().backward()
del os.environ["ONNXTRAIN_EXPORT_IN_PROCESS"]
print("CHILD_AUTOGRAD", autograd_runs_in_a_forked_child())
model = onnxtrain.ORTModule(Model())
model(torch.randn(2, 3)).sum().backward()
assert model.engine_runs == 1
print("SCALE_GRAD", model.module.scale.grad)
"""


def test_a_none_gradient_stays_none_when_autograd_cannot_run_in_the_export_child():
    """The probe of a custom Function runs its backward where the export runs, to learn which
    inputs get None. In a child forked after torch's autograd engine started threads, autograd
    refuses to run: the export moves into the process instead of losing that knowledge (which gave
    those inputs a gradient of zeros where eager leaves .grad None)."""
    env = dict(os.environ, PYTHONPATH=PACKAGE_DIR, ONNXTRAIN_FALLBACK="0")
    env.pop("ONNXTRAIN_EXPORT_IN_PROCESS", None)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(NO_AUTOGRAD_IN_CHILDREN)], capture_output=True,
                          text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.startswith(("CHILD_", "SCALE_")))
    if lines["CHILD_AUTOGRAD"] == "True":
        pytest.skip("autograd still runs in a child forked after an export in the process (this torch's "
                    "capture made no device count)")
    assert lines["SCALE_GRAD"] == "None", done.stdout + done.stderr
