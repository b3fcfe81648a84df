"""The TorchScript exporter's modules, wherever this torch keeps them: the one place that knows
how they moved between torch versions. torch 1.13 and 2.x up to 2.8 have them at torch.onnx.*;
later 2.x keep them at torch.onnx._internal.torchscript_exporter.* (torch.onnx.symbolic_* are
shims there that re-export only public names, and symbolic functions are private), and
torch.onnx.export takes dynamo=True by default."""
import contextlib
import importlib
import inspect

import torch
import torch.nn.functional


def _module(name):
    for path in (f"torch.onnx._internal.torchscript_exporter.{name}", f"torch.onnx.{name}"):
        try:
            return importlib.import_module(path)
        except ImportError:
            continue
    raise ImportError(f"this torch {torch.__version__} has no TorchScript ONNX exporter module {name}")


symbolic_helper = _module("symbolic_helper")
opset9 = _module("symbolic_opset9")
opset10 = _module("symbolic_opset10")
opset11 = _module("symbolic_opset11")
type_utils = _module("_type_utils")
SymbolicValueError = torch.onnx.errors.SymbolicValueError
register_custom_op_symbolic = torch.onnx.register_custom_op_symbolic
unregister_custom_op_symbolic = torch.onnx.unregister_custom_op_symbolic


def dtype_of_scalar_type(scalar_type):
    """The torch dtype of what symbolic_helper._try_get_scalar_type returns: a name ("Float") on
    torch 1.13, a JitScalarType on torch 2.x (where from_name became _from_name)."""
    jit = type_utils.JitScalarType
    if isinstance(scalar_type, jit):
        return scalar_type.dtype()
    from_name = getattr(jit, "from_name", None) or jit._from_name
    return from_name(scalar_type).dtype()


_TAKES_DYNAMO = "dynamo" in inspect.signature(torch.onnx.export).parameters


def export(*args, **kwargs):
    """torch.onnx.export through the TorchScript-based exporter, on every torch version."""
    if _TAKES_DYNAMO:
        kwargs["dynamo"] = False
    return torch.onnx.export(*args, **kwargs)


@contextlib.contextmanager
def tracing_workarounds():
    """While the trace runs: torch 2.x's max_unpool checks its output size with torch._check_value,
    which refuses the traced sizes (0-d tensors) that output_size=x.shape[2:] gives under the
    tracer; the check runs on their values instead, which are the ones the trace computes with."""
    original = getattr(torch.nn.functional, "_check_unpool_output_size", None)
    if original is None:  # torch 1.13 checks in plain Python
        yield
        return

    def check_values(output_size, dim):
        return original([int(v) for v in output_size], dim)

    torch.nn.functional._check_unpool_output_size = check_values
    try:
        yield
    finally:
        torch.nn.functional._check_unpool_output_size = original
