"""The TorchScript capture backend (see trace.py). Available on every torch this package supports;
on torch 2.x it is the exporter that torch deprecates."""
from .trace import export_once

NAME = "torchscript"


def unavailable_reason():
    return None


__all__ = ["NAME", "export_once", "unavailable_reason"]
