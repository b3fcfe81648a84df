"""Builds and runs the same small module in a fresh process (for the cache test)."""
import logging
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.environ.get("ONNXTRAIN_PYTHONPATH", os.path.join(os.path.dirname(__file__), "..", "..", "python")))
import onnxtrain  # noqa: E402
from onnxtrain import _engine_calls as ortmodule  # noqa: E402

os.environ["ONNXTRAIN_EXPORT_IN_PROCESS"] = "1"  # so that this process can count the exports
exports = []
original = ortmodule.export  # the capture interface's export, whichever backend runs


def counting_export(*args, **kwargs):
    exports.append(1)
    return original(*args, **kwargs)


ortmodule.export = counting_export
logging.basicConfig(level=logging.INFO, format="%(name)s %(message)s")
torch.manual_seed(0)
model = onnxtrain.ORTModule(nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2)),
                            onnxtrain.DebugOptions(log_level=onnxtrain.LogLevel.INFO))
out = model(torch.ones(4, 3))
out.sum().backward()
assert "ORTModuleFunction" in type(out.grad_fn).__name__
print("EXPORTS", len(exports))
print("OUTPUT", out.sum().item())
