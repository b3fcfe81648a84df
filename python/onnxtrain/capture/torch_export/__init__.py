"""The torch.export capture backend (see program.py): torch.export's training IR, turned into ONNX
by torch's dynamo-based exporter with onnxscript's ATen functions, corrected where they differ
from eager (translations.py) and brought to the opset the engine reads (opset17.py)."""
NAME = "torch_export"


def unavailable_reason():
    """None, or why this torch cannot use the backend."""
    import torch

    if not hasattr(torch, "export") or not hasattr(getattr(torch.export, "Dim", None), "AUTO"):
        return f"torch {torch.__version__} has no torch.export.Dim.AUTO (torch 2.6 or later is needed)"
    import importlib.util

    # Found, not imported: onnxscript's import alone is tens of MB, which only the exporting
    # process (a forked child, capture/common.py) needs to carry.
    if importlib.util.find_spec("onnxscript") is None:  # the dynamo exporter's ATen-to-ONNX functions
        return "the package onnxscript is not installed (pip install onnxscript)"
    return None


def prepare():
    from .program import prepare as build

    build()


def export_once(module, tensors, input_schema, training):
    from .program import export_once as export

    return export(module, tensors, input_schema, training)


__all__ = ["NAME", "export_once", "prepare", "unavailable_reason"]
