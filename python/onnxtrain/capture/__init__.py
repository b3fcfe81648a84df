"""Graph capture: how a module called on its inputs becomes the ONNX graph the engine trains.

One interface, one module per backend. A backend is a module with
  NAME                  its name, as ONNXTRAIN_CAPTURE names it;
  unavailable_reason()  None, or why this torch cannot use it;
  export_once(module, tensors, input_schema, training) -> Exported
                        one trace of `module` on the flat inputs (see common.FlatModule).
What every backend shares (the Exported result, its errors, the driver that traces a cut-down batch
first in a forked child) is in common.py; the front end calls export() below and nothing else.
"""
import os

from . import common, torchscript
from .common import TRACE_BATCH, BufferUpdates, Exported, ExportError, InputDtypeError, diagnose_input_dtypes

BACKENDS = {torchscript.NAME: torchscript}
DEFAULT = torchscript.NAME


def backend():
    """The backend ONNXTRAIN_CAPTURE names, or the default."""
    name = os.environ.get("ONNXTRAIN_CAPTURE", "") or DEFAULT
    chosen = BACKENDS.get(name)
    if chosen is None:
        raise ValueError(f"ONNXTRAIN_CAPTURE={name!r} names no capture backend; valid: {', '.join(sorted(BACKENDS))}")
    why = chosen.unavailable_reason()
    if why is not None:
        raise ValueError(f"ONNXTRAIN_CAPTURE={name!r}: {why}")
    return chosen


def export(module, tensors, input_schema, training, full_trace=False):
    """Exports `module` called on the inputs (tensors, input_schema) with the chosen backend."""
    return common.export(backend().export_once, module, tensors, input_schema, training, full_trace)


__all__ = ["TRACE_BATCH", "BufferUpdates", "ExportError", "Exported", "InputDtypeError", "backend",
           "diagnose_input_dtypes", "export"]
